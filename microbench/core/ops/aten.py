"""The work (FLOPs, minimum bytes) of an ATen matrix operator call: GEMM, convolution, attention.

The one owner of "how much work does this operator do". Two entry points, one model behind them:

- `live_work(schema, args, kwargs)`: an operator called with live arguments (tensors, lists, numbers), as a
  TorchDispatchMode sees it (`decompose`, microbench/decompose/oprecord.py).
- `trace_work(name, input_dims, input_types, concrete_inputs)`: an operator recorded in a trace with
  `record_shapes=True` (`trace`, microbench/trace/opmetrics.py; the cross-chip prediction): each cpu_op's
  `Input Dims`, `Input type` and `Concrete Inputs` lists, one entry per schema argument.

Both turn their input into the same `Call` (per argument: a tensor's shape and dtype, or a non-tensor's value)
and compute from it, so the two can only disagree where their inputs do (a trace without Concrete Inputs does
not know a convolution's stride). Which operator is which family, and where its arguments sit:
microbench/data/op_models.toml. The formulas: microbench/core/ops/work.py (conventions in its docstring).
"""

from __future__ import annotations

import ast
import math
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np
import tomllib

from microbench.core import dtypes
from microbench.core.ops.work import attention_work, conv_work, gemm_work, norm_work
from microbench.core.resources import data_file
from microbench.core.shapes import GemmShape

MODELS_PATH = data_file("op_models.toml")
GEMM_FAMILIES = ("mm", "bmm", "matmul", "linear")
# Ops that return a tensor sharing its operand's storage without an alias annotation in their schema.
NO_TRAFFIC = frozenset(
    {"aten::_unsafe_view", "aten::lift_fresh", "aten::empty", "aten::empty_like", "aten::empty_strided", "aten::detach"}
)
# Gathers read only the rows they return, not the whole table they index (an embedding lookup).
GATHER_OPS = frozenset({"aten::embedding", "aten::index_select", "aten::gather", "aten::index"})


@dataclass(frozen=True)
class OpWork:
    """The work of one operator call."""

    family: str  # mm, bmm, matmul, linear, conv, conv_bwd, attention (op_models.toml)
    dtype: str | None  # of the first matrix operand (fp32, bf16, ...); None when unknown (no types recorded)
    flops: int | None  # None: the arguments do not determine it (`note` says why)
    bytes_moved: int | None  # None: unknown dtype, or flops unknown
    dims: dict  # the GEMM view: m, n, k (and batch), or conv n, c, k, groups (eligibility checks)
    note: str = ""


@dataclass(frozen=True)
class Call:
    """An operator call, argument by argument in schema order (either entry point's input, normalised)."""

    name: str
    shapes: tuple  # per argument: a tensor's shape as a list of ints, else None
    dtypes: tuple  # per argument: a tensor's dtype (our name), else None
    values: tuple  # per argument: a non-tensor's value (int, float, bool, list, str), else None

    def shape(self, i: int) -> list[int]:
        s = self.shapes[i] if i < len(self.shapes) else None
        if s is None:
            raise ValueError(f"argument {i} is not a tensor")
        return s

    def value(self, i: int | None):
        return None if i is None or i >= len(self.values) else self.values[i]


@cache
def _models(path: str = str(MODELS_PATH)) -> tuple[dict, dict, dict, dict]:
    """(operators with a matrix model, type -> dtype, type -> bytes per element, the other tables)."""
    data = tomllib.loads(Path(path).read_text())
    return data["ops"], data["dtypes"], data["element_bytes"], data


def modelled_ops() -> frozenset[str]:
    """The ATen operators with a work model."""
    return frozenset(_models()[0])


def replayed_ops(family: str) -> frozenset[str]:
    """The operators whose calls a step replays as cases of op family `family` (gemm, conv2d)."""
    return frozenset(op for op, spec in _models()[0].items() if spec.get("replay") == family)


def operands(op: str) -> tuple[int, int]:
    """Argument positions of a GEMM or convolution operator's two matrix operands (A, B) or (input, weight)."""
    spec = _models()[0][op]
    return spec["a"], spec["b"]


def dtype_of(type_name: str | None) -> str | None:
    """A profiler `Input type` string (c10::BFloat16) -> our dtype name (bf16); None when not a known one."""
    return _models()[1].get(type_name) if type_name else None


def element_bytes(type_name: str | None) -> int | None:
    """A profiler `Input type` string (float, c10::Half, long int, bool, ...) -> bytes per element; None when
    not a tensor type we know."""
    return _models()[2].get(type_name) if type_name else None


# ---- the two entry points ----------------------------------------------------------------------------------
def trace_work(
    name: str, input_dims: list | None, input_types: list | None, concrete_inputs: list | None = None
) -> OpWork | None:
    """The work of a recorded operator call, from a trace's `Input Dims`, `Input type` and `Concrete Inputs`
    (each a list with one entry per schema argument, as the PyTorch profiler writes them with
    record_shapes=True; `concrete_inputs` may be None: older PyTorch, and then a convolution's FLOPs are
    unknown). None when the operator has no model or no shapes were recorded; an OpWork with flops None and a
    note when the shapes do not fit its model."""
    if name not in _models()[0] or not input_dims:
        return None
    return _work(trace_call(name, input_dims, input_types, concrete_inputs), input_dims)


def trace_call(name: str, input_dims: list, input_types: list | None, concrete_inputs: list | None = None) -> Call:
    """A recorded call as the work model reads it (each argument a tensor's shape and dtype, or a non-tensor's
    value from Concrete Inputs): what trace_work computes from, and what a replay of the call builds its case from
    (microbench/roofline/trace_cases.py), so the two read one call the same way."""
    types = list(input_types or [])
    shapes, kinds, values = [], [], []
    for i, d in enumerate(input_dims):
        tensor = isinstance(d, list) and bool(d) and all(isinstance(x, int) for x in d)
        shapes.append(list(d) if tensor else None)
        kinds.append(dtype_of(types[i]) if tensor and i < len(types) else None)
        values.append(None if tensor else _concrete(concrete_inputs, i))
    return Call(name, tuple(shapes), tuple(kinds), tuple(values))


def live_work(schema, args, kwargs: dict | None = None) -> OpWork | None:
    """The work of an operator called with live arguments: `schema` its torch FunctionSchema
    (func._schema in a TorchDispatchMode: its name and arguments), `args`/`kwargs` as the call got them
    (omitted arguments take their schema default). None when the operator has no model."""
    if schema.name not in _models()[0]:
        return None
    kwargs = kwargs or {}
    shapes, kinds, values = [], [], []
    for i, arg in enumerate(schema.arguments):
        if i < len(args):
            v = args[i]
        elif arg.name in kwargs:
            v = kwargs[arg.name]
        else:
            v = arg.default_value if arg.has_default_value() else None
        tensor = hasattr(v, "shape") and hasattr(v, "dtype")
        shapes.append([int(x) for x in v.shape] if tensor else None)
        kinds.append(dtypes.name_of(v.dtype) if tensor else None)
        values.append(None if tensor else v)
    return _work(Call(schema.name, tuple(shapes), tuple(kinds), tuple(values)), args)


def other_work(
    op: str, cls: str, inputs: list, outputs: list, dtype: str | None, view: bool, has_matrix_flops: bool
) -> tuple[int, int]:
    """(FLOPs, bytes) of a live call of an operator without a matrix model: `cls` its class of
    kernel_rules.toml (norm, elementwise, reduction, ...), `inputs` / `outputs` its tensors, `view` whether it
    returns an alias of an operand. Normalization: microbench.core.ops.work's formula; gathers read the rows
    they return; scatters (op_models.toml [traffic]) read their values and index and write as many elements;
    views and allocations move nothing; write-only ops (fill_, copy_, ...) do not read what they write;
    everything else reads each tensor operand once and writes each result once, with 1 FLOP per output element
    (element-wise) or per input element (reduction). A recorded call's tensors: trace_other_work."""
    if cls == "norm" and dtype is not None and inputs:
        x = inputs[0]
        # Layer norm normalizes (and scales) the last dimension; batch, group, instance norm the channels
        # (dim 1), whichever library runs them (native_batch_norm, cudnn_batch_norm, miopen_batch_norm, ...).
        channels = x.shape[-1] if "layer_norm" in op or x.dim() < 2 else x.shape[1]
        w = norm_work(x.numel(), channels, dtype, "bwd" if "backward" in op else "fwd")
        return w.flops, w.bytes_moved
    if op in GATHER_OPS:
        out_bytes = sum(t.numel() * t.element_size() for t in outputs)
        index_bytes = sum(t.numel() * t.element_size() for t in inputs if not t.is_floating_point())
        return 0, 2 * out_bytes + index_bytes  # the gathered rows read, the result written, the indices read
    if op in NO_TRAFFIC or view:
        return 0, 0
    traffic = _models()[3]["traffic"]
    if op in traffic["scatter"]:
        values = sum(_nbytes(t) for t in inputs[1:] if t.is_floating_point())
        return 0, 2 * values + sum(_nbytes(t) for t in inputs[1:] if not t.is_floating_point())
    if op in traffic["write_only"]:
        inputs = inputs[1:]  # it writes its first operand (its result) without reading it
    nbytes = sum(_nbytes(t) for t in inputs + outputs)
    if has_matrix_flops or dtype is None:
        return 0, nbytes
    if cls == "elementwise":
        return sum(t.numel() for t in outputs), nbytes
    if cls == "reduction":
        return sum(t.numel() for t in inputs), nbytes
    return 0, nbytes


@dataclass(frozen=True)
class RecordedTensor:
    """A tensor argument as a trace records it: what other_work reads of a live tensor, from its shape and type."""

    shape: tuple
    itemsize: int
    floating: bool
    type_name: str = ""  # the profiler's (c10::Half, float, ...): tells apart two floats of one size

    def numel(self) -> int:
        return math.prod(self.shape)

    def element_size(self) -> int:
        return self.itemsize

    def is_floating_point(self) -> bool:
        return self.floating

    def dim(self) -> int:
        return len(self.shape)


def recorded_tensor(shape, type_name: str) -> RecordedTensor | None:
    """A tensor of a profiler type name (float, c10::Half, long int, ...); None for a type we do not know."""
    size = element_bytes(type_name)
    floating = type_name not in _models()[3]["tensor_types"]["integer"]
    return None if size is None else RecordedTensor(tuple(shape), size, floating, type_name)


def trace_other_work(
    name: str, cls: str, input_dims: list | None, input_types: list | None, concrete_inputs: list | None = None
) -> tuple[int, int] | None:
    """(FLOPs, bytes) of a recorded ATen call of an operator without a matrix model, by other_work's rules; `cls`
    is the operator's class (trace.classify.classify_operator), as the live path has it. A trace records no
    outputs, so they are inferred (op_models.toml [trace_outputs]): an in-place op (name ending in `_`) writes its
    first operand, a gather the rows it looks up, a reduction its reduced shape, a cast the type it names, a
    comparison bools, anything else one tensor of its operands' broadcast shape in their promoted type. None
    where the trace does not say: no shapes, a type we do not know, a tensor list (its shapes are not recorded),
    a reduction whose dimensions we cannot read, shapes that do not broadcast, an operator outside ATen."""
    tensors = _recorded_tensors(input_dims, input_types)
    if not name.startswith("aten::") or not tensors:
        return None
    dtype = dtype_of(next((ty for ty in input_types or [] if ty in _models()[1]), None))
    try:
        inputs, outputs = _trace_outputs(name, cls, tensors, concrete_inputs)
    except (ValueError, IndexError, TypeError, KeyError):
        return None
    return other_work(name, cls, inputs, outputs, dtype, view=False, has_matrix_flops=False)


def _recorded_tensors(input_dims: list | None, input_types: list | None) -> list[RecordedTensor] | None:
    """The tensor arguments of a recorded call; None when one of them has a type without a known size, or is a
    list of tensors."""
    out = []
    unrecorded = _models()[3]["trace_outputs"]["unrecorded_lists"]
    for d, ty in zip(input_dims or [], input_types or []):
        if ty in unrecorded:
            return None
        if not (isinstance(d, list) and all(isinstance(x, int) for x in d)):
            continue
        if not d:  # not a tensor (Scalar, ScalarList, ''), or 0-dim: as often a Python number the profiler
            continue  # wrapped (`x * 3.0` records a 'double' []) as a real one; 8 bytes at most either way
        t = recorded_tensor(d, ty)
        if t is None:
            return None  # a tensor of a type we do not know
        out.append(t)
    return out


def _trace_outputs(name: str, cls: str, tensors: list, concrete_inputs) -> tuple[list, list]:
    """(what the call reads, what it writes) of a recorded call: trace_other_work's inference. Raises where the
    trace does not say."""
    rules = _models()[3]["trace_outputs"]
    if name.endswith("_"):
        return tensors, tensors[:1]
    if name == "aten::embedding":
        weight, index = tensors[0], tensors[1]
        return tensors, [RecordedTensor(index.shape + weight.shape[-1:], weight.itemsize, True, weight.type_name)]
    if name == "aten::index_select":
        src, index = tensors[:2]
        dim = int(_concrete(concrete_inputs, 1)) % len(src.shape)
        return tensors, [
            RecordedTensor(
                src.shape[:dim] + (index.numel(),) + src.shape[dim + 1 :], src.itemsize, src.floating, src.type_name
            )
        ]
    if name in GATHER_OPS:
        raise ValueError("the gathered rows are not recorded")
    if name in rules["cast_dtype_argument"]:
        ty = _models()[3]["scalar_types"].get(str(_concrete(concrete_inputs, rules["cast_dtype_argument"][name])))
        return tensors, [tensors[0] if ty is None else recorded_tensor(tensors[0].shape, ty)]
    if name in rules["same_shape"]:
        return tensors, tensors[:1]
    if cls == "reduction":
        return tensors, [_reduced(tensors[0], _concrete(concrete_inputs, rules["reduced_dims_argument"][name]))]
    shape = tuple(np.broadcast_shapes(*(t.shape for t in tensors)))
    if name in rules["bool_result"]:
        return tensors, [recorded_tensor(shape, "bool")]
    return tensors, [RecordedTensor(shape, *_promoted(tensors))]


def _promoted(tensors: list) -> tuple[int, bool]:
    """(bytes per element, floating) of the result of an element-wise op on `tensors` (PyTorch's promotion,
    simplified: the widest floating operand, and fp32 where two different 2-byte floats meet)."""
    floats = {(t.itemsize, t.type_name) for t in tensors if t.floating}
    if not floats:
        return max(t.itemsize for t in tensors), False
    widest = max(size for size, _ in floats)
    return (4 if widest == 2 and len(floats) > 1 else widest), True


def _reduced(src: RecordedTensor, dims) -> RecordedTensor:
    """The result of reducing `src` over `dims` (a list or one int; none or empty: all of them). Kept dimensions
    or not, the same number of elements."""
    dims = [dims] if isinstance(dims, int) and not isinstance(dims, bool) else dims
    if not isinstance(dims, list) or not dims:
        return RecordedTensor((), src.itemsize, src.floating, src.type_name)
    gone = {d % len(src.shape) for d in dims}
    return RecordedTensor(
        tuple(x for i, x in enumerate(src.shape) if i not in gone), src.itemsize, src.floating, src.type_name
    )


def _nbytes(t) -> int:
    return t.numel() * t.element_size()


def _concrete(concrete: list | None, i: int):
    """A Concrete Inputs entry ('[1, 1]', 'False', '2', 'same') -> a Python value, None when absent."""
    if concrete is None or i >= len(concrete) or concrete[i] in ("", None):
        return None
    try:
        return ast.literal_eval(concrete[i])
    except (ValueError, SyntaxError):
        return concrete[i]  # 'same', 'valid'


def _work(call: Call, raw) -> OpWork:
    spec = _models()[0][call.name]
    family = spec["family"]
    first = spec.get("args", [spec.get("a", 0)])[0]
    dtype = call.dtypes[first] if first < len(call.dtypes) else None
    try:
        if family in GEMM_FAMILIES:
            return _gemm(spec, call, dtype)
        if family == "conv":
            return _conv(spec, call, dtype)
        if family == "conv_bwd":
            return _conv_bwd(spec, call, dtype)
        return _attention(spec, call, dtype)
    except (IndexError, TypeError, ValueError, ZeroDivisionError) as e:
        return OpWork(family, dtype, None, None, {}, f"arguments {_brief(raw)} do not fit the {family} model ({e})")


def _brief(raw) -> str:
    return str([list(getattr(x, "shape", x)) if hasattr(x, "shape") else x for x in raw])[:200]


# ---- the families ------------------------------------------------------------------------------------------
def _bytes_of(work, dtype: str | None) -> int | None:
    return work.bytes_moved if dtype in dtypes.BY_NAME else None


def _known(dtype: str | None) -> str:
    return dtype if dtype in dtypes.BY_NAME else "fp32"  # FLOPs do not depend on it; bytes are then None


def _gemm_dims(family: str, a: list[int], b: list[int]) -> tuple[int, int, int, int] | None:
    """(batch, m, n, k) of a GEMM-family call, None when the shapes do not multiply as `family`."""
    if family == "linear":  # input [..., K] x weight [N, K]
        if len(b) != 2 or not a or a[-1] != b[1]:
            return None
        return 1, math.prod(a[:-1]), b[0], b[1]
    a2 = [1] + a if len(a) == 1 else a
    b2 = b + [1] if len(b) == 1 else b
    if len(a2) < 2 or len(b2) < 2 or a2[-1] != b2[-2]:
        return None
    batch_a, batch_b = a2[:-2], b2[:-2]
    if family == "mm" and (batch_a or batch_b):
        return None
    n_batch = max(len(batch_a), len(batch_b))
    pa, pb = [1] * (n_batch - len(batch_a)) + batch_a, [1] * (n_batch - len(batch_b)) + batch_b
    batch = math.prod(max(x, y) for x, y in zip(pa, pb)) if n_batch else 1
    return batch, a2[-2], b2[-1], a2[-1]


def _gemm(spec: dict, call: Call, dtype) -> OpWork:
    family = spec["family"]
    a, b = call.shape(spec["a"]), call.shape(spec["b"])
    dims = _gemm_dims(family, a, b)
    if dims is None:
        return OpWork(family, dtype, None, None, {}, f"shapes {a} x {b} do not multiply as {family}")
    batch, m, n, k = dims
    w = gemm_work(GemmShape(m=m, n=n, k=k, batch=batch), _known(dtype))
    return OpWork(family, dtype, w.flops, _bytes_of(w, dtype), {"batch": batch, "m": m, "n": n, "k": k})


def _conv_out(size: int, r: int, stride: int, pad, dil: int, transposed: bool, out_pad: int) -> int:
    if transposed:
        return (size - 1) * stride - 2 * pad + dil * (r - 1) + out_pad + 1
    if pad == "same":
        return size
    pad = 0 if pad == "valid" else pad
    return (size + 2 * pad - dil * (r - 1) - 1) // stride + 1


def _per_dim(v, n: int) -> list:
    return list(v) * (n if len(v) == 1 else 1) if isinstance(v, (list, tuple)) else [v] * n


def _conv(spec: dict, call: Call, dtype) -> OpWork:
    x, w = call.shape(spec["a"]), call.shape(spec["b"])
    # a convolution's weight is [C_out, C_in/groups, *kernel]; a transposed one's [C_in, C_out/groups, *kernel]
    transposed = bool(call.value(spec.get("transposed_arg")))
    if len(x) < 3 or len(w) != len(x) or (x[1] != w[0] if transposed else not w[1] or x[1] % w[1]):
        return OpWork("conv", dtype, None, None, {}, f"input {x} and weight {w} are not a convolution's")
    groups = (call.value(spec.get("groups_arg")) or 1) if transposed else x[1] // w[1]
    k_out = w[1] * groups if transposed else w[0]
    chan = {"n": x[0], "c": x[1], "k": k_out, "groups": groups}
    stride, pad, dil = (call.value(spec.get(f"{p}_arg")) for p in ("stride", "padding", "dilation"))
    if stride is None or pad is None or dil is None:
        return OpWork(
            "conv",
            dtype,
            None,
            None,
            chan,
            "no Concrete Inputs (stride, padding, dilation): the output size is unknown; record with a recent PyTorch",
        )
    nd = len(x) - 2
    out_pad = _per_dim(call.value(spec.get("output_padding_arg")) or 0, nd)
    out = [
        _conv_out(s, r, st, p, d, transposed, op)
        for s, r, st, p, d, op in zip(x[2:], w[2:], _per_dim(stride, nd), _per_dim(pad, nd), _per_dim(dil, nd), out_pad)
    ]
    work = conv_work(x, w, [x[0], k_out, *out], _known(dtype), transposed=transposed)
    return OpWork("conv", dtype, work.flops, _bytes_of(work, dtype), chan)


def _conv_bwd(spec: dict, call: Call, dtype) -> OpWork:
    g, x, w = call.shape(spec["g"]), call.shape(spec["a"]), call.shape(spec["b"])
    if len(g) < 3 or len(w) != len(g) or len(x) != len(g):
        return OpWork("conv_bwd", dtype, None, None, {}, f"shapes {g}, {x}, {w} are not a convolution backward's")
    transposed = bool(call.value(spec.get("transposed_arg")))
    mask = call.value(spec.get("mask_arg"))
    directions = sum(1 for m in (mask[:2] if isinstance(mask, (list, tuple)) else (True, True)) if m)
    work = conv_work(x, w, g, _known(dtype), transposed=transposed, directions=directions)
    groups = (call.value(spec.get("groups_arg")) or 1) if transposed else x[1] // w[1]
    return OpWork(
        "conv_bwd", dtype, work.flops, _bytes_of(work, dtype), {"n": x[0], "c": x[1], "k": g[1], "groups": groups}
    )


def _truthy(v) -> bool:
    return v is True or (isinstance(v, int) and not isinstance(v, bool) and v > 0)


def _attention(spec: dict, call: Call, dtype) -> OpWork:
    iq, ik, iv = spec.get("args", [0, 1, 2])
    q, k, v = call.shape(iq), call.shape(ik), call.shape(iv)
    if len(q) != 4 or len(k) != 4 or len(v) != 4:
        return OpWork("attention", dtype, None, None, {}, f"q {q}, k {k}, v {v}: expected 4-D tensors")
    if spec.get("layout") == "BLHD":
        (b, lq, h, d), lk, dv = q, k[1], v[3]
    else:
        (b, h, lq, d), lk, dv = q, k[2], v[3]
    causal = _truthy(call.value(spec.get("causal_arg")))
    work = attention_work(b * h, lq, lk, d, dv, _known(dtype), "bwd" if spec.get("backward") else "fwd", causal)
    return OpWork(
        "attention",
        dtype,
        work.flops,
        _bytes_of(work, dtype),
        {"batch": b * h, "m": lq, "n": lk, "k": d, "dv": dv, "causal": causal},
    )
