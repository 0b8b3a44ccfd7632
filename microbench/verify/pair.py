"""What a fix really saved: the training steps of two settings of one workload (before and after the fix) timed in
one process, in alternating blocks of steps, so that both see the same machine (promoted from devtools/pair.py,
which keeps its command line and the DDP pairs over this).

One process per setting measured each step on its own, and on our 2-core machines the runs fall into speed modes (a
configuration's step 12 - 14 ms in one run, 17 - 23 ms in the next): paired differences of whole runs spread over
-4 to +11 ms, wider than the savings being checked. Blocks of a few steps each, A B A B ..., put both settings in
every mode; the saving is the median of the paired differences of the blocks' median steps. `run_in_process` runs
one pair in a fresh process (`python -m microbench.verify.pair`, the spec on stdin, the result on stdout), so that
`verify` can take the median over several processes, each with a speed of its own, and an A/A pair (the same
setting twice) in the same way: the saving a null fix shows, the measurement's own noise.

Each setting keeps the intra-op thread count its factory set (torch.set_num_threads), set again before each of its
blocks. The timer is roofline.timing's."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from dataclasses import asdict, dataclass, replace

from microbench import models
from microbench.core.config import TimingSettings
from microbench.core.errors import InputError


@dataclass(frozen=True)
class Setting:
    """One side of the pair: a workload (a decompose --model spec) and what is set around it."""

    spec: str
    dtype: str = "fp32"  # fp32 (IEEE, TF32 off), tf32, bf16 / fp16 (autocast)
    workers: int | None = None  # its DataLoader's workers (None: the workload's own)
    pin_memory: bool | None = None  # its DataLoader's batches in page-locked memory (None: the workload's own)
    threads: int | None = None  # intra-op threads (None: what its factory set)
    channels_last: bool | None = None  # NHWC (None: the workload's own)
    bucket_mb: float | None = None  # in a DDP pair (devtools.pair): the DDP bucket cap (None: DDP's own)
    compile_mode: str | None = (
        None  # torch.compile(model, mode=...) (None: eager): "reduce-overhead" replays CUDA graphs
    )


@dataclass
class Side:
    """One setting of the pair, built: its training step and the thread count its factory chose."""

    setting: Setting
    step: object  # models.step.TrainingStep
    threads: int


def build_side(s: Setting, batch: int, device, wrap=None) -> Side:
    """The setting's training step on `device`; `wrap(model, setting)` replaces its model (a DDP pair wraps it)."""
    import torch

    from microbench.models.step import TrainingStep

    default = torch.get_num_threads()
    workload = models.as_workload(s.spec)
    if s.channels_last is not None:
        workload = replace(workload, channels_last=s.channels_last)
    threads = s.threads or torch.get_num_threads()  # asked for, else what the factory set
    torch.set_num_threads(default)  # the next factory starts where this one did
    step = TrainingStep(workload, batch, device.torch_device, s.dtype, num_workers=s.workers, pin_memory=s.pin_memory)
    if wrap is not None:
        step.model = wrap(step.model, s)
    if s.compile_mode is not None:
        step.model = torch.compile(step.model, mode=s.compile_mode)
        # compiled on the first calls, its CUDA graphs recorded on the next ones: none of that is the fix's saving
        for _ in range(COMPILE_WARM_STEPS):
            step()
    return Side(s, step, threads)


# untimed steps of a compiled side before its blocks: Dynamo compiles on the first call, and reduce-overhead records
# its CUDA graphs after a warm-up call of its own (cudagraph trees), so the third call is the first replay
COMPILE_WARM_STEPS = 3


def _block_ms(side: Side, steps: int, device) -> float:
    """The median of `steps` steps of one side, on its own thread count (roofline.timing: the first call untimed)."""
    import torch

    from microbench.roofline.timing import time_calls

    torch.set_num_threads(side.threads)
    return time_calls(side.step, device, TimingSettings().exactly(steps)).median_ms


def measure_pair(
    before: Setting, after: Setting, batch: int, blocks: int = 40, steps: int = 5, device=None, wrap=None
) -> dict:
    """The blocks' median step times of both sides and the saving per step: the median of the paired differences
    (before - after) with their quartiles, and the difference of the two sides' medians."""
    import torch

    from microbench.core.device import cpu_device

    device = device or cpu_device()
    threads = torch.get_num_threads()
    try:
        sides = [build_side(before, batch, device, wrap), build_side(after, batch, device, wrap)]
        times: list[list[float]] = [[], []]
        for i in range(blocks):
            order = (0, 1) if i % 2 == 0 else (1, 0)  # neither side always second
            for j in order:
                times[j].append(_block_ms(sides[j], steps, device))
    finally:
        torch.set_num_threads(threads)  # the caller's, whatever the factories set
    diffs = sorted(b - a for b, a in zip(*times))
    q1, _, q3 = statistics.quantiles(diffs, n=4, method="inclusive")
    return {
        "before": side_doc(sides[0], times[0]),
        "after": side_doc(sides[1], times[1]),
        "batch": batch,
        "blocks": blocks,
        "steps_per_block": steps,
        "saving_us": {
            "median": statistics.median(diffs) * 1e3,
            "q1": q1 * 1e3,
            "q3": q3 * 1e3,
            "of_medians": (statistics.median(times[0]) - statistics.median(times[1])) * 1e3,
        },
    }


def side_doc(side: Side, block_ms: list[float]) -> dict:
    s = side.setting
    return {
        "model": s.spec,
        "dtype": s.dtype,
        "threads": side.threads,
        "channels_last": side.step.workload.uses_channels_last,
        "loader_workers": getattr(side.step.loader, "num_workers", None),
        "block_ms": block_ms,
    }


def measure_one(s: Setting, batch: int, blocks: int, steps: int, device=None) -> dict:
    """One setting's blocks' median step times, the only step built in the process (process_pairs: a second step
    alternating in the same process would share its heap, the very thing a malloc fix changes)."""
    import torch

    from microbench.core.device import cpu_device

    device = device or cpu_device()
    threads = torch.get_num_threads()
    try:
        side = build_side(s, batch, device)
        block_ms = [_block_ms(side, steps, device) for _ in range(blocks)]
    finally:
        torch.set_num_threads(threads)
    return {"before": side_doc(side, block_ms), "batch": batch, "blocks": blocks, "steps_per_block": steps}


def run_in_process(
    before: Setting,
    after: Setting | None,
    batch: int,
    blocks: int,
    steps: int,
    device: str = "cpu",
    env: dict[str, str] | None = None,
    timeout_s: float = 1800.0,
) -> dict:
    """measure_pair in a fresh process (`env` added to its environment), its result; `after` None: measure_one of
    `before` alone. A failure is one line."""
    spec = {
        "before": asdict(before),
        "after": after and asdict(after),
        "batch": batch,
        "blocks": blocks,
        "steps": steps,
    }
    spec["device"] = device
    done = subprocess.run(
        [sys.executable, "-m", "microbench.verify.pair"],
        input=json.dumps(spec),
        capture_output=True,
        text=True,
        env=os.environ | (env or {}),
        timeout=timeout_s,
        check=False,
    )
    if done.returncode != 0:
        lines = (done.stderr or done.stdout).strip().splitlines() or [f"exit {done.returncode}"]
        raise InputError(None, f"a pair process failed: {lines[-1]}", key="verify")
    return json.loads(done.stdout.strip().splitlines()[-1])


def process_pairs(
    s: Setting,
    env_after: dict[str, str],
    batch: int,
    blocks: int,
    steps: int,
    device: str,
    pairs: int,
    env_before: dict[str, str] | None = None,
) -> list[dict]:
    """A fix that acts from a process's start (glibc's malloc thresholds, read at start-up) cannot alternate with
    its absence in one process: each pair is two fresh processes of the same setting, one started with `env_before`
    and one with `env_after`, in the order before, after / after, before, ... (a drift from process to process falls
    on both alike). Each process builds the one step it times (measure_one); its step time is the median of its
    blocks; the pair's saving, in the shape measure_pair gives, the difference of the two (no quartiles: one
    difference)."""
    out = []
    for i in range(pairs):
        order = (0, 1) if i % 2 == 0 else (1, 0)
        ms = [0.0, 0.0]
        for j in order:
            doc = run_in_process(s, None, batch, blocks, steps, device, (env_before or {}, env_after)[j])
            ms[j] = statistics.median(doc["before"]["block_ms"])
        d = (ms[0] - ms[1]) * 1e3
        out.append({"saving_us": {"median": d, "q1": d, "q3": d}, "before_ms": ms[0], "after_ms": ms[1]})
    return out


def _child() -> int:
    """The process run_in_process starts: the spec on stdin, the result as the last line of stdout."""
    from microbench.core import device as devmod

    spec = json.loads(sys.stdin.read())
    dev = devmod.detect(spec["device"])
    before = Setting(**spec["before"])
    if spec["after"] is None:
        doc = measure_one(before, spec["batch"], spec["blocks"], spec["steps"], dev)
    else:
        doc = measure_pair(before, Setting(**spec["after"]), spec["batch"], spec["blocks"], spec["steps"], dev)
    print(json.dumps(doc))
    return 0


if __name__ == "__main__":
    sys.exit(_child())
