"""Collectives benchmark: every op over every message size, timed and checked, in the manner of
nccl-tests (warm-up, a timed loop of back-to-back calls, then a check on fresh data with a `wrong` count:
the number of wrong elements over all ranks).

Inputs hold small integers, so every sum is exact in float32 and the expected output is computed here
element for element, independently of the library under test.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

import tomllib

from microbench import models
from microbench.core.args import digits
from microbench.core.errors import InputError
from microbench.core.resources import data_file
from microbench.core.results import CollectiveRow
from microbench.core.stats import NoiseSettings, summarize

from .busbw import OPS, algbw_gbps, bus_factor
from .ddp import bucket_sizes

ELEMENT_BYTES = 4  # float32 buffers, as DeepBench's all-reduce sizes and DDP gradient buckets are


@dataclass(frozen=True)
class Plan:
    ops: tuple[str, ...]
    sizes_bytes: tuple[int, ...]
    warmup: int = 2
    iters: int = 5  # calls per timed sample
    reps: int = 5  # timed samples per size
    device: str = "cpu"


def counts(op: str, size_bytes: int, nranks: int) -> tuple[int, int]:
    """(elements per rank chunk, message bytes as nccl-tests counts them) for a requested size.

    Ops that split the message among ranks round it down to a multiple of nranks (at least one element
    per rank), so the reported bytes are what actually moved.
    """
    elems = max(1, size_bytes // ELEMENT_BYTES)
    if op in ("allgather", "reducescatter", "alltoall"):
        chunk = max(1, elems // nranks)
        return chunk, chunk * nranks * ELEMENT_BYTES
    return elems, elems * ELEMENT_BYTES


def _pattern(rank: int, n: int, salt: int = 0):
    """Small exact integers that differ per rank and per element."""
    import torch

    i = torch.arange(n, dtype=torch.int64)
    return ((i * 7 + rank * 13 + salt * 5) % 31 - 15).to(torch.float32)


def _buffers(op: str, chunk: int, rank: int, world: int, device: str):
    """(input, output, expected output) on this rank for one check or timed call."""
    import torch

    if op == "allreduce":
        x = _pattern(rank, chunk)
        expected = sum(_pattern(r, chunk) for r in range(world))
        return x.to(device), None, expected
    if op == "broadcast":
        x = _pattern(rank, chunk)
        return x.to(device), None, _pattern(0, chunk)
    if op == "allgather":
        out = torch.empty(chunk * world)
        return _pattern(rank, chunk).to(device), out.to(device), torch.cat([_pattern(r, chunk) for r in range(world)])
    if op == "reducescatter":
        x = torch.cat([_pattern(rank, chunk, salt=j) for j in range(world)])
        expected = sum(_pattern(r, chunk, salt=rank) for r in range(world))
        return x.to(device), torch.empty(chunk).to(device), expected
    if op == "alltoall":
        # chunk j of rank r goes to rank j; rank `rank` receives chunk `rank` of every sender, in rank order
        x = torch.cat([_pattern(rank, chunk, salt=j) for j in range(world)])
        expected = torch.cat([_pattern(r, chunk, salt=rank) for r in range(world)])
        return x.to(device), torch.empty(chunk * world).to(device), expected
    raise ValueError(f"unknown collective {op!r} (known: {', '.join(OPS)})")


def _call(op: str, x, out) -> None:
    import torch.distributed as dist

    if op == "allreduce":
        dist.all_reduce(x)
    elif op == "broadcast":
        dist.broadcast(x, src=0)
    elif op == "allgather":  # torch 2.13 renamed all_gather_into_tensor; older releases lack the new name
        (getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor)(out, x)
    elif op == "reducescatter":
        (getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor)(out, x)
    elif op == "alltoall":
        dist.all_to_all_single(out, x)


def _sync(device: str) -> None:
    if device != "cpu":
        import torch

        torch.cuda.synchronize()


def check(op: str, chunk: int, rank: int, world: int, device: str, call=None) -> int:
    """One call on fresh data: the number of wrong elements on this rank (`call` replaces the collective,
    for testing the check itself)."""
    x, out, expected = _buffers(op, chunk, rank, world, device)
    (call or _call)(op, x, out)
    _sync(device)
    got = (x if out is None else out).cpu()
    return int((got != expected).sum()) if got.shape == expected.shape else int(expected.numel())


def time_samples_ms(op: str, chunk: int, rank: int, world: int, plan: Plan) -> list[float]:
    """Per-call time of `plan.reps` timed loops on this rank (the data becomes garbage: not checked)."""
    import torch.distributed as dist

    x, out, _ = _buffers(op, chunk, rank, world, plan.device)
    for _ in range(plan.warmup):
        _call(op, x, out)
    samples = []
    for _ in range(plan.reps):
        _sync(plan.device)
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(plan.iters):
            _call(op, x, out)
        _sync(plan.device)
        samples.append((time.perf_counter() - t0) * 1e3 / plan.iters)
    return samples


def bench_rank(info, plan: Plan) -> list[dict] | None:
    """Runs on every rank; rank 0 returns one record per (op, size). A sample's time is the slowest rank's
    (the collective is done when the last rank is done); `wrong` sums all ranks."""
    import torch
    import torch.distributed as dist

    records = []
    dev = plan.device if plan.device == "cpu" else f"cuda:{torch.cuda.current_device()}"
    for op in plan.ops:
        for size in plan.sizes_bytes:
            chunk, message_bytes = counts(op, size, info.world_size)
            samples = torch.tensor(
                time_samples_ms(op, chunk, info.rank, info.world_size, replace(plan, device=dev)), dtype=torch.float64
            )
            wrong = torch.tensor([check(op, chunk, info.rank, info.world_size, dev)], dtype=torch.int64)
            s, w = samples.to(dev), wrong.to(dev)  # NCCL reduces device tensors only
            dist.all_reduce(s, op=dist.ReduceOp.MAX)
            dist.all_reduce(w)
            samples, wrong = s.cpu(), w.cpu()
            records.append(
                {
                    "op": op,
                    "requested_bytes": size,
                    "message_bytes": message_bytes,
                    "elements": chunk,
                    "nranks": info.world_size,
                    "samples_ms": samples.tolist(),
                    "wrong": int(wrong.item()),
                }
            )
    return records if info.rank == 0 else None


def to_rows(records: list[dict], device_name: str, backend: str, noise=None) -> list:
    """Benchmark records -> result rows: op = the collective, shape = "bytes=B ranks=N", flops = 0, bytes
    = the message bytes, gbps = algbw, busbw_gbps = busbw (None unless correct and timed). Each row's time is
    judged by the one judge (roofline.judge): `noise`, the stability thresholds ([noise] in bench.toml)."""
    from microbench.roofline.judge import judge_timing

    rows = []
    for r in records:
        t = summarize(r["samples_ms"], noise or NoiseSettings())
        ok = r["wrong"] == 0
        alg = algbw_gbps(r["message_bytes"], t.median_ms / 1e3) if ok and t.median_ms > 0 else None
        factor = bus_factor(r["op"], r["nranks"])
        rows.append(
            CollectiveRow(
                op=r["op"],
                message_bytes=r["message_bytes"],
                nranks=r["nranks"],
                backend=backend,
                device=device_name,
                status="ok" if ok else "wrong",
                reason="" if ok else f"{r['wrong']} wrong elements over {r['nranks']} ranks",
                time_ms=t.as_dict(),
                flops=0,
                bytes=r["message_bytes"],
                gbps=alg,
                busbw_gbps=alg * factor if alg is not None else None,
                params={
                    "wrong": r["wrong"],
                    "bus_factor": factor,
                    "elements_per_rank": r["elements"],
                    "requested_bytes": r["requested_bytes"],
                },
            )
        )
        judge_timing(rows[-1], t)
    return rows


_UNITS = {"": 1, "B": 1, "K": 2**10, "KB": 2**10, "M": 2**20, "MB": 2**20, "G": 2**30, "GB": 2**30}
DEFAULT_SIZES = "8,64,512,4K,32K,256K,2M,16M"


def deepbench_sizes() -> list[int]:
    """DeepBench's all-reduce sizes (float32 element counts) in bytes."""

    path = data_file("deepbench.toml")
    return [int(n) * ELEMENT_BYTES for n in tomllib.loads(path.read_text())["all_reduce"]["floats"]]


# The largest message: every rank allocates buffers of it (and all-gather N times it); beyond this a typo.
MAX_MESSAGE_BYTES = 2**36


def parse_sizes(text: str) -> list[int]:
    """'8,4K,16M' (binary units), 'deepbench' (DeepBench's all-reduce sizes) and 'buckets:MODEL' (the DDP
    gradient buckets of one of our models), comma-separated -> sorted distinct byte counts."""
    out: set[int] = set()
    for tok in (t.strip() for t in text.split(",") if t.strip()):
        if tok == "deepbench":
            out.update(deepbench_sizes())
        elif tok.startswith("buckets:"):
            out.update(bucket_sizes(models.load(tok.split(":", 1)[1]).model))
        else:
            num = tok.rstrip("KMGBkmgb")
            unit = tok[len(num) :].upper()
            if not digits(num) or unit not in _UNITS or int(num) <= 0:
                raise InputError(
                    None, "expected sizes like 8,4K,16M, deepbench or buckets:MODEL", key="--sizes", value=tok
                )
            if int(num) * _UNITS[unit] % ELEMENT_BYTES:  # float32 buffers: it would silently measure another size
                raise InputError(
                    None,
                    f"a size must be a multiple of {ELEMENT_BYTES} bytes (float32 elements)",
                    key="--sizes",
                    value=tok,
                )
            if int(num) * _UNITS[unit] > MAX_MESSAGE_BYTES:
                raise InputError(
                    None,
                    f"a size must be at most {MAX_MESSAGE_BYTES >> 30} GiB (one rank's buffer)",
                    key="--sizes",
                    value=tok,
                )
            out.add(int(num) * _UNITS[unit])
    if not out:
        raise InputError(None, "no sizes given", key="--sizes", value=text)
    return sorted(out)
