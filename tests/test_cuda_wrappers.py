"""The CuPy wrappers' side of the kernels' contract, on the CPU: which layout flags, leading dimensions,
batch strides and explicit copies they hand the kernels, for every operand layout.

`plan()` is the wrapper minus the launch. An emulation of each kernel's documented contract (gemm_mma.cu,
gemm_wgmma.cu: element (d, k) at base[z * batch_stride + d * ld + k] when K-major, base[z * batch_stride +
k * ld + d] otherwise; conv_implicit.cu: contiguous NHWC / KRSC with channels padded to 8) reads the very
memory the kernel would be pointed at, from the storage behind the planned tensors, and the result must
be the product. The kernels' own index math is checked in test_mma_layout.py; here it is the plumbing.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from microbench.core.cases import make_inputs
from microbench.core.shapes import Case, ConvShape, GemmShape
from microbench.kernels import conv_cupy, gemm_cupy


def _memory(t: torch.Tensor, length: int) -> torch.Tensor:
    """`length` elements of t's storage from t's first element: what the kernel's pointer reaches."""
    assert t.storage_offset() + length <= t.untyped_storage().nbytes() // t.element_size()
    return t.as_strided((length,), (1,), t.storage_offset())


def _gather(t, kmajor, ld, batch_stride, batch, d_extent, k_extent) -> torch.Tensor:
    """[batch, d, k] as the kernel reads it."""
    assert t.data_ptr() % 16 == 0 and ld % 8 == 0 and batch_stride % 8 == 0, "the kernel's alignment contract"
    z = torch.arange(batch)[:, None, None] * batch_stride
    d = torch.arange(d_extent)[None, :, None]
    k = torch.arange(k_extent)[None, None, :]
    idx = z + (d * ld + k if kmajor else k * ld + d)
    return _memory(t, int(idx.max()) + 1)[idx].double()


def emulate_gemm(p: gemm_cupy.GemmPlan) -> torch.Tensor:
    a = _gather(p.a, p.a_kmajor, p.lda, p.sa, p.batch, p.m, p.k)
    b = _gather(p.b, p.b_kmajor, p.ldb, p.sb, p.batch, p.n, p.k)
    assert p.ldc % 8 == 0 and p.ldc >= p.n
    c = torch.full((p.batch, p.m, p.ldc), float("nan"), dtype=torch.float64)  # padding columns: scratch
    c[..., : p.n] = a @ b.transpose(-1, -2)
    return gemm_cupy.finish(p, c)


GEMM_CASES = [
    GemmShape(64, 48, 32),
    GemmShape(64, 48, 32, trans_a=True),
    GemmShape(64, 48, 32, trans_b=True),
    GemmShape(64, 48, 32, trans_a=True, trans_b=True),
    GemmShape(127, 33, 7),
    GemmShape(127, 33, 7, trans_a=True),
    GemmShape(127, 33, 7, trans_b=True),
    GemmShape(7, 5, 3, batch=2, trans_a=True),
    GemmShape(1, 1, 1),
    GemmShape(1, 16, 24),
    GemmShape(16, 1, 24, trans_b=True),
    GemmShape(24, 40, 1),
    GemmShape(9, 17, 64, batch=3),
    GemmShape(9, 16, 64, batch=3, trans_a=True, trans_b=True),
]


@pytest.mark.parametrize("k_major_only", [False, True], ids=["mma", "wgmma"])
@pytest.mark.parametrize("shape", GEMM_CASES, ids=lambda s: s.label())
def test_gemm_plan_feeds_the_kernel_the_right_memory(shape, k_major_only):
    a, b = make_inputs(Case("gemm", shape, "bf16"), "cpu", seed=1)
    p = gemm_cupy.plan(a, b, k_major_only=k_major_only)
    if k_major_only:
        assert p.a_kmajor and p.b_kmajor
    out = emulate_gemm(p)
    ref = torch.matmul(a.double(), b.double())
    assert out.shape == ref.shape and out.is_contiguous()
    torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)


def test_gemm_plan_reads_views_in_place_where_it_can():
    """No copy when the kernel can read the operand as stored: the planned tensors share memory."""
    s = GemmShape(64, 48, 32, trans_a=True, trans_b=True)
    a, b = make_inputs(Case("gemm", s, "fp16"), "cpu")
    p = gemm_cupy.plan(a, b)
    assert p.a.data_ptr() == a.data_ptr() and p.b.data_ptr() == b.data_ptr()
    assert (p.a_kmajor, p.b_kmajor, p.lda, p.ldb) == (False, True, 64, 32)  # TT: A M-major, B K-major
    # the wgmma plan must copy A (M-major) into K-major, and may keep B
    w = gemm_cupy.plan(a, b, k_major_only=True)
    assert w.a.data_ptr() != a.data_ptr() and w.b.data_ptr() == b.data_ptr()


def test_gemm_plan_broadcasts_and_copies_misaligned_views():
    g = torch.Generator().manual_seed(0)
    big = torch.randn(3, 130, 200, generator=g).bfloat16()
    a = big[:, 1:98, 3:67]  # leading dimension 200 (a multiple of 8), base 203 elements in: not 16-byte aligned
    b = torch.randn(64, 51, generator=g).bfloat16()  # 2-D B for a batch of 3: batch stride 0
    p = gemm_cupy.plan(a, b)
    assert p.a.data_ptr() != a.data_ptr() and p.sb == 0 and p.batch == 3 and p.out_shape == (3, 97, 51)
    torch.testing.assert_close(emulate_gemm(p), torch.matmul(a.double(), b.double()), rtol=1e-12, atol=1e-12)
    e = gemm_cupy.plan(a[:, :, :0], b[:0])
    assert e.empty and e.out_shape == (3, 97, 51)


def test_gemm_plan_refuses_what_the_kernel_cannot_index():
    with pytest.raises(gemm_cupy.Unsupported, match="dimensions"):
        gemm_cupy.plan(torch.zeros(2, 2, 8, 8).half(), torch.zeros(8, 8).half())
    with pytest.raises(ValueError, match="inner dimensions"):
        gemm_cupy.plan(torch.zeros(8, 7).half(), torch.zeros(8, 8).half())
    with pytest.raises(ValueError, match="batch"):
        gemm_cupy.plan(torch.zeros(2, 8, 8).half(), torch.zeros(3, 8, 8).half())


def emulate_conv(p: conv_cupy.ConvPlan) -> torch.Tensor:
    n, h, w, c8, k, r, s, pp, q, sh, sw, ph, pw, dh, dw = p.geometry
    for t, shape in ((p.x, (n, h, w, c8)), (p.w, (k, r, s, c8))):
        assert tuple(t.shape) == shape and t.is_contiguous() and t.data_ptr() % 16 == 0 and c8 % 8 == 0
    y_full = F.conv2d(
        p.x.double().permute(0, 3, 1, 2),
        p.w.double().permute(0, 3, 1, 2),
        stride=(sh, sw),
        padding=(ph, pw),
        dilation=(dh, dw),
    )
    assert tuple(y_full.shape) == (n, k, pp, q) and p.m == n * pp * q
    y, y_nhwc = conv_cupy.output(p, torch.empty(0, dtype=torch.float64))
    assert tuple(y_nhwc.shape) == (n, pp, q, p.ldy) and y_nhwc.is_contiguous() and p.ldy % 8 == 0
    y_nhwc.fill_(float("nan"))  # padding channels: scratch
    y_nhwc[..., :k] = y_full.permute(0, 2, 3, 1)
    return conv_cupy.finish(p, y, y_nhwc)


CONV_CASES = [
    ConvShape(2, 16, 9, 9, 16, 3, 3, pad=(1, 1)),
    ConvShape(2, 3, 17, 19, 10, 7, 7, stride=(2, 2), pad=(3, 3)),  # C = 3 -> 8, K = 10 -> ldy 16
    ConvShape(1, 12, 9, 10, 24, 3, 3, stride=(2, 2), pad=(1, 1), dilation=(1, 2)),
    ConvShape(3, 8, 5, 5, 8, 1, 1, stride=(2, 2)),
]


@pytest.mark.parametrize("shape", CONV_CASES, ids=lambda s: s.label())
def test_conv_plan_feeds_the_kernel_the_right_memory(shape):
    x, w = make_inputs(Case("conv2d_fwd", shape, "bf16"), "cpu", seed=2)
    p = conv_cupy.plan(x, w, shape)
    y = emulate_conv(p)
    ref = F.conv2d(x.double(), w.double(), stride=shape.stride, padding=shape.pad, dilation=shape.dilation)
    assert y.shape == ref.shape and y.is_contiguous(memory_format=torch.channels_last)
    torch.testing.assert_close(y, ref, rtol=1e-12, atol=1e-12)
    if shape.c % 8 == 0:  # channels-last inputs with whole chunks are read in place
        assert p.x.data_ptr() == x.data_ptr() and p.w.data_ptr() == w.data_ptr()


def test_conv_plan_copies_nchw_inputs_to_nhwc():
    s = CONV_CASES[0]
    x, w = make_inputs(Case("conv2d_fwd", s, "fp16"), "cpu")
    x, w = x.contiguous(), w.contiguous()  # NCHW memory: the kernel needs NHWC, so a copy
    p = conv_cupy.plan(x, w, s)
    assert p.x.is_contiguous() and p.x.data_ptr() != x.data_ptr()
    ref = F.conv2d(x.double(), w.double(), padding=s.pad)
    torch.testing.assert_close(emulate_conv(p), ref, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(
    "dtype, crosses_as", [(torch.bfloat16, torch.int16), (torch.float16, torch.float16), (torch.float32, torch.float32)]
)
def test_tensors_cross_into_cupy_without_ml_dtypes(dtype, crosses_as):
    """CuPy 14 imports bf16 through DLPack only with ml_dtypes installed: bf16 goes as its int16 view, the
    same bytes at the same address (the kernels read only the pointer)."""
    from microbench.kernels.cuda_kernels import dlpack_view

    t = torch.randn(5, 8).to(dtype)[:, 2:]  # a view with an offset and strides
    v = dlpack_view(t)
    assert v.dtype == crosses_as
    assert (v.data_ptr(), v.shape, v.stride()) == (t.data_ptr(), t.shape, t.stride())
    assert torch.equal(v.view(dtype), t) if dtype != torch.float32 else v is t
    np = pytest.importorskip("numpy")
    if dtype == torch.bfloat16:  # the int16 view holds bf16's bit patterns: the top half of each float32
        f32_bits = t.float().numpy().view(np.int32)
        assert np.array_equal(v.numpy(), (f32_bits >> 16).astype(np.int16))
