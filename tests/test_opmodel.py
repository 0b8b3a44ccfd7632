"""Per-op work model and DLProf's eligibility check on the operators of real traces recorded with shapes (the
bert-small pair, TorchRec), expected values from the formulas written out here."""

from __future__ import annotations

import gzip
import json

import pytest

from microbench.core.ops.aten import trace_work as op_work
from microbench.trace.eligibility import Device, check, device_of

from .conftest import TRACES, needs_traces


def _ops(trace: str, name: str) -> list[dict]:
    with gzip.open(TRACES / trace, "rt") as f:
        return [e["args"] for e in json.load(f)["traceEvents"] if e.get("cat") == "cpu_op" and e["name"] == name]


def _work(name: str, args: dict):
    return op_work(name, args.get("Input Dims"), args.get("Input type"), args.get("Concrete Inputs"))


@needs_traces
@pytest.mark.parametrize("trace", ["h100_bert_small.json.gz", "mi300_bert_small.json.gz"])
def test_bert_gemms_and_attention(trace):
    seen = set()
    for args in _ops(trace, "aten::addmm"):
        (bias,), (m, k), (k2, n) = args["Input Dims"][:3]
        w = _work("aten::addmm", args)
        assert (w.family, w.dtype, w.flops) == ("mm", "bf16", 2 * m * n * k) and k == k2 and bias == n
        assert w.bytes_moved == 2 * (m * k + k * n + m * n)
        seen.add((m, n, k))
    assert seen == {(141, 512, 512), (141, 2048, 512), (141, 512, 2048), (141, 30522, 512)}
    for args in _ops(trace, "aten::linear"):  # the same GEMMs one level up
        (_, m, k), (n, _), _ = args["Input Dims"][:3]
        assert _work("aten::linear", args).flops == 2 * m * n * k
    sdpa = _ops(trace, "aten::scaled_dot_product_attention")
    assert len(sdpa) == 4
    for args in sdpa:
        (b, h, lq, d) = args["Input Dims"][0]
        assert args["Concrete Inputs"][5] == "False"  # not causal
        w = _work("aten::scaled_dot_product_attention", args)
        assert w.flops == 2 * b * h * lq * lq * d * 2 and w.dtype == "bf16"
    # the flash kernel's own op has the sequence and head dims swapped (B, L, H, D): same FLOPs
    for args in _ops(trace, "aten::_flash_attention_forward"):
        assert _work("aten::_flash_attention_forward", args).flops == 2 * 1 * 8 * 141 * 141 * 64 * 2


@needs_traces
def test_torchrec_fp32_gemms():
    bmm = _ops("a100_torchrec_rank0.json.gz", "aten::bmm")
    assert bmm
    for args in bmm:
        (b, m, k), (b2, k2, n) = args["Input Dims"]
        w = _work("aten::bmm", args)
        assert (w.dtype, w.flops) == ("fp32", 2 * b * m * n * k) and (b, k) == (b2, k2)
        assert w.bytes_moved == 4 * b * (m * k + k * n + m * n)
    plain = broadcast = odd = 0
    for args in _ops("a100_torchrec_rank0.json.gz", "aten::matmul"):
        dims, w = args["Input Dims"], _work("aten::matmul", args)
        if len(dims) == 2 and len(dims[0]) == len(dims[1]) == 2:
            (m, k), (_, n) = dims
            assert w.flops == 2 * m * n * k
            plain += 1
        elif len(dims) == 2 and len(dims[0]) == 3 and len(dims[1]) == 2:  # [b, m, k] @ [k, n]
            (b, m, k), (_, n) = dims
            assert w.flops == 2 * b * m * n * k
            broadcast += 1
        elif w.flops is None:  # this sampled trace also records matmuls with more than two inputs
            assert "do not multiply" in w.note
            odd += 1
    assert plain and broadcast and odd


def test_conv_needs_its_stride_and_padding():
    dims = [[8, 3, 224, 224], [64, 3, 7, 7], [64], [], [], [], []]
    w = op_work("aten::conv2d", dims, ["float"] * 3, ["", "", "", "[2, 2]", "[3, 3]", "[1, 1]", "1"])
    p = (224 + 2 * 3 - 7) // 2 + 1  # 112
    assert w.flops == 2 * 8 * 64 * p * p * 3 * 7 * 7
    w = op_work("aten::conv2d", dims, ["float"] * 3, None)
    assert w.flops is None and "Concrete Inputs" in w.note
    dw = op_work(
        "aten::conv2d",
        [[2, 96, 56, 56], [96, 1, 3, 3], [], [], [], [], []],
        ["c10::Half"] * 3,
        ["", "", "", "[1, 1]", "[1, 1]", "[1, 1]", "96"],
    )
    assert dw.flops == 2 * 2 * 96 * 56 * 56 * 1 * 9 and dw.dims["groups"] == 96  # depthwise: C/groups = 1
    bwd = op_work(
        "aten::convolution_backward",
        [[2, 64, 56, 56], [2, 32, 56, 56], [64, 32, 3, 3]] + [[]] * 8,
        ["c10::Half"] * 3,
        [""] * 10 + ["[True, True, False]"],
    )
    assert bwd.flops == 2 * (2 * 2 * 64 * 56 * 56 * 32 * 9)
    assert op_work("aten::relu", [[4, 4]], ["float"]) is None


def test_eligibility_reasons_and_remedies():
    fp32 = op_work("aten::mm", [[2048, 125], [125, 320]], ["float", "float"])
    a100, v100, mi300 = (
        device_of("NVIDIA A100-PG509-200", "8.0"),
        device_of("Tesla V100-SXM2-32GB", "7.0"),
        device_of("AMD Instinct MI300X VF", "9.4"),
    )
    assert mi300 == Device("amd", None)
    f = check(fp32, ["no"], ["ampere_sgemm_32x32_sliced1x4_tn"], a100)
    assert f.rule == "fp32_tf32_off" and "allow_tf32" in f.remedy and "ampere_sgemm" in f.reason
    assert check(fp32, ["no"], ["volta_sgemm_64x64_nt"], v100).rule == "fp32_without_tf32"
    assert check(fp32, ["no"], ["sgemm"], a100, autocast=True).rule == "fp32_in_autocast"
    assert check(fp32, ["yes"], ["sm80_xmma_gemm_tf32"], a100) is None  # used Tensor Cores
    assert check(fp32, ["no", "unknown"], ["k1", "k2"], a100) is None  # not settled: not judged
    assert check(fp32, ["no"], ["Cijk_Ailk_Bljk_SB_MT128x64x8_SN_FMA"], mi300) is None  # no AMD fp32 rule
    vocab = op_work("aten::linear", [[1, 141, 512], [30522, 512], [30522]], ["c10::BFloat16"] * 3)
    f = check(vocab, ["no"], ["gemv2T_kernel"], device_of("NVIDIA H100 80GB HBM3", "9.0"))
    assert f.rule == "misaligned" and "n = 30522" in f.reason and "30528" in f.remedy
    conv = op_work(
        "aten::conv2d",
        [[8, 64, 56, 56], [64, 64, 3, 3], [], [], [], [], []],
        ["c10::Half"] * 3,
        ["", "", "", "[1, 1]", "[1, 1]", "[1, 1]", "1"],
    )
    nchw = [[64 * 56 * 56, 56 * 56, 56, 1], [576, 9, 3, 1]]
    assert check(conv, ["no"], ["implicit_convolve_hgemm"], a100, input_strides=nchw).rule == "channels_first"
    nhwc = [[64 * 56 * 56, 1, 56 * 64, 64], [576, 1, 192, 64]]
    assert check(conv, ["no"], ["implicit_convolve_hgemm"], a100, input_strides=nhwc).rule == "low_precision_other"
