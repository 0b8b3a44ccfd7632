"""A DDP training step of one of our models over N processes, split from the profiler's trace into
compute, communication overlapped with compute, and exposed communication.

Definitions (per step, within the step's own range):
- communication: the union of the collectives' intervals (gloo: `gloo:*` events on gloo's worker threads;
  NCCL / RCCL: the nccl / rccl kernels);
- compute: the union of the training thread's `aten::` operators (GPU: all other kernels);
- overlapped = communication that intersects compute; exposed = communication - overlapped;
- comm_share = exposed / step time (what communication adds to the step); comm_busy_share = all
  communication / step time.
On a CPU the gloo threads share the cores with compute: "overlapped" there is concurrent, not free.
"""
from __future__ import annotations

import statistics
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .events import clip, intersect, length, read_events, union

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


def _is_comm(ev: dict) -> bool:
    name = ev.get("name", "")
    if ev.get("cat") == "kernel":
        return "nccl" in name.lower() or "rccl" in name.lower()
    return name.startswith(("gloo:", "nccl:"))


def split_steps(path: str | Path) -> list[dict]:
    """Per profiled step of a trace written by `ddp_rank`: the split defined above (times in ms)."""
    events, _ = read_events(path)
    steps = [e for e in events if e.get("name") == STEP_RANGE]
    if not steps:
        return []
    main_tid = steps[0].get("tid")
    kernels = [e for e in events if e.get("cat") == "kernel"]
    comm_ev = [e for e in (kernels or events) if _is_comm(e)]
    if kernels:
        compute_ev = [e for e in kernels if not _is_comm(e)]
    else:
        compute_ev = [e for e in events if e.get("tid") == main_tid and str(e.get("name", "")).startswith("aten::")]
    comm_all = union([(e["ts"], e["ts"] + e["dur"]) for e in comm_ev])
    compute_all = union([(e["ts"], e["ts"] + e["dur"]) for e in compute_ev])
    out = []
    for s in steps:
        lo, hi = s["ts"], s["ts"] + s["dur"]
        comm, compute = clip(comm_all, lo, hi), clip(compute_all, lo, hi)
        overlapped = length(intersect(comm, compute))
        calls = [e for e in comm_ev if lo <= e["ts"] < hi]
        out.append({"step_ms": s["dur"] / 1e3, "compute_ms": length(compute) / 1e3,
                    "comm_ms": length(comm) / 1e3, "overlapped_comm_ms": overlapped / 1e3,
                    "exposed_comm_ms": (length(comm) - overlapped) / 1e3,
                    "allreduce_calls": sum(1 for e in calls if "all_reduce" in e["name"].lower()
                                           or "allreduce" in e["name"].lower())})
    return out


def summarize_steps(steps: list[dict]) -> dict:
    """Medians over the profiled steps, and the shares of the step."""
    if not steps:
        return {}
    med = {k: statistics.median(s[k] for s in steps) for k in steps[0]}
    step = med["step_ms"]
    med["comm_share"] = med["exposed_comm_ms"] / step if step > 0 else None
    med["comm_busy_share"] = med["comm_ms"] / step if step > 0 else None
    return med


def ddp_rank(info, plan: DdpPlan) -> dict | None:
    """Runs on every rank: a profiled DDP step; rank 0 returns every rank's split."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.profiler import ProfilerActivity, profile, record_function

    import models
    from models.step import TrainingStep

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
        for _ in range(plan.steps):
            with record_function(STEP_RANGE):
                step()
                if device != "cpu":
                    torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"rank{info.rank}.json"
        prof.export_chrome_trace(str(path))
        steps = split_steps(path)
    mine = {"rank": info.rank, "steps": steps, "summary": summarize_steps(steps)}
    gathered = [None] * info.world_size
    dist.all_gather_object(gathered, mine)
    if info.rank != 0:
        return None
    return {"model": workload.name, "batch_per_rank": plan.batch, "nranks": info.world_size,
            "backend": info.backend, "gradient_bytes": gbytes, "bucket_cap_mb": plan.bucket_cap_mb,
            "bucket_bytes": buckets, "buckets": len(buckets), "ranks": gathered}
