"""A DDP training step of one of our models over N processes, split from the profiler's trace into
compute, communication overlapped with compute, and exposed communication, per step and per gradient bucket.

The split is the one GPU time breakdown (microbench/trace/gpu_time.py, docs/traces.md "Where the GPU's time
goes"), read from the timeline:
- GPU (NCCL / RCCL): per step, over the step's own GPU activities (each activity in exactly one step, the one
  whose CPU range launched it): compute = computation_us (the union of non-communication kernels),
  communication = comm_us (the union of the `comm` class's kernels), exposed = exposed_comm_us (communication
  nothing hides), overlapped = communication - exposed;
- CPU (gloo, no kernels): the same breakdown over CPU intervals within the step's range: communication = the
  `gloo:*` collectives (on gloo's worker threads), compute = the training thread's `aten::` operators;
- per bucket: each all-reduce (a bucket's collective: its kernel, or its `gloo:all_reduce` event) is a window:
  its exposed part is the time in it that no compute covers;
- comm_share = exposed / step time (what communication adds to the step); comm_busy_share = all
  communication / step time.
On a CPU the gloo threads share the cores with compute: "overlapped" there is concurrent, not free.
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from microbench import models
from microbench.core.conditions import usable_cores
from microbench.trace import gpu_time
from microbench.trace.analysis import read_trace
from microbench.trace.kineto import HOST_KEY
from microbench.trace.timeline import KERNEL, NO_ID

STEP_RANGE = "dawnscope.ddp_step"
DEFAULT_BUCKET_CAP_MB = 25.0  # DistributedDataParallel's default


@dataclass(frozen=True)
class DdpPlan:
    model: str
    batch: int
    steps: int = 3
    warmup: int = 1
    bucket_cap_mb: float | None = None  # None: DDP's default (1 MiB first bucket, then 25 MiB)
    device: str = "cpu"
    trace_dir: str | None = None  # keep each rank's trace there (rankN.pt.trace.json); None: a temporary folder


def grad_bytes(model) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)


def bucket_sizes(model, bucket_cap_mb: float | None = None) -> list[int]:
    """Gradient bucket sizes in bytes as DistributedDataParallel assigns them when it rebuilds its buckets
    after the first step (its own C++ routine, parameters in reverse order): with the default cap a 1 MiB
    first bucket then 25 MiB ones; with an explicit `bucket_cap_mb` every bucket up to that cap."""
    import torch.distributed as dist

    params = [p for p in model.parameters() if p.requires_grad][::-1]
    if not params:
        return []
    if bucket_cap_mb is None:
        caps = [dist._DEFAULT_FIRST_BUCKET_BYTES, int(DEFAULT_BUCKET_CAP_MB * 2**20)]
    else:
        caps = [int(bucket_cap_mb * 2**20)]
    buckets, _ = dist._compute_bucket_assignment_by_size(params, caps, [False] * len(params))
    return [sum(params[i].numel() * params[i].element_size() for i in b) for b in buckets]


def _is_allreduce(name: str) -> bool:
    low = name.lower()
    return "all_reduce" in low or "allreduce" in low


def _step(step_us: float, b: dict, calls: int, buckets: list[dict]) -> dict:
    return {
        "step_ms": step_us / 1e3,
        "compute_ms": b["computation_us"] / 1e3,
        "comm_ms": b["comm_us"] / 1e3,
        "overlapped_comm_ms": b["overlapped_comm_us"] / 1e3,
        "exposed_comm_ms": b["exposed_comm_us"] / 1e3,
        "allreduce_calls": calls,
        "buckets": buckets,
    }


def _bucket(since_step_us: float, b: dict) -> dict:
    """One bucket's all-reduce: when it started (ms after its step's start), how long it ran, how much of it
    no compute hid."""
    return {
        "at_ms": float(since_step_us) / 1e3,
        "comm_ms": b["comm_us"] / 1e3,
        "exposed_comm_ms": b["exposed_comm_us"] / 1e3,
    }


def _gpu_split(tl, w) -> list[dict]:
    """NCCL / RCCL: each step's breakdown over its own activities; each all-reduce kernel a bucket's window."""
    steps, _ = gpu_time.per_step(tl, w)
    owner = gpu_time.assign_steps(tl, w).step
    k = tl.activities
    comm = np.flatnonzero(tl.class_mask("comm") & (k.category == KERNEL))
    out = []
    for j, st in enumerate(steps):
        mine = comm[owner[comm] == j]
        mine = mine[np.argsort(k.ts_us[mine], kind="stable")]
        reduce = [int(r) for r in mine if _is_allreduce(tl.names[k.name[r]])]
        buckets = [
            _bucket(k.ts_us[r] - w.ts_us[j], gpu_time.breakdown(tl, window=(k.ts_us[r], k.end_us[r]))) for r in reduce
        ]
        out.append(_step(float(w.dur_us[j]), st, len(reduce), buckets))
    return out


def _cpu_split(tl, w) -> list[dict]:
    """gloo: each step's breakdown over the CPU intervals within its range; each all-reduce a bucket's window."""
    main_thread = tl.ranges.thread[tl.step_rows(STEP_RANGE)[0]]
    starts, ends, kinds, names = gpu_time.cpu_intervals(tl, main_thread)
    out = []
    for j in range(len(w)):
        lo, hi = float(w.ts_us[j]), float(w.end_us[j])
        calls = [
            i
            for i in np.flatnonzero((kinds == gpu_time.COMM) & (starts >= lo) & (starts < hi))
            if _is_allreduce(names[i])
        ]
        calls.sort(key=lambda i: starts[i])
        buckets = [
            _bucket(starts[i] - lo, gpu_time.of_intervals(starts, ends, kinds, window=(starts[i], ends[i])))
            for i in calls
        ]
        out.append(_step(hi - lo, gpu_time.of_intervals(starts, ends, kinds, window=(lo, hi)), len(calls), buckets))
    return out


def split_steps(path: str | Path) -> list[dict]:
    """Per profiled step of a trace written by `ddp_rank`: the split defined above (times in ms), with the
    step's buckets (each all-reduce in start order: its communication and exposed time)."""
    tl = read_trace(path)
    if tl.names.find(STEP_RANGE) == NO_ID:
        return []
    w = tl.step_windows(STEP_RANGE)
    if (tl.activities.category == KERNEL).any():
        return _gpu_split(tl, w)
    return _cpu_split(tl, w)


def summarize_steps(steps: list[dict]) -> dict:
    """Medians over the profiled steps, and the shares of the step."""
    if not steps:
        return {}
    med = {k: statistics.median(s[k] for s in steps) for k in steps[0] if k != "buckets"}
    step = med["step_ms"]
    med["comm_share"] = med["exposed_comm_ms"] / step if step > 0 else None
    med["comm_busy_share"] = med["comm_ms"] / step if step > 0 else None
    return med


def host_facts(info) -> dict:
    """What a CPU rank's trace cannot show of its host, written into it (the trace's `dawnscope_host` key): the cores
    this rank may run on, the ranks on this host (torchrun's LOCAL_WORLD_SIZE, else every rank: local processes)
    and this rank's intra-op threads. The communication finding on a CPU reads them (docs/findings.md)."""
    import torch

    return {
        "cores": usable_cores(),
        "local_ranks": int(os.environ.get("LOCAL_WORLD_SIZE", info.world_size)),
        "intra_op_threads": torch.get_num_threads(),
    }


def ddp_rank(info, plan: DdpPlan) -> dict | None:
    """Runs on every rank: a profiled DDP step; rank 0 returns every rank's split."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.profiler import ProfilerActivity, profile, record_function

    from microbench.core.device import quiet_profiler

    quiet_profiler()

    from microbench.models.step import TrainingStep

    torch.manual_seed(1234 + info.rank)
    workload = models.load(plan.model)
    device = plan.device if plan.device == "cpu" else f"cuda:{torch.cuda.current_device()}"
    step = TrainingStep(workload, plan.batch, device)
    gbytes, buckets = grad_bytes(step.model), bucket_sizes(step.model, plan.bucket_cap_mb)
    step.model = DDP(step.model, bucket_cap_mb=plan.bucket_cap_mb)
    for _ in range(plan.warmup):
        step()
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device != "cpu" else [])
    with profile(activities=acts) as prof:
        prof.add_metadata_json(HOST_KEY, json.dumps(host_facts(info)))
        for _ in range(plan.steps):
            with record_function(STEP_RANGE):
                step()
                if device != "cpu":
                    torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(plan.trace_dir or tmp) / f"rank{info.rank}.pt.trace.json"
        prof.export_chrome_trace(str(path))
        steps = split_steps(path)
    mine = {"rank": info.rank, "steps": steps, "summary": summarize_steps(steps)}
    gathered = [None] * info.world_size
    dist.all_gather_object(gathered, mine)
    if info.rank != 0:
        return None
    return {
        "model": workload.name,
        "batch_per_rank": plan.batch,
        "nranks": info.world_size,
        "backend": info.backend,
        "gradient_bytes": gbytes,
        "bucket_cap_mb": plan.bucket_cap_mb,
        "bucket_bytes": buckets,
        "buckets": len(buckets),
        "ranks": gathered,
        "trace_dir": plan.trace_dir,
    }
