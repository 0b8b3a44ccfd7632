"""Two providers over a modelled CUDA context, for tests/test_gpu_paths_context.py (imported there inside a
scoped registry, and by the pre-flight child, where importing it registers them).

The model follows the CUDA Runtime API's description of a sticky error (cudaErrorIllegalAddress: "the process
must be terminated and relaunched"): `t_fault` faults on the GEMM with m == FAULT_M, raising the text PyTorch
raises for it; from then on every call in this process, through either provider, raises the same error. A new
process starts with a good context."""

from __future__ import annotations

import torch

from microbench.roofline.registry import provider

FAULT_M = 16
ERROR = (
    "CUDA error: an illegal memory access was encountered\nCUDA kernel errors might be asynchronously "
    "reported at some other API call, so the stacktrace below might be incorrect."
)
CONTEXT = {"lost": False}


def _context_ok() -> None:
    if CONTEXT["lost"]:
        raise RuntimeError(ERROR)


@provider("gemm", "t_ok")
def gemm_ok(a, b, *, allow_tf32=False):
    _context_ok()
    return torch.matmul(a, b)


@provider("gemm", "t_fault")
def gemm_fault(a, b, *, allow_tf32=False):
    _context_ok()
    if a.shape[-2] == FAULT_M:
        CONTEXT["lost"] = True
        raise RuntimeError(ERROR)
    return torch.matmul(a, b)
