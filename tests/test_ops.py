"""The op family specs (microbench.core.ops) and the one dtype table (microbench.core.dtypes)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from microbench.core import dtypes, ops
from microbench.core.cases import make_inputs, reference
from microbench.core.shapes import Case, ConvShape, GemmShape


def test_dtype_table_matches_torch_storage_and_the_config():
    for d in dtypes.TABLE:
        try:
            t = dtypes.torch_dtype(d.name)
        except ValueError:
            continue  # an old torch without this float8
        assert torch.empty(0, dtype=t).element_size() == d.bytes
    assert dtypes.name_of(torch.float32) == "fp32"  # tf32 shares the storage; fp32 names it
    assert dtypes.name_of(torch.bfloat16) == "bf16" and dtypes.name_of(torch.complex64) is None
    # bench.toml's [tolerance] has exactly the case dtypes (the config loader requires every one)
    import tomllib

    from microbench.core.config import DEFAULT_CONFIG

    assert set(tomllib.loads(DEFAULT_CONFIG.read_text())["tolerance"]) == set(dtypes.CASE_DTYPES)
    with pytest.raises(ValueError, match="unknown dtype 'fp4'"):
        dtypes.get("fp4")


def test_every_case_finds_its_spec_and_direction():
    g = Case("gemm", GemmShape(4, 5, 6), "fp32")
    c = Case("conv2d_bwd_data", ConvShape(1, 2, 5, 5, 3, 3, 3), "fp32")
    assert (ops.of(g).family, g.direction) == ("gemm", None)
    assert (ops.of(c).family, c.direction) == ("conv2d", "bwd_data")
    assert ops.short_op("conv2d_bwd_weight") == "conv bwd_weight" and ops.short_op("Conv2d") == "Conv2d"
    with pytest.raises(ValueError, match="unknown op family"):
        ops.family("layernorm")  # (attention is one now: core/ops/attention.py)


def test_gemm_spec_inputs_reference_and_work_against_numpy():
    case = Case("gemm", GemmShape(7, 5, 3, batch=2, trans_a=True), "fp32")
    a, b = make_inputs(case, seed=3)
    assert a.shape == (2, 7, 3) and a.stride(-2) == 1  # A stored column-major: a transposed view
    expected = np.matmul(a.double().numpy(), b.double().numpy())
    assert np.allclose(reference(case, a, b).numpy(), expected, rtol=0, atol=1e-12)
    w = ops.of(case).work(case)
    assert w.flops == 2 * 2 * 7 * 5 * 3 and w.bytes_moved == 4 * 2 * (7 * 3 + 3 * 5 + 7 * 5)


def test_conv_spec_reference_against_a_direct_sum():
    s = ConvShape(n=1, c=2, h=4, w=4, k=3, r=3, s=3, pad=(1, 1))
    case = Case("conv2d_fwd", s, "fp32")
    x, w = make_inputs(case, seed=1)
    assert x.is_contiguous(memory_format=torch.channels_last)
    xp = np.pad(x.double().numpy(), ((0, 0), (0, 0), (1, 1), (1, 1)))
    wn = w.double().numpy()
    y = np.zeros((1, 3, 4, 4))
    for k in range(3):
        for i in range(4):
            for j in range(4):
                y[0, k, i, j] = (xp[0, :, i : i + 3, j : j + 3] * wn[k]).sum()
    assert np.allclose(reference(case, x, w).numpy(), y, atol=1e-12)


def test_spec_binds_the_provider_signature():
    seen = {}

    def conv_provider(a, b, *, shape, direction, allow_tf32):
        seen.update(shape=shape, direction=direction, allow_tf32=allow_tf32)
        return "out"

    case = Case("conv2d_bwd_weight", ConvShape(1, 2, 5, 5, 3, 3, 3), "tf32")
    assert ops.of(case).bind(conv_provider, case, None, None)() == "out"
    assert seen == {"shape": case.shape, "direction": "bwd_weight", "allow_tf32": True}


def test_aten_matmul_operands_become_a_case_with_their_layout():
    a = torch.randn(6, 4)
    b = torch.randn(5, 4).t()  # column-major [4, 5]
    spec = ops.for_aten("aten::mm")
    (case,), why = spec.aten_cases("aten::mm", (a, b), "fp32")
    assert why == "" and case == Case("gemm", GemmShape(6, 5, 4, trans_b=True), "fp32")
    assert ops.for_aten("aten::relu") is None
