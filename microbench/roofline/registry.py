"""The one registry of providers.

A provider is an implementation of an op family (`gemm`, `conv2d`: microbench.core.ops) with the call
signature its spec states (`OpSpec.signature`, called through `OpSpec.call`):

    gemm:   fn(a, b, *, allow_tf32: bool) -> c             a: [B?, M, K], b: [B?, K, N] (any strides)
    conv2d: fn(a, b, *, shape: ConvShape, direction: str, allow_tf32: bool) -> out
            fwd: (x, w) -> y;  bwd_data: (dy, w) -> dx;  bwd_weight: (x, dy) -> dw   (NHWC tensors)
    attention: fn(q, kv, *, causal: bool, allow_tf32: bool) -> o    q: [BH, Lq, D], kv: [2, BH, Lk, D]

It is declared where it lives, with a decorator that returns the function unchanged:

    @provider("gemm", "torch", baseline=True, enabled=always)
    def gemm_torch(a, b, *, allow_tf32): ...

`enabled(device)` returns None when the provider can run here, else the reason it cannot ("unavailable: no
GPU"). `timed(device)` returns None when its time means something here, else why only its correctness is
checked (the Triton interpreter). `evidence(case, device, call)` says whether it used Tensor Cores /
matrix units and how we know (`call` runs the provider once on the case's operands, for profiling). A provider raises `Unsupported` for a case it does not handle (never a wrong result).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

from microbench.core import ops

if TYPE_CHECKING:
    from microbench.core.device import Device
    from microbench.core.shapes import Case

OPS = tuple(ops.FAMILIES)


class Unsupported(Exception):
    """This provider does not implement this case (dtype, layout, groups, ...)."""


@dataclass(frozen=True)
class Evidence:
    tensor_cores: str  # "yes", "no" or "unknown"
    evidence: str  # how we know: the rule, the SASS counts, the kernel name
    # The matrix units ran it, but not at its dtype's own rate (AMD: an fp8 flavour upcast to f16, fp32 without
    # xf32): why. The row is flagged, so the table and the roofline say so beside the figure.
    fallback: str | None = None


@dataclass(frozen=True)
class Provider:
    op: str
    name: str
    fn: Callable
    baseline: bool
    library: str
    enabled: Callable[[Device], str | None]
    timed: Callable[[Device], str | None]
    evidence: Callable[[Case, Device, Callable], Evidence] | None

    def unavailable_reason(self, device: Device) -> str | None:
        try:
            return self.enabled(device)
        except Exception as e:  # noqa: BLE001 - a broken capability check must not end the run
            return f"unavailable: capability check failed: {type(e).__name__}: {e}"


_REGISTRY: dict[tuple[str, str], Provider] = {}


def always(device: Device) -> str | None:
    return None


def provider(
    op: str,
    name: str,
    *,
    baseline: bool = False,
    library: str = "",
    enabled: Callable[[Device], str | None] = always,
    timed: Callable[[Device], str | None] = always,
    evidence: Callable[[Case, Device, Callable], Evidence] | None = None,
):
    if op not in OPS:
        raise ValueError(f"unknown op {op!r} (known: {', '.join(OPS)})")

    def register(fn: Callable) -> Callable:
        key = (op, name)
        if key in _REGISTRY and _REGISTRY[key].fn is not fn:
            raise ValueError(f"provider {name!r} for {op!r} registered twice")
        _REGISTRY[key] = Provider(op, name, fn, baseline, library, enabled, timed, evidence)
        return fn

    return register


def _loaded() -> dict[tuple[str, str], Provider]:
    # Providers register when their modules are imported; the commands import them (kernels.load_all()),
    # so this layer never imports kernels/ itself.
    return _REGISTRY


@contextmanager
def scoped():
    """Registrations made inside the block are forgotten at its end (tests register throwaway providers)."""
    before = dict(_REGISTRY)
    try:
        yield
    finally:
        _REGISTRY.clear()
        _REGISTRY.update(before)


def get(op: str, name: str) -> Provider | None:
    return _loaded().get((op, name))


def names() -> list[str]:
    return sorted({n for (_, n) in _loaded()})


def for_op(op: str) -> list[Provider]:
    return [p for (o, _), p in sorted(_loaded().items()) if o == op]


def baseline(op: str) -> Provider | None:
    return next((p for p in for_op(op) if p.baseline), None)


def bind(p: Provider, case: Case, a, b) -> Callable[[], object]:
    """A no-argument call of provider `p` on these operands: what correctness checks and timing run."""
    return ops.of(case).bind(p.fn, case, a, b)
