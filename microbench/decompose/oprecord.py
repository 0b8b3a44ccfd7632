"""Every operator of a training step with its layer, phase, FLOPs, bytes and, for GEMMs and convolutions,
the exact problem as a `microbench.core.shapes.Case`.

A TorchDispatchMode sees each ATen operator below autograd, forward and backward, with its real operands
(dtype after autocast, strides, shapes). FLOPs and bytes of matrix operators (mm, addmm, bmm, baddbmm,
_scaled_mm, convolution and its backward in every variant, scaled dot-product attention forward and backward)
come from the one work model, microbench.core.ops.aten (the one `trace` uses on recorded shapes), not from
torch.utils.flop_counter, which counts a grouped convolution's backward as if it were ungrouped; only matrix
operators it has no model for (e.g. flex_attention) fall back to torch's table. Every other operator's FLOPs
(`other_flops`) and bytes come from the same module (`other_work`: normalization by its formula, gathers
reading the rows they return, views moving nothing, the rest reading each tensor operand once and writing each
result once), given the operator's class.

Layer and phase: forward operators belong to the innermost module whose forward is running; backward
operators to the module whose forward created the autograd node being evaluated (its sequence number,
models.ranges.StepRanges.seq_map); operators outside any layer to the phase itself.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from torch.utils.flop_counter import flop_registry

from microbench.core import dtypes, ops
from microbench.core.ops import aten
from microbench.core.shapes import Case
from microbench.trace.classify import classify_operator


@dataclass
class OpRecord:
    op: str  # aten::convolution
    layer: str | None
    phase: str | None
    dtype: str | None
    flops: int  # GEMM / convolution / attention FLOPs (core.ops.aten.live_work); 0 for other operators
    other_flops: int  # our formulas for normalization, element-wise and reduction operators
    bytes: int
    cls: str  # operator class of microbench/data/kernel_rules.toml
    cases: tuple[Case, ...] = ()
    skipped: str = ""  # why a GEMM/conv operator gave no replayable case


def _dtype(tensors) -> str | None:
    for t in tensors:
        if t.is_floating_point():
            return dtypes.name_of(t.dtype)
    return None


def matrix_work(func, args, kwargs) -> aten.OpWork | None:
    """The work of a GEMM, convolution or attention operator (microbench.core.ops.aten, the one work model
    `trace` uses too); None for any other operator."""
    return aten.live_work(func._schema, args, kwargs)


def analyse(func, args, kwargs, out, layer: str | None, phase: str | None) -> OpRecord:
    op = func._schema.name
    inputs = [t for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
    outputs = [t for t in tree_leaves(out) if isinstance(t, torch.Tensor)]
    dtype = _dtype(inputs + outputs)
    work = matrix_work(func, args, kwargs)
    flops = work.flops if work is not None else None
    if flops is None:  # a matrix operator without a formula of ours: torch's table, else no matrix FLOPs
        packet = func._overloadpacket
        flops = int(flop_registry[packet](*args, **kwargs, out_val=out)) if packet in flop_registry else 0
    cls = classify_operator(op).cls
    cases: list[Case] = []
    skipped = ""
    if (spec := ops.for_aten(op)) is not None:
        if dtype in dtypes.STEP_DTYPES:  # the dtypes a training step computes in are the ones replayed
            cases, skipped = spec.aten_cases(op, args, dtype)
        else:
            skipped = f"{dtype} {spec.family}: not a replayed dtype"
    if work is not None and work.bytes_moved is not None:
        other_flops, nbytes = 0, work.bytes_moved
    else:  # views and allocations move nothing (an alias return that is not written)
        view = any(r.alias_info is not None and not r.alias_info.is_write for r in func._schema.returns)
        other_flops, nbytes = aten.other_work(op, cls, inputs, outputs, dtype, view, bool(flops))
    return OpRecord(op, layer, phase, dtype, flops, other_flops, nbytes, cls, tuple(cases), skipped)


class OpRecorder(TorchDispatchMode):
    """Record every operator of the step(s) run inside it. `ranges` (models.ranges.StepRanges) tells the
    phase and the forward layer; backward layers come from autograd sequence numbers."""

    def __init__(self, ranges):
        super().__init__()
        self.ranges = ranges
        self.records: list[OpRecord] = []
        self._seq_map: dict[int, str] = {}
        self._seq_map_size = -1

    def _backward_layer(self) -> str | None:
        node = torch._C._current_autograd_node()
        if node is not None:
            n = len(self.ranges._intervals)
            if n != self._seq_map_size:  # the forward recorded new intervals since the map was built
                self._seq_map, self._seq_map_size = self.ranges.seq_map(), n
            layer = self._seq_map.get(node._sequence_nr())
            if layer is not None:
                return layer
        return self.ranges.current_backward_layer()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if func._schema.name.startswith("profiler::"):
            return out  # our own record_function ranges: bookkeeping, not work
        phase = self.ranges.current_phase
        if torch._C._current_graph_task_id() != -1:
            layer = self._backward_layer()
        elif phase == "forward":
            layer = self.ranges.current_forward_layer()
        else:
            layer = None
        self.records.append(analyse(func, args, kwargs, out, layer, phase))
        return out


@dataclass
class LayerWork:
    """The recorded work of one (layer, phase)."""

    flops: int = 0
    other_flops: int = 0
    bytes: int = 0
    dtypes: Counter = field(default_factory=Counter)  # dtype -> bytes
    ops: Counter = field(default_factory=Counter)  # operator -> count
    cases: list[Case] = field(default_factory=list)
    gemm_dtype: str | None = None


def bucket_name(layer: str | None, phase: str | None) -> str:
    """Work outside every layer goes to its phase: `(forward)`, `(backward)`, `(optimizer)`, `(step)`."""
    return layer if layer is not None else f"({phase or 'step'})"


def by_layer(records: list[OpRecord]) -> dict[tuple[str, str], LayerWork]:
    out: dict[tuple[str, str], LayerWork] = {}
    for r in records:
        key = (bucket_name(r.layer, r.phase), r.phase or "step")
        lw = out.setdefault(key, LayerWork())
        lw.flops += r.flops
        lw.other_flops += r.other_flops
        lw.bytes += r.bytes
        if r.dtype:
            lw.dtypes[r.dtype] += r.bytes
        lw.ops[r.op] += 1
        lw.cases.extend(r.cases)
        if r.cases and lw.gemm_dtype is None:
            lw.gemm_dtype = r.cases[0].dtype
    return out
