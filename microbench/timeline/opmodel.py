"""FLOPs and bytes of the GEMM, convolution and attention operators of a trace recorded with shapes, from each
cpu_op's `Input Dims`, `Input type` and `Concrete Inputs` (formulas per family; which operator is which family, and
where its arguments sit, in microbench/data/op_models.toml)."""
from __future__ import annotations

import ast
import math
import tomllib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from microbench.core import dtypes

MODELS_PATH = Path(__file__).resolve().parent.parent / "data" / "op_models.toml"
ELEMENT_BYTES = {d.name: d.bytes for d in dtypes.TABLE}


@dataclass(frozen=True)
class OpWork:
    family: str            # mm, bmm, matmul, linear, conv, conv_bwd, attention
    dtype: str | None      # of the first matrix operand (fp32, bf16, ...), None when the trace names no type
    flops: int | None      # None: the shapes do not determine it (`note` says why)
    bytes_moved: int | None
    dims: dict             # the GEMM view: m, n, k (and batch), or conv channels, for the eligibility checks
    note: str = ""


@lru_cache(maxsize=None)
def _models(path: str = str(MODELS_PATH)) -> tuple[dict, dict]:
    data = tomllib.loads(Path(path).read_text())
    return data["ops"], data["dtypes"]


def modelled_ops() -> frozenset[str]:
    return frozenset(_models()[0])


def dtype_of(type_name: str | None) -> str | None:
    return _models()[1].get(type_name) if type_name else None


def _concrete(concrete: list | None, i: int | None):
    """A Concrete Inputs entry ('[1, 1]', 'False', '2', 'same') -> a Python value, None when absent."""
    if concrete is None or i is None or i >= len(concrete) or concrete[i] in ("", None):
        return None
    text = concrete[i]
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text  # 'same', 'valid'


def _truthy(v) -> bool:
    return v is True or (isinstance(v, int) and not isinstance(v, bool) and v > 0)


def _bytes(dtype: str | None, *numels: int) -> int | None:
    e = ELEMENT_BYTES.get(dtype) if dtype else None
    return None if e is None else e * sum(numels)


def _gemm(dtype, b, m, n, k, family) -> OpWork:
    return OpWork(family, dtype, 2 * b * m * n * k, _bytes(dtype, b * m * k, b * k * n, b * m * n),
                  {"batch": b, "m": m, "n": n, "k": k})


def _matmul(a: list[int], w: list[int], dtype, family: str) -> OpWork | None:
    if family == "linear":
        if len(w) != 2 or not a or a[-1] != w[1]:
            return None
        return _gemm(dtype, 1, math.prod(a[:-1]), w[0], w[1], family)
    a2 = [1] + a if len(a) == 1 else a
    w2 = w + [1] if len(w) == 1 else w
    if len(a2) < 2 or len(w2) < 2 or a2[-1] != w2[-2]:
        return None
    batch_a, batch_b = a2[:-2], w2[:-2]
    if family in ("mm",) and (batch_a or batch_b):
        return None
    n_batch = max(len(batch_a), len(batch_b))
    pa, pb = [1] * (n_batch - len(batch_a)) + batch_a, [1] * (n_batch - len(batch_b)) + batch_b
    batch = math.prod(max(x, y) for x, y in zip(pa, pb)) if n_batch else 1
    return _gemm(dtype, batch, a2[-2], w2[-1], a2[-1], family)


def _conv_out(size: int, r: int, stride: int, pad, dil: int) -> int:
    if pad == "same":
        return size
    pad = 0 if pad == "valid" else pad
    return (size + 2 * pad - dil * (r - 1) - 1) // stride + 1


def _per_dim(v, n: int) -> list:
    return list(v) * (n if len(v) == 1 else 1) if isinstance(v, (list, tuple)) else [v] * n


def _conv(spec: dict, dims: list, concrete, dtype) -> OpWork:
    x, w = dims[spec["a"]], dims[spec["b"]]
    if len(x) < 3 or len(w) != len(x) or x[1] % w[1]:
        return OpWork("conv", dtype, None, None, {}, f"input {x} and weight {w} are not a convolution's")
    n, c, spatial, k, kernel = x[0], x[1], x[2:], w[0], w[2:]
    chan = {"n": n, "c": c, "k": k, "groups": c // w[1]}
    stride, pad, dil = (_concrete(concrete, spec.get(f"{p}_arg")) for p in ("stride", "padding", "dilation"))
    if stride is None or pad is None or dil is None:
        return OpWork("conv", dtype, None, None, chan, "no Concrete Inputs (stride, padding, dilation): the output "
                      "size is unknown; record with a recent PyTorch")
    out = [_conv_out(s, r, st, p, d) for s, r, st, p, d in zip(spatial, kernel, _per_dim(stride, len(spatial)),
                                                               _per_dim(pad, len(spatial)), _per_dim(dil, len(spatial)))]
    macs = n * k * math.prod(out) * w[1] * math.prod(kernel)
    return OpWork("conv", dtype, 2 * macs, _bytes(dtype, math.prod(x), math.prod(w), n * k * math.prod(out)), chan)


def _conv_bwd(spec: dict, dims: list, concrete, dtype) -> OpWork:
    g, x, w = dims[spec["g"]], dims[spec["a"]], dims[spec["b"]]
    if len(g) < 3 or len(w) != len(g) or len(x) != len(g):
        return OpWork("conv_bwd", dtype, None, None, {}, f"shapes {g}, {x}, {w} are not a convolution backward's")
    macs = g[0] * g[1] * math.prod(g[2:]) * w[1] * math.prod(w[2:])
    mask = _concrete(concrete, spec.get("mask_arg"))
    passes = sum(1 for m in (mask[:2] if isinstance(mask, (list, tuple)) else (True, True)) if m)
    return OpWork("conv_bwd", dtype, 2 * macs * passes,
                  _bytes(dtype, math.prod(g) * passes, math.prod(x), math.prod(w)),
                  {"n": x[0], "c": x[1], "k": w[0], "groups": x[1] // w[1] if w[1] else 1})


def _attention(spec: dict, dims: list, concrete, dtype) -> OpWork:
    iq, ik, iv = spec.get("args", [0, 1, 2])
    q, k, v = dims[iq], dims[ik], dims[iv]
    if len(q) != 4 or len(k) != 4 or len(v) != 4:
        return OpWork("attention", dtype, None, None, {}, f"q {q}, k {k}, v {v}: expected 4-D tensors")
    if spec.get("layout") == "BLHD":
        (b, lq, h, d), lk, dv = q, k[1], v[3]
    else:
        (b, h, lq, d), lk, dv = q, k[2], v[3]
    flops = 2 * b * h * lq * lk * (d + dv)
    causal = _truthy(_concrete(concrete, spec.get("causal_arg")))
    if causal:
        flops //= 2
    if spec.get("backward"):
        flops = flops * 5 // 2
    nbytes = _bytes(dtype, math.prod(q), math.prod(k), math.prod(v), b * h * lq * dv)
    return OpWork("attention", dtype, flops, nbytes, {"batch": b * h, "m": lq, "n": lk, "k": d, "causal": causal})


def op_work(name: str, input_dims: list | None, input_types: list | None, concrete: list | None = None) -> OpWork | None:
    """The work of one operator call, None when the operator has no model (or no shapes were recorded)."""
    spec = _models()[0].get(name)
    if spec is None or not input_dims:
        return None
    dims = [list(d) if isinstance(d, list) else [] for d in input_dims]
    types = list(input_types or [])
    family = spec["family"]
    first = spec.get("args", [spec.get("a", 0)])[0]
    dtype = dtype_of(types[first]) if first < len(types) else None
    try:
        if family in ("mm", "bmm", "matmul", "linear"):
            w = _matmul(dims[spec["a"]], dims[spec["b"]], dtype, family)
            return w or OpWork(family, dtype, None, None, {}, f"shapes {dims[spec['a']]} x {dims[spec['b']]} do "
                                                               f"not multiply as {family}")
        if family == "conv":
            return _conv(spec, dims, concrete, dtype)
        if family == "conv_bwd":
            return _conv_bwd(spec, dims, concrete, dtype)
        return _attention(spec, dims, concrete, dtype)
    except (IndexError, TypeError, ValueError, ZeroDivisionError) as e:
        return OpWork(family, dtype, None, None, {}, f"shapes {input_dims} do not fit the {family} model ({e})")
