"""The allocator probe of a CPU decomposition: a step that spends its time in the operating system re-faulting the
memory it freed, timed again with glibc malloc's thresholds fixed, so that the allocator finding's saving is
measured, not modelled (findings/engine.py rule_allocator; findings.toml [rules.allocator]).

glibc serves large allocations with mmap and returns them to the OS when they are freed; its mmap threshold adapts
upwards only as far as what it has freed. A training step that allocates the same large activations and gradients
every step then maps, zeroes and faults in those pages again each time: 6,000 - 10,000 minor faults and 9 - 22 ms of
system time in a 58 - 85 ms step of the spectrogram CNN (tests/findings_models.py). Fixed thresholds
(MALLOC_MMAP_THRESHOLD_ / MALLOC_TRIM_THRESHOLD_ / MALLOC_TOP_PAD_, or the same through mallopt) keep the freed memory
in the process for the next step; jemalloc and tcmalloc do so by design.

Where the workload can be built again from its name (`--model NAME` or `package.module:factory`), the probe times it
in separate processes, with the default thresholds and with the fix in the environment in turn (`child_probe`,
`python -m microbench.decompose.allocator` reading the spec on stdin): the fix acts from a process's start, and processes
of one setting differ by more than the fix saves on some steps (the spectrogram CNN: 69 - 82 ms a step with the
defaults, 52.9 - 54.3 ms with the fix; docs/findings.md). A workload handed over as a Python object cannot be
rebuilt there: the probe then sets the thresholds with mallopt in this process, after every other measurement of
the decomposition (`probe`); mallopt cannot be undone (the adaptive threshold does not come back), so the calling
process keeps them, and the document's notes say so. Its "after" then runs later in the process than its
"before", which credited the transformer with 54 - 75 ms that separate processes did not show."""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import os
import statistics
import subprocess
import sys
from functools import lru_cache

import tomllib

from microbench import models
from microbench.core.config import load_config
from microbench.core.resources import data_file


@lru_cache(maxsize=1)
def settings() -> tuple[dict, ...]:
    """The thresholds (data/allocator.toml): each with its mallopt name and parameter, environment variable, value."""
    return tuple(_data()["glibc"])


@lru_cache(maxsize=1)
def _data() -> dict:
    return tomllib.loads(data_file("allocator.toml").read_text())


def processes() -> int:
    """Processes per setting of the child probe (data/allocator.toml [probe])."""
    return int(_data()["probe"]["processes"])


def env_assignments() -> str:
    """The fix as environment variables: `MALLOC_MMAP_THRESHOLD_=33554432 ...`."""
    return " ".join(f"{s['env']}={s['value']}" for s in settings())


def _libc():
    """glibc, where mallopt is glibc's (musl and macOS have no such thresholds): else None."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        libc.gnu_get_libc_version.restype = ctypes.c_char_p
        libc.gnu_get_libc_version()
    except (OSError, AttributeError, TypeError):
        return None
    return libc


def fix_thresholds() -> bool:
    """mallopt(param, value) for each threshold; False where this is not glibc or a call was refused."""
    libc = _libc()
    if libc is None:
        return False
    return all(libc.mallopt(s["param"], int(s["value"])) == 1 for s in settings())


def probe(step, device, timing_settings, noise):
    """The step timed again with the thresholds fixed, after a few untimed steps that fill the heap it keeps
    (roofline.timing's first call is untimed too); None where they could not be set."""
    from microbench.roofline.timing import time_calls

    if not fix_thresholds():
        return None
    for _ in range(WARM_STEPS):
        step()
    return time_calls(step, device, timing_settings, noise)


# Steps run before the timed ones once the thresholds are fixed: the first frees the mapped buffers of the old
# regime and grows the heap to the step's peak; by the second the step reuses it (0 - 60 faults a step after)
WARM_STEPS = 2


# --- the probe in separate processes (module docstring) ---------------------------------------------------------


def fixed_env() -> dict[str, str]:
    """The fix as the environment of a process: glibc reads it at start-up."""
    return {s["env"]: str(s["value"]) for s in settings()}


def child_probe(spec: dict, n_processes: int, timeout_s: float) -> dict | str:
    """The step of `spec` (model, batch, dtype, num_workers, threads, timed_steps, config) timed in `n_processes`
    child processes with the defaults and as many with the fix, in the order default, fixed, fixed, default, ...
    (a drift from process to process, as the machine warms or quietens, then falls on both alike):
    {"default": pooled, "fixed": pooled, "processes": n}; or why it could not run, one line."""
    runs: dict[str, list[dict]] = {"default": [], "fixed": []}
    for i in range(n_processes):
        for side in ("default", "fixed") if i % 2 == 0 else ("fixed", "default"):
            out = _run_child(spec, fixed_env() if side == "fixed" else {}, timeout_s)
            if isinstance(out, str):
                return out
            runs[side].append(out)
    return {side: pooled(ts) for side, ts in runs.items()} | {"processes": n_processes}


def _run_child(spec: dict, extra_env: dict[str, str], timeout_s: float) -> dict | str:
    # the model spec imports in the child as it did here: the same working directory and module path
    path = os.pathsep.join(p for p in sys.path if p and os.path.isdir(p))
    env = {**os.environ, **extra_env, "PYTHONPATH": path}
    try:
        p = subprocess.run(
            [sys.executable, "-m", "microbench.decompose.allocator"],
            input=json.dumps(spec),
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env=env,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return f"the allocator probe's child process ran past {timeout_s:.0f} s"
    lines = p.stdout.strip().splitlines()
    if p.returncode != 0 or not lines:
        last = (p.stderr.strip().splitlines() or ["no output"])[-1]
        return f"the allocator probe's child process failed (exit {p.returncode}): {last}"
    return json.loads(lines[-1])


def pooled(timings: list[dict]) -> dict:
    """One setting's processes as one timing (core.stats.Timing.as_dict's keys): the median of their medians, and
    p20 / p80 the lowest p20 and the highest p80, so that the finding's range spans the processes' spread as well
    as each one's; system time and faults the median of theirs; the noise of any; `per_process` their medians."""

    def mid(k: str) -> float | None:
        vals = [t[k] for t in timings if t.get(k) is not None]
        return statistics.median(vals) if vals else None

    out = {
        "median": mid("median"),
        "p20": min(t["p20"] for t in timings),
        "p80": max(t["p80"] for t in timings),
        "reps": sum(t["reps"] for t in timings),
        "noise": sorted({r for t in timings for r in t.get("noise") or ()}),
        "per_process": [t["median"] for t in timings],
    }
    for k in ("sys_ms_per_call", "minor_faults_per_call"):
        if mid(k) is not None:
            out[k] = mid(k)
    return out


def _child(spec: dict) -> dict:
    """In the child: the workload built from its name, one untimed step, WARM_STEPS more, and the timed steps."""
    import torch

    from microbench.core.device import cpu_device
    from microbench.models.step import TrainingStep
    from microbench.roofline.timing import time_calls

    torch.set_num_threads(int(spec["threads"]))
    cfg = load_config(spec.get("config"))
    step = TrainingStep(
        models.as_workload(spec["model"]), int(spec["batch"]), "cpu", spec["dtype"], num_workers=spec.get("num_workers")
    )
    for _ in range(1 + WARM_STEPS):
        step()
    return time_calls(step, cpu_device(), cfg.timing.exactly(int(spec["timed_steps"])), cfg.noise).as_dict()


if __name__ == "__main__":
    try:
        print(json.dumps(_child(json.loads(sys.stdin.read()))))
    except Exception as e:  # noqa: BLE001 - the parent reports the last line
        print(f"{type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(1)
