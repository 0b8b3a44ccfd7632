"""Algorithm and bus bandwidth as nccl-tests defines them (doc/PERFORMANCE.md of NVIDIA/nccl-tests).

algbw = message bytes / time. busbw = algbw x a factor per collective that makes the number comparable to
the link bandwidth whatever the rank count: all-reduce 2(n-1)/n (a ring sends each byte 2(n-1)/n times),
reduce-scatter, all-gather and all-to-all (n-1)/n, broadcast, reduce and send/recv 1.

Message bytes follow nccl-tests too: all-reduce and broadcast the buffer; all-gather the gathered output
(n x the per-rank input); reduce-scatter the full input (n x the per-rank output); all-to-all one rank's
whole send buffer.
"""

from __future__ import annotations

# Canonical names; torch / NCCL spellings map onto them (trace annotations say "nccl:_all_gather_base").
OPS = ("allreduce", "allgather", "reducescatter", "broadcast", "alltoall")
ALIASES = {
    "all_reduce": "allreduce",
    "allreduce_coalesced": "allreduce",
    "allgather": "allgather",
    "all_gather": "allgather",
    "_all_gather_base": "allgather",
    "all_gather_into_tensor": "allgather",
    "allgather_into_tensor_coalesced": "allgather",
    "reduce_scatter": "reducescatter",
    "_reduce_scatter_base": "reducescatter",
    "reduce_scatter_tensor": "reducescatter",
    "reduce_scatter_tensor_coalesced": "reducescatter",
    "broadcast": "broadcast",
    "all_to_all": "alltoall",
    "alltoall_base": "alltoall",
    "all_to_all_single": "alltoall",
    "reduce": "reduce",
    "send": "sendrecv",
    "recv": "sendrecv",
    "sendrecv": "sendrecv",
    "gather": "gather",
    "scatter": "scatter",
}


def canonical_op(name: str) -> str:
    """'nccl:_all_gather_base', 'all_gather' or 'allgather' -> 'allgather'; unknown names come back
    lower-cased without a 'nccl:' / 'gloo:' prefix."""
    base = name.split(":", 1)[-1].strip().lower()
    if base in OPS:
        return base
    return ALIASES.get(base, base)


def bus_factor(op: str, nranks: int) -> float:
    """busbw / algbw for `op` over `nranks` ranks (nccl-tests)."""
    if nranks < 1:
        raise ValueError(f"nranks must be >= 1, got {nranks}")
    op = canonical_op(op)
    if op == "allreduce":
        return 2 * (nranks - 1) / nranks
    if op in ("allgather", "reducescatter", "alltoall", "gather", "scatter"):
        return (nranks - 1) / nranks
    if op in ("broadcast", "reduce", "sendrecv"):
        return 1.0
    raise ValueError(f"no bus bandwidth factor for collective {op!r}")


def algbw_gbps(message_bytes: float, time_s: float) -> float:
    """GB/s (1e9 bytes per second), as nccl-tests prints it."""
    if time_s <= 0:
        raise ValueError(f"time must be positive, got {time_s}")
    return message_bytes / time_s / 1e9


def busbw_gbps(op: str, message_bytes: float, time_s: float, nranks: int) -> float:
    return algbw_gbps(message_bytes, time_s) * bus_factor(op, nranks)
