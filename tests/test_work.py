"""Work counting against counts worked out by hand."""

from __future__ import annotations

import pytest

from microbench.core.ops.work import conv2d_work, elementwise_work, gemm_work, norm_work
from microbench.core.shapes import ConvShape, GemmShape


def test_gemm_square_fp16():
    # 2*M*N*K = 2*128^3 = 4,194,304 FLOPs; bytes = 2 B * (128*128 + 128*128 + 128*128) = 98,304
    w = gemm_work(GemmShape(128, 128, 128), "fp16")
    assert (w.flops, w.bytes_moved) == (4_194_304, 98_304)
    assert w.intensity == pytest.approx(4_194_304 / 98_304)


def test_gemm_batched_transposed_rectangular():
    # batch 3, M=10, N=20, K=30: FLOPs 2*3*10*20*30 = 36,000; elements 3*(10*30 + 30*20 + 10*20) = 3,300; fp32 -> 13,200 B
    s = GemmShape(10, 20, 30, batch=3, trans_a=True, trans_b=True)
    w = gemm_work(s, "fp32")
    assert (w.flops, w.bytes_moved) == (36_000, 13_200)
    # fp8 inputs with a bf16 output: 3*(300 + 600) * 1 B + 3*200 * 2 B = 2,700 + 1,200
    assert gemm_work(s, "fp8_e4m3", out_dtype="bf16").bytes_moved == 3_900


def test_conv_resnet50_first_layer():
    # 7x7/2 pad 3, 224 -> 112: P=Q=(224+6-7)//2+1 = 112
    s = ConvShape(n=1, c=3, h=224, w=224, k=64, r=7, s=7, stride=(2, 2), pad=(3, 3))
    assert (s.p, s.q) == (112, 112)
    w = conv2d_work(s, "fp32", "fwd")
    # MACs = N*K*P*Q*C*R*S = 64*112*112*3*49 = 118,013,952 -> FLOPs 236,027,904
    assert w.flops == 236_027_904
    # x 3*224*224 = 150,528; w 64*3*49 = 9,408; y 64*112*112 = 802,816; total 962,752 elements * 4 B
    assert w.bytes_moved == 3_851_008


@pytest.mark.parametrize("direction", ["fwd", "bwd_data", "bwd_weight"])
def test_conv_directions_same_flops_same_tensors(direction):
    s = ConvShape(n=2, c=4, h=5, w=5, k=6, r=3, s=3, pad=(1, 1))
    w = conv2d_work(s, "bf16", direction)
    # P=Q=5; MACs 2*6*25*4*9 = 10,800; elements x 200 + w 216 + y 300 = 716, 2 B each
    assert (w.flops, w.bytes_moved) == (21_600, 1_432)


def test_conv_groups_dilation_asymmetric():
    # depthwise-ish: groups 4, dilation 2, 3x1 filter, stride (2,1), pad (2,0): P = (9+4-2*2-1)//2+1 = 5, Q = (8-1)//1+1 = 8
    s = ConvShape(n=1, c=8, h=9, w=8, k=8, r=3, s=1, stride=(2, 1), pad=(2, 0), dilation=(2, 2), groups=4)
    assert (s.p, s.q) == (5, 8)
    w = conv2d_work(s, "fp32", "fwd")
    # MACs = N*K*P*Q*(C/g)*R*S = 8*5*8*2*3*1 = 1,920; elements x 576 + w 8*2*3 = 48 + y 320 = 944
    assert (w.flops, w.bytes_moved) == (3_840, 3_776)


def test_norm_and_elementwise():
    # batch norm over 2x3x4x4 = 96 elements, 3 channels, fp16
    f = norm_work(96, 3, "fp16", "fwd")
    assert (f.flops, f.bytes_moved) == (7 * 96, 2 * (2 * 96 + 2 * 3))
    b = norm_work(96, 3, "fp16", "bwd")
    assert (b.flops, b.bytes_moved) == (8 * 96, 2 * (3 * 96 + 4 * 3))
    # add of two fp32 tensors of 1000 elements: 1,000 FLOPs, 12,000 bytes
    a = elementwise_work(1000, "fp32", inputs=2, outputs=1)
    assert (a.flops, a.bytes_moved) == (1000, 12_000)


def test_bad_inputs():
    with pytest.raises(ValueError, match="unknown conv direction"):
        conv2d_work(ConvShape(1, 1, 3, 3, 1, 1, 1), "fp32", "sideways")
    with pytest.raises(ValueError, match="unknown dtype"):
        gemm_work(GemmShape(1, 1, 1), "fp7")
