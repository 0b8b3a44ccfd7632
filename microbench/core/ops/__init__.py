"""One spec per op family (see base.OpSpec): everything the tool knows about GEMM, about conv2d, ...

To add an op family: a module here with a subclass of OpSpec and its `SPEC`, named in FAMILIES below; its
shape dataclass in microbench.core.shapes (with a `family` class attribute); its work formula in
microbench.core.ops.work (a case's work: `case_work` below). Config, cases, the registry, the runner, the
step recorder and the reports ask the spec.
"""

from __future__ import annotations

from microbench.core.ops import attention, conv2d, gemm
from microbench.core.ops.base import OpSpec
from microbench.core.ops.work import Work
from microbench.core.shapes import Case

FAMILIES: dict[str, OpSpec] = {s.family: s for s in (gemm.SPEC, conv2d.SPEC, attention.SPEC)}


def family(name: str) -> OpSpec:
    try:
        return FAMILIES[name]
    except KeyError:
        raise ValueError(f"unknown op family {name!r} (known: {', '.join(FAMILIES)})") from None


def of(case: Case) -> OpSpec:
    """The spec of a case's op family."""
    return family(case.family)


def case_work(case: Case) -> Work:
    """The work of a case (FLOPs, bytes), counted by its op family's spec with the formulas of ops/work.py.
    Here, not in work.py: the specs import work.py for its formulas, and work.py imports no spec."""
    return of(case).work(case)


def for_aten(op: str) -> OpSpec | None:
    """The family whose cases an ATen operator computes (aten::mm -> gemm), or None."""
    return next((s for s in FAMILIES.values() if op in s.aten_ops), None)


def for_onednn(kind: str) -> OpSpec | None:
    return next((s for s in FAMILIES.values() if s.onednn_kind == kind), None)


def short_op(op: str) -> str:
    """A row op as tables show it (conv2d_fwd -> conv fwd); ops of no family unchanged (layer modules)."""
    return next((s.short_op(op) for s in FAMILIES.values() if op.startswith(s.family)), op)


__all__ = ["FAMILIES", "OpSpec", "case_work", "family", "for_aten", "for_onednn", "of", "short_op"]
