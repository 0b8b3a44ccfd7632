"""The allocator probe (microbench/step/allocator.py): a step that frees and allocates the same large buffers
page-faults them in again every call under glibc's adaptive thresholds, and not once they are fixed. Run in a
child process: mallopt cannot be undone, and the test process keeps its allocator as it was."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from microbench.step import allocator

from .conftest import REPO

CHILD = """
import json, torch
from microbench.core.config import TimingSettings
from microbench.core.device import cpu_device
from microbench.harness.timing import time_calls
from microbench.step import allocator

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
    p = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=300, cwd=REPO,
                       env={**os.environ, "PYTHONPATH": str(REPO)}, check=False)
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
