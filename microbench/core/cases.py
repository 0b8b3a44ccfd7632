"""Inputs, float64 references and the correctness check: written once (each op family's part in its spec,
microbench.core.ops), imported by the runner, the benchmark tests and the kernel tests alike."""

from __future__ import annotations

import torch

from microbench.core import ops
from microbench.core.shapes import Case


def make_inputs(case: Case, device: str = "cpu", seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Fresh random operands with the layouts the case describes (see the family's spec)."""
    gen = torch.Generator().manual_seed(seed)
    return ops.of(case).inputs(case, device, gen)


def reference(case: Case, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """float64 result from the same (already rounded) operands."""
    return ops.of(case).reference(case, a, b)


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    """||out - ref||_F / ||ref||_F; infinite for a wrong shape or a non-finite output."""
    if tuple(out.shape) != tuple(ref.shape):
        return float("inf")
    o = out.to(device=ref.device, dtype=torch.float64)
    if not torch.isfinite(o).all():
        return float("inf")
    denom = torch.linalg.vector_norm(ref)
    if denom == 0:
        return float(torch.linalg.vector_norm(o))
    return float(torch.linalg.vector_norm(o - ref) / denom)
