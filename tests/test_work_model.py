"""One work model, two entry points (microbench.core.ops.aten): every op family gives the same FLOPs and bytes
from live arguments (what `decompose` sees, through the step recorder) and from a trace's recorded shapes
(what `trace` reads: Input Dims, Input type, Concrete Inputs of the same calls, recorded by torch.profiler on
this CPU)."""

from __future__ import annotations

import json
from collections import Counter

import pytest
import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from microbench.core.ops import aten
from microbench.decompose.oprecord import analyse


class _Live(TorchDispatchMode):
    """Each call's (name, flops, bytes) as the step recorder counts it: of the modelled (matrix) operators, or with
    `modelled=False` of all the others."""

    def __init__(self, modelled: bool = True):
        super().__init__()
        self.modelled = modelled
        self.calls = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if (func._schema.name in aten.modelled_ops()) == self.modelled:
            r = analyse(func, args, kwargs or {}, out, None, None)
            self.calls.append((r.op, r.flops, r.bytes))
        return out


def _run(fn, *inputs):
    fn(*inputs).float().sum().backward()


def _both(fn, *inputs, tmp_path) -> tuple[Counter, Counter]:
    """(live, traced) multisets of (operator, flops, bytes) of one forward and backward of `fn`."""
    with _Live() as live:
        _run(fn, *[x.detach().requires_grad_(x.requires_grad) for x in inputs])
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True) as prof:
        _run(fn, *[x.detach().requires_grad_(x.requires_grad) for x in inputs])
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    seen = {name for name, _, _ in live.calls}
    traced = []
    for e in json.loads(path.read_text())["traceEvents"]:
        if e.get("cat") == "cpu_op" and e["name"] in seen:
            a = e["args"]
            w = aten.trace_work(e["name"], a.get("Input Dims"), a.get("Input type"), a.get("Concrete Inputs"))
            traced.append((e["name"], w.flops, w.bytes_moved))
    return Counter(live.calls), Counter(traced)


def _attention(causal: bool):
    return lambda q, k, v: nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)


def _r(*shape, grad=True):
    return torch.randn(*shape).requires_grad_(grad)


FAMILIES = {
    "mm/addmm (linear)": (nn.Linear(24, 40), [_r(7, 24)]),
    "bmm": (torch.bmm, [_r(3, 5, 6), _r(3, 6, 7)]),
    "baddbmm": (lambda c, a, b: torch.baddbmm(c, a, b), [_r(3, 5, 7), _r(3, 5, 6), _r(3, 6, 7)]),
    "conv2d strided": (nn.Conv2d(4, 8, 3, stride=2, padding=1), [_r(2, 4, 9, 9)]),
    "conv2d grouped dilated": (nn.Conv2d(8, 16, 3, groups=4, dilation=2, padding=2, bias=False), [_r(2, 8, 9, 9)]),
    "conv2d first layer": (nn.Conv2d(3, 8, 3, padding=1, bias=False), [_r(2, 3, 6, 6, grad=False)]),
    "conv1d": (nn.Conv1d(4, 6, 5, padding=2), [_r(3, 4, 11)]),
    "conv3d": (nn.Conv3d(2, 4, 3, padding=1, groups=2), [_r(1, 2, 4, 4, 4)]),
    "conv transposed": (
        nn.ConvTranspose2d(8, 12, 3, stride=2, padding=1, output_padding=1, groups=4),
        [_r(2, 8, 5, 6)],
    ),
    "attention": (_attention(False), [_r(2, 3, 10, 8), _r(2, 3, 12, 8), _r(2, 3, 12, 16)]),
    "attention causal": (_attention(True), [_r(2, 3, 10, 8), _r(2, 3, 10, 8), _r(2, 3, 10, 8)]),
}


@pytest.mark.parametrize("family", list(FAMILIES))
def test_live_and_traced_calls_give_the_same_work(family, tmp_path):
    fn, inputs = FAMILIES[family]
    live, traced = _both(fn, *inputs, tmp_path=tmp_path)
    assert live and all(flops for _, flops, _ in live)  # every modelled call has a FLOP count
    assert live == traced


def test_attention_rule_backward_twice_forward_causal_halved(tmp_path):
    b, h, l, d = 2, 3, 10, 8
    fwd = 2 * b * h * l * l * (d + d)
    live, _ = _both(_attention(True), _r(b, h, l, d), _r(b, h, l, d), _r(b, h, l, d), tmp_path=tmp_path)
    flops = {op: f for op, f, _ in live}
    assert flops["aten::_scaled_dot_product_flash_attention_for_cpu"] == fwd // 2
    assert flops["aten::_scaled_dot_product_flash_attention_for_cpu_backward"] == fwd  # 2 x (fwd / 2)


def _schema(name: str, spec: dict):
    """The operator's schema in the installed torch, or, for one ATen has since removed (PyTorch 1.9's
    cudnn_convolution_backward, still in old traces), the schema op_models.toml keeps for it."""
    if "removed_schema" in spec:
        assert not hasattr(torch.ops.aten, name.split("::")[1]), f"{name} is back in ATen: drop removed_schema"
        return torch._C.parse_schema(spec["removed_schema"])
    return getattr(torch.ops.aten, name.split("::")[1]).default._schema


def test_argument_positions_match_the_operator_schemas():
    """op_models.toml names arguments by position; each position must hold the argument it means."""
    expected = {
        "a": ("self", "mat1", "batch1", "input"),
        "b": ("mat2", "batch2", "other", "weight"),
        "g": ("grad_output",),
        "stride_arg": ("stride",),
        "padding_arg": ("padding",),
        "dilation_arg": ("dilation",),
        "transposed_arg": ("transposed",),
        "output_padding_arg": ("output_padding",),
        "groups_arg": ("groups",),
        "mask_arg": ("output_mask",),
        "causal_arg": ("is_causal", "custom_mask_type"),
    }
    for name, spec in aten._models()[0].items():
        args = [a.name for a in _schema(name, spec).arguments]
        for key, names in expected.items():
            if key in spec:
                assert args[spec[key]] in names, (name, key, args[spec[key]])
        qkv = [args[i] for i in spec.get("args", [0, 1, 2])] if spec["family"] == "attention" else None
        assert qkv in (None, ["query", "key", "value"]), (name, qkv)


def test_replayed_operators_and_operands():
    assert aten.replayed_ops("gemm") == {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm"}
    assert aten.replayed_ops("conv2d") == {"aten::convolution", "aten::convolution_backward"}
    assert aten.operands("aten::addmm") == (1, 2)


def test_trace_entry_point_without_types_or_concrete_inputs():
    w = aten.trace_work("aten::mm", [[4, 5], [5, 6]], None)
    assert (w.flops, w.bytes_moved, w.dtype) == (2 * 4 * 5 * 6, None, None)  # FLOPs known, bytes need a dtype
    assert aten.trace_work("aten::relu", [[4]], ["float"]) is None
    bad = aten.trace_work("aten::mm", [[4, 5], [6, 7]], ["float", "float"])
    assert bad.flops is None and "do not multiply" in bad.note


def _example(name: str, spec: dict) -> dict:
    """Arguments (position -> value) that make `name` one problem of its family; shapes as lists."""
    fam = spec["family"]
    if fam in ("mm", "bmm", "matmul", "linear"):
        a, b = {
            "mm": ([8, 16], [16, 4]),
            "bmm": ([2, 8, 16], [2, 16, 4]),
            "matmul": ([3, 8, 16], [16, 4]),
            "linear": ([3, 8, 16], [4, 16]),
        }[fam]
        return {spec["a"]: a, spec["b"]: b}
    if fam in ("conv", "conv_bwd"):
        nd = 1 if "conv1d" in name else 3 if "conv3d" in name else 2
        x, w, g = [2, 4] + [9] * nd, [8, 4] + [3] * nd, [2, 8] + [5] * nd
        out = {spec["a"]: x, spec["b"]: w, spec.get("mask_arg"): [True, True, False], spec.get("g"): g}
        for key, v in (("stride", 2), ("padding", 1), ("dilation", 1), ("output_padding", 0)):
            out[spec.get(f"{key}_arg")] = [v] * nd
        out[spec.get("transposed_arg")] = False
        out[spec.get("groups_arg")] = 1
        return {k: v for k, v in out.items() if k is not None}
    q = [2, 10, 3, 8] if spec.get("layout") == "BLHD" else [2, 3, 10, 8]
    iq, ik, iv = spec.get("args", [0, 1, 2])
    causal = 1 if name.startswith("aten::_efficient_attention") else True  # custom_mask_type 1: causal
    return {iq: q, ik: q, iv: q, spec["causal_arg"]: causal}


def _as_recorded(value) -> tuple:
    """One argument as the profiler records it: (Input Dims entry, Input type entry, Concrete Inputs entry)."""
    if isinstance(value, torch.Tensor):
        return list(value.shape), "c10::BFloat16", ""
    if value is None:
        return [], "", ""
    return [], "ScalarList" if isinstance(value, list) else "Scalar", str(value)


@pytest.mark.parametrize("name", sorted(aten.modelled_ops()))
def test_every_modelled_operator_gives_the_same_work_both_ways(name):
    """Every operator of op_models.toml, GPU-only ones included (meta tensors: nothing runs): its schema's
    arguments filled with one problem, given live and as a trace records them."""
    spec = aten._models()[0][name]
    schema = _schema(name, spec)
    chosen = _example(name, spec)
    operands = (
        spec.get("args", [0, 1, 2])
        if spec["family"] == "attention"
        else [spec[k] for k in ("a", "b", "g") if k in spec]
    )
    args = []
    for i, arg in enumerate(schema.arguments):
        v = chosen.get(i, arg.default_value if arg.has_default_value() else None)
        args.append(torch.empty(v, device="meta", dtype=torch.bfloat16) if i in operands else v)
    live = aten.live_work(schema, args)
    dims, types, concrete = zip(*(_as_recorded(v) for v in args))
    traced = aten.trace_work(name, list(dims), list(types), list(concrete))
    assert live.flops and live.bytes_moved, live.note
    assert live.dims.get("causal", True)  # the causal flag was read at its position, both ways
    assert (live.family, live.dtype, live.flops, live.bytes_moved, live.dims) == (
        traced.family,
        traced.dtype,
        traced.flops,
        traced.bytes_moved,
        traced.dims,
    )


MEMORY_BOUND_CALLS = {
    "add broadcast": lambda x, y, w, i: x + y[0],
    "add_ in place": lambda x, y, w, i: x.clone().add_(y),
    "mul scalar, gelu": lambda x, y, w, i: nn.functional.gelu(x * 3.0),
    "layer norm": lambda x, y, w, i: nn.functional.layer_norm(x, (x.shape[-1],)),
    "softmax": lambda x, y, w, i: torch.softmax(x, -1),
    "sum over a dim": lambda x, y, w, i: x.sum(1),
    "copy across dtypes": lambda x, y, w, i: x.to(torch.bfloat16),
    "embedding": lambda x, y, w, i: nn.functional.embedding(i, w),
    "index_select": lambda x, y, w, i: torch.index_select(w, 0, i.flatten()),
    "index_select, negative dim": lambda x, y, w, i: torch.index_select(w, -1, _COLUMNS),
    "comparison": lambda x, y, w, i: x == y,
    "fill_ writes only": lambda x, y, w, i: x.clone().fill_(1.0),
    "index_add_ touches its rows": lambda x, y, w, i: w.clone().index_add_(0, _ROWS, _ADDED),
    "sum over a dim list": lambda x, y, w, i: x.sum((0, 1)),
    "amax over a dim": lambda x, y, w, i: x.amax(1),
    "vector norm over a dim": lambda x, y, w, i: torch.linalg.vector_norm(x, 2, 1),
}
# operands made once, outside the recorded calls
_COLUMNS, _ROWS, _ADDED = torch.tensor([1, 3, 5]), torch.tensor([0, 7, 7, 49]), torch.ones(4, 16)


@pytest.mark.parametrize("case", list(MEMORY_BOUND_CALLS))
def test_memory_bound_calls_give_the_same_bytes_both_ways(case, tmp_path):
    """Element-wise, normalization, reduction, gather and copy calls: the bytes a trace's recorded shapes give
    (trace_other_work, which infers the outputs) are the bytes the live call moves (other_work)."""
    from microbench.trace.classify import classify_operator

    fn = MEMORY_BOUND_CALLS[case]
    args = (torch.randn(6, 32), torch.randn(6, 32), torch.randn(50, 16), torch.randint(0, 50, (3, 4)))
    with _Live(modelled=False) as live:
        fn(*args)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True) as prof:
        fn(*args)
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    moving = {name for name, _, nbytes in live.calls if nbytes}
    assert moving, "the case moves no bytes: it tests nothing"
    traced = []
    for e in json.loads(path.read_text())["traceEvents"]:
        if e.get("cat") == "cpu_op" and e["name"] in moving:
            a = e["args"]
            w = aten.trace_other_work(
                e["name"],
                classify_operator(e["name"]).cls,
                a.get("Input Dims"),
                a.get("Input type"),
                a.get("Concrete Inputs"),
            )
            traced.append((e["name"], w and w[1]))
    assert Counter((op, nbytes) for op, _, nbytes in live.calls if op in moving) == Counter(traced)


def test_trace_other_work_infers_results_it_can_and_refuses_the_rest():
    f32, f16, bf16 = "float", "c10::Half", "c10::BFloat16"
    # promotion: half x float writes float; bf16 x half writes float too
    assert aten.trace_other_work("aten::mul", "elementwise", [[4, 8], [4, 8]], [f16, f32])[1] == 32 * (2 + 4 + 4)
    assert aten.trace_other_work("aten::add", "elementwise", [[4, 8], [4, 8], []], [bf16, f16, "Scalar"])[1] == 32 * (
        2 + 2 + 4
    )
    # a tensor list's shapes are not recorded (aten::cat's 1.6 GB for a 156 us copy); nor is another library's op
    assert (
        aten.trace_other_work("aten::cat", "memcpy", [[2048, 160, 606], [], []], [f32, "TensorList", "Scalar"]) is None
    )
    assert aten.trace_other_work("fbgemm::FloatToHFP8Quantized", "elementwise", [[64, 64]], [f32]) is None
    assert (
        aten.trace_other_work("aten::max", "reduction", [[4, 8], [], []], [f32, "Scalar", "Scalar"], ["", "1", "False"])
        is None
    )  # values and indices: not inferred
    # a fill writes and does not read; an index_add_ of 2 rows into a 5000-row table touches those rows only
    assert aten.trace_other_work("aten::fill_", "elementwise", [[1000], []], ["long int", "Scalar"])[1] == 8000
    assert (
        aten.trace_other_work(
            "aten::index_add_",
            "elementwise",
            [[5000, 16], [], [2], [2, 16], []],
            [f32, "Scalar", "long int", f32, "Scalar"],
        )[1]
        == 2 * (2 * 16 * 4) + 2 * 8
    )


def test_trace_other_work_says_none_where_the_trace_does_not_say():
    bf16 = "c10::BFloat16"
    assert aten.trace_other_work("aten::add", "elementwise", [[4, 8], [5, 8], []], [bf16, bf16, "Scalar"]) is None
    assert aten.trace_other_work("aten::add", "elementwise", [[4, 8]], ["c10::Quint4x2"]) is None  # unknown type
    assert (
        aten.trace_other_work(
            "aten::gather", "embedding", [[4, 8], [], [4, 2]], [bf16, "Scalar", "long int"], ["", "1", ""]
        )
        is None
    )  # which rows: not recorded
    assert aten.trace_other_work("aten::add", "elementwise", None, None) is None
    # broadcast: [4, 8] + [8] reads both and writes [4, 8]
    assert aten.trace_other_work("aten::add", "elementwise", [[4, 8], [8], []], [bf16, bf16, "Scalar"]) == (
        32,
        2 * (32 + 8 + 32),
    )
