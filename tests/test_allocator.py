"""The allocator probe (microbench/decompose/allocator.py): a step that frees and allocates the same large buffers
page-faults them in again every call under glibc's adaptive thresholds, and not once they are fixed. Run in a
child process: mallopt cannot be undone, and the test process keeps its allocator as it was."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from microbench.decompose import allocator

from .conftest import REPO

CHILD = """
import json, torch
from microbench.core.config import TimingSettings
from microbench.core.device import cpu_device
from microbench.roofline.timing import time_calls
from microbench.decompose import allocator

def step():  # 20 buffers of 1 MiB, freed at the end: a training step's activations in small
    xs = [torch.ones(256 * 1024) for _ in range(20)]
    return sum(float(x[0]) for x in xs)

# glibc's initial thresholds (128 KiB), held there: how far they have adapted by now depends on what the imports
# allocated and freed (one run in three had adapted past 1 MiB), a step of a real model's size outgrows them anyway
libc = allocator._libc()
assert libc.mallopt(-3, 128 * 1024) == 1 and libc.mallopt(-1, 128 * 1024) == 1
before = time_calls(step, cpu_device(), TimingSettings().exactly(10))
after = allocator.probe(step, cpu_device(), TimingSettings().exactly(10), None)
print(json.dumps([before.as_dict(), after.as_dict()]))
"""


def test_the_fixed_thresholds_stop_the_page_faults():
    if allocator._libc() is None:
        pytest.skip("not glibc: no mallopt thresholds")
    if "LD_PRELOAD" in os.environ or any(k.startswith("MALLOC_") for k in os.environ):
        pytest.skip("this environment already chose its allocator or its thresholds")
    p = subprocess.run(
        [sys.executable, "-c", CHILD],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        check=False,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    before, after = json.loads(p.stdout.strip().splitlines()[-1])
    if "minor_faults_per_call" not in before:
        pytest.skip("no getrusage page-fault counts here")
    # 20 MiB in 4 KiB pages is 5,120 faults a call where the heap's top goes back to the OS after each call
    assert before["minor_faults_per_call"] > 2000 and before["sys_ms_per_call"] > 0
    assert after["minor_faults_per_call"] < 100


def test_the_fix_is_printed_from_the_same_data_the_probe_sets():
    env = allocator.env_assignments()
    assert env.split() == [f"{s['env']}={s['value']}" for s in allocator.settings()]
    assert {s["mallopt"] for s in allocator.settings()} == {"M_MMAP_THRESHOLD", "M_TRIM_THRESHOLD", "M_TOP_PAD"}


def test_the_child_probe_times_a_named_workload_in_processes_of_each_setting():
    """child_probe: the workload rebuilt from its name in one process with the defaults and one with the fix in its
    environment, each timing the asked-for steps; pooled, the median of the processes' medians and the widest
    p20 / p80."""
    if allocator._libc() is None:
        pytest.skip("not glibc: no mallopt thresholds")
    spec = {
        "model": "tests.findings_models:digits_loader",
        "batch": 4,
        "dtype": "fp32",
        "num_workers": None,
        "threads": 1,
        "timed_steps": 3,
        "config": None,
    }
    out = allocator.child_probe(spec, 1, 300.0)
    assert not isinstance(out, str), out
    assert out["processes"] == 1
    for side in ("default", "fixed"):
        t = out[side]
        assert t["reps"] == 3 and len(t["per_process"]) == 1 and t["p20"] <= t["median"] <= t["p80"]


def test_a_child_that_fails_is_one_line_naming_why():
    spec = {
        "model": "no_such_module_here:factory",
        "batch": 4,
        "dtype": "fp32",
        "num_workers": None,
        "threads": 1,
        "timed_steps": 3,
        "config": None,
    }
    out = allocator.child_probe(spec, 1, 300.0)
    assert isinstance(out, str) and out.startswith("the allocator probe's child process failed (exit 1): ")
    assert "no_such_module_here" in out and "\n" not in out


def test_pooled_processes_span_every_process_spread():
    a = {
        "median": 10.0,
        "p20": 9.0,
        "p80": 11.0,
        "reps": 5,
        "noise": [],
        "sys_ms_per_call": 2.0,
        "minor_faults_per_call": 100.0,
    }
    b = {
        "median": 14.0,
        "p20": 13.0,
        "p80": 16.0,
        "reps": 5,
        "noise": ["bimodal"],
        "sys_ms_per_call": 4.0,
        "minor_faults_per_call": 300.0,
    }
    assert allocator.pooled([a, b]) == {
        "median": 12.0,
        "p20": 9.0,
        "p80": 16.0,
        "reps": 10,
        "noise": ["bimodal"],
        "per_process": [10.0, 14.0],
        "sys_ms_per_call": 3.0,
        "minor_faults_per_call": 200.0,
    }
