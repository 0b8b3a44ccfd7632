"""Work counting: FLOPs and the minimum bytes each op must move between memory and the chip.

Conventions (one multiply-add = 2 FLOPs; "minimum bytes" = every operand read once and every result
written once, as if caches were perfect, so achieved GB/s is a lower bound on real traffic):
- GEMM, batched or not, transposed or not: 2*B*M*N*K FLOPs; A, B read and C written once.
- Convolution (any number of spatial dimensions, grouped, depthwise, dilated, strided, transposed): every
  weight element meets every position of the "small" side once per sample: 2 * N * positions * numel(w)
  FLOPs, the positions being the output's for a convolution and the input's for a transposed one
  (= 2*N*K*P*Q*(C/groups)*R*S for conv2d). Forward, backward-data and backward-weight do the same
  multiply-adds, regrouped; each reads two tensors and writes the third. Dilation and stride change the
  positions, never the per-position work. (torch.utils.flop_counter counts a grouped convolution's
  backward as if it were ungrouped: a depthwise 3x3 layer of 96 channels 97x its forward. Not used.)
- Attention (scaled dot-product, Q: Lq x D, K: Lk x D, V: Lk x Dv per batch and head): forward
  2*BH*Lq*Lk*(D + Dv) (S = QK^T, O = PV); backward twice that (dV, dP, dQ, dK: the model's four products;
  FlashAttention's recomputation of S is the implementation's choice, not model work, and the softmax is not
  counted); causal attention half of each (the masked half is neither model work nor computed by the fused
  kernels, which skip masked blocks: counting it would read a causal kernel as twice as fast as it ran).
  Reasons and the alternatives: docs/models.md "Attention".
- Normalization (batch/layer/group norm), per element: forward 7 FLOPs (sum, square, sum for the
  statistics; subtract, scale by 1/std, multiply by gamma, add beta), backward 8; bytes: forward reads x and
  writes y, backward reads x and dy and writes dx (per-channel parameters are noise and are counted too).
- Element-wise: `flops_per_element` times the element count; each input read once, each output written once.
"""

from __future__ import annotations

from dataclasses import dataclass

from microbench.core.dtypes import bytes_per_element
from microbench.core.shapes import ConvShape, GemmShape

NORM_FLOPS_PER_ELEMENT = {"fwd": 7, "bwd": 8}


@dataclass(frozen=True)
class Work:
    flops: int
    bytes_moved: int

    @property
    def intensity(self) -> float:
        """FLOPs per byte of minimum traffic."""
        return self.flops / self.bytes_moved if self.bytes_moved else float("inf")


def _elt(dtype: str) -> int:
    return bytes_per_element(dtype)  # bytes as stored: tf32 is fp32 storage with TF32 Tensor Core math


def gemm_work(shape: GemmShape, dtype: str, out_dtype: str | None = None) -> Work:
    b, m, n, k = shape.batch, shape.m, shape.n, shape.k
    e_in, e_out = _elt(dtype), _elt(out_dtype or dtype)
    return Work(2 * b * m * n * k, e_in * b * (m * k + k * n) + e_out * b * m * n)


def conv2d_work(shape: ConvShape, dtype: str, direction: str = "fwd") -> Work:
    x = shape.n * shape.c * shape.h * shape.w
    w = shape.k * (shape.c // shape.groups) * shape.r * shape.s
    y = shape.n * shape.k * shape.p * shape.q
    macs = shape.n * shape.k * shape.p * shape.q * (shape.c // shape.groups) * shape.r * shape.s
    e = _elt(dtype)
    if direction == "fwd":
        moved = x + w + y  # read x, w; write y
    elif direction == "bwd_data":
        moved = y + w + x  # read dy, w; write dx
    elif direction == "bwd_weight":
        moved = x + y + w  # read x, dy; write dw
    else:
        raise ValueError(f"unknown conv direction {direction!r} (fwd, bwd_data, bwd_weight)")
    return Work(2 * macs, e * moved)


def conv_work(x_shape, w_shape, y_shape, dtype: str, transposed: bool = False, directions: int = 1) -> Work:
    """A convolution from its tensors' shapes (N, C, spatial...), whatever its groups, stride, padding or
    dilation: those are already in the shapes. `directions`: how many of forward, backward-data,
    backward-weight it computes (an aten convolution_backward may do two)."""
    n = x_shape[0]
    positions = _prod((x_shape if transposed else y_shape)[2:])
    macs = n * positions * _prod(w_shape)
    e = _elt(dtype)
    return Work(2 * macs * directions, e * directions * (_prod(x_shape) + _prod(w_shape) + _prod(y_shape)))


def attention_work(
    batch_heads: int,
    q_len: int,
    kv_len: int,
    head_dim: int,
    value_dim: int,
    dtype: str,
    direction: str = "fwd",
    causal: bool = False,
) -> Work:
    """Scaled dot-product attention of `batch_heads` (batch x query heads) independent problems."""
    fwd = 2 * batch_heads * q_len * kv_len * (head_dim + value_dim)
    if causal:
        fwd //= 2
    q, k, v, o = (
        batch_heads * q_len * head_dim,
        batch_heads * kv_len * head_dim,
        batch_heads * kv_len * value_dim,
        batch_heads * q_len * value_dim,
    )
    e = _elt(dtype)
    if direction == "fwd":
        return Work(fwd, e * (q + k + v + o))  # read Q, K, V; write O
    if direction == "bwd":
        return Work(2 * fwd, e * (2 * (q + k + v) + 2 * o))  # read Q, K, V, O, dO; write dQ, dK, dV
    raise ValueError(f"unknown attention direction {direction!r} (fwd, bwd)")


def _prod(dims) -> int:
    out = 1
    for d in dims:
        out *= int(d)
    return out


def norm_work(numel: int, channels: int, dtype: str, direction: str = "fwd") -> Work:
    """Batch/layer/group normalization over `numel` elements with `channels` affine parameters."""
    if direction not in NORM_FLOPS_PER_ELEMENT:
        raise ValueError(f"unknown norm direction {direction!r} (fwd, bwd)")
    e = _elt(dtype)
    tensors = 2 if direction == "fwd" else 3
    params = 2 * channels * (1 if direction == "fwd" else 2)  # gamma, beta (+ their gradients)
    return Work(NORM_FLOPS_PER_ELEMENT[direction] * numel, e * (tensors * numel + params))


def elementwise_work(numel: int, dtype: str, inputs: int = 1, outputs: int = 1, flops_per_element: int = 1) -> Work:
    return Work(flops_per_element * numel, _elt(dtype) * numel * (inputs + outputs))
