"""FLOPs of every convolution and matmul variant as the step recorder counts them (microbench.decompose.oprecord),
forward and backward, against formulas written out here, independently of microbench.core.ops.work.

Each module runs forward and backward under a small dispatch mode that records every ATen operator; the
matrix FLOPs of each direction are then compared with the textbook count (2 FLOPs per multiply-add)."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from microbench.decompose.oprecord import analyse


class _Record(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.records = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        self.records.append(analyse(func, args, kwargs, out, None, None))
        return out


def _fwd_bwd_flops(module: nn.Module, *inputs, grad_inputs: bool = True):
    """(forward matrix FLOPs, backward matrix FLOPs) of one forward and backward of `module`."""
    inputs = [x.requires_grad_(grad_inputs) for x in inputs]
    with _Record() as fwd:
        out = module(*inputs)
    with _Record() as bwd:
        out.float().sum().backward()
    return sum(r.flops for r in fwd.records), sum(r.flops for r in bwd.records)


def _conv_flops(n, c_in, c_out, groups, out_hw, kernel_hw):
    # each output value: (c_in / groups) * kh * kw multiply-adds
    (p, q), (r, s) = out_hw, kernel_hw
    return 2 * n * c_out * p * q * (c_in // groups) * r * s


@pytest.mark.parametrize(
    "name, conv, hw, out_hw",
    [
        ("dense", nn.Conv2d(8, 16, 3, padding=1, bias=False), (9, 9), (9, 9)),
        ("strided", nn.Conv2d(8, 16, 3, stride=2, padding=1, bias=False), (9, 9), (5, 5)),
        ("dilated", nn.Conv2d(8, 16, 3, dilation=2, padding=2, bias=False), (9, 9), (9, 9)),
        ("grouped", nn.Conv2d(8, 16, 3, groups=4, padding=1, bias=False), (9, 9), (9, 9)),
        ("depthwise", nn.Conv2d(96, 96, 3, groups=96, padding=1, bias=False), (7, 7), (7, 7)),
        ("depthwise strided", nn.Conv2d(32, 32, 3, stride=2, groups=32, padding=1, bias=False), (10, 10), (5, 5)),
    ],
)
def test_conv_forward_and_both_backward_directions(name, conv, hw, out_hw):
    x = torch.randn(2, conv.in_channels, *hw)
    fwd, bwd = _fwd_bwd_flops(conv, x)
    expected = _conv_flops(2, conv.in_channels, conv.out_channels, conv.groups, out_hw, conv.kernel_size)
    assert fwd == expected
    assert bwd == 2 * expected  # backward-data and backward-weight each redo the forward's multiply-adds


def test_depthwise_backward_is_twice_forward_not_ungrouped():
    # The trap of torch.utils.flop_counter: a 3x3 depthwise layer of 96 channels counted 97x its forward.
    conv = nn.Conv2d(96, 96, 3, groups=96, padding=1, bias=False)
    fwd, bwd = _fwd_bwd_flops(conv, torch.randn(2, 96, 14, 14))
    assert fwd == 2 * 2 * 96 * 14 * 14 * 9
    assert bwd / fwd == 2


def test_first_layer_backward_without_input_gradient():
    conv = nn.Conv2d(3, 8, 3, padding=1, bias=False)
    fwd, bwd = _fwd_bwd_flops(conv, torch.randn(2, 3, 6, 6), grad_inputs=False)
    assert bwd == fwd == 2 * 2 * 8 * 36 * 3 * 9  # only backward-weight: no gradient for the images


@pytest.mark.parametrize("stride, groups", [(1, 1), (2, 1), (2, 4)])
def test_transposed_conv(stride, groups):
    # every input value is scattered to (c_out / groups) * kh * kw outputs
    conv = nn.ConvTranspose2d(8, 12, 3, stride=stride, padding=1, groups=groups, bias=False)
    n, h, w = 2, 5, 6
    fwd, bwd = _fwd_bwd_flops(conv, torch.randn(n, 8, h, w))
    expected = 2 * n * 8 * h * w * (12 // groups) * 9
    assert fwd == expected and bwd == 2 * expected


def test_conv1d_and_conv3d():
    c1 = nn.Conv1d(4, 6, 5, padding=2, bias=False)
    fwd, bwd = _fwd_bwd_flops(c1, torch.randn(3, 4, 11))
    assert fwd == 2 * 3 * 6 * 11 * 4 * 5 and bwd == 2 * fwd
    c3 = nn.Conv3d(2, 4, 3, padding=1, groups=2, bias=False)
    fwd, bwd = _fwd_bwd_flops(c3, torch.randn(1, 2, 4, 4, 4))
    assert fwd == 2 * 1 * 4 * 64 * 1 * 27 and bwd == 2 * fwd


def test_linear_2d_and_3d_inputs():
    lin = nn.Linear(24, 40)
    fwd, bwd = _fwd_bwd_flops(lin, torch.randn(7, 24))
    assert fwd == 2 * 7 * 24 * 40 and bwd == 2 * fwd  # dX = dY W, dW = dY^T X
    fwd, bwd = _fwd_bwd_flops(lin, torch.randn(3, 5, 24))  # tokens x features
    assert fwd == 2 * 15 * 24 * 40 and bwd == 2 * fwd


def test_bmm_and_matmul():
    a, b = torch.randn(6, 9, 11), torch.randn(6, 11, 13)

    class Bmm(nn.Module):
        def forward(self, x, y):
            return torch.bmm(x, y)

    fwd, bwd = _fwd_bwd_flops(Bmm(), a, b)
    assert fwd == 2 * 6 * 9 * 13 * 11 and bwd == 2 * fwd


@pytest.mark.parametrize("causal", [False, True])
def test_scaled_dot_product_attention(causal):
    b, h, lq, lk, d, dv = 2, 3, 10, 12, 8, 16
    q, k, v = torch.randn(b, h, lq, d), torch.randn(b, h, lk, d), torch.randn(b, h, lk, dv)

    class Attn(nn.Module):
        def forward(self, q, k, v):
            return nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal and lq == lk)

    fwd, bwd = _fwd_bwd_flops(Attn(), q, k, v)
    # S = Q K^T: 2*b*h*lq*lk*d; O = P V: 2*b*h*lq*lk*dv. Backward: dV, dP, dQ, dK: twice the forward.
    expected = 2 * b * h * lq * lk * d + 2 * b * h * lq * lk * dv
    assert fwd == expected
    assert bwd == 2 * expected
