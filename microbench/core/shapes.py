"""Problem shapes: plain frozen dataclasses with no torch dependency, shared by config, work counting,
providers and reports."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

CONV_DIRECTIONS = ("fwd", "bwd_data", "bwd_weight")
# Row `op` names: one per convolution direction, so reports and comparisons key on them directly.
CONV_OPS = {d: f"conv2d_{d}" for d in CONV_DIRECTIONS}


def pair(v) -> tuple[int, int]:
    if isinstance(v, (tuple, list)):
        return (int(v[0]), int(v[1]))
    return (int(v), int(v))


@dataclass(frozen=True)
class GemmShape:
    """C[batch, m, n] = op(A)[batch, m, k] @ op(B)[batch, k, n]; op() transposes when trans_* is set,
    i.e. the operand is stored column-major (as its transpose)."""

    family: ClassVar[str] = "gemm"  # the op family spec (microbench.core.ops) of cases of this shape
    m: int
    n: int
    k: int
    batch: int = 1
    trans_a: bool = False
    trans_b: bool = False

    def label(self) -> str:
        s = f"{self.m}x{self.n}x{self.k}"
        if self.batch != 1:
            s = f"{self.batch}x[{s}]"
        t = ("A^T" if self.trans_a else "") + ("B^T" if self.trans_b else "")
        return f"{s} {t}" if t else s

    def as_dict(self) -> dict:
        return {
            "m": self.m,
            "n": self.n,
            "k": self.k,
            "batch": self.batch,
            "trans_a": self.trans_a,
            "trans_b": self.trans_b,
        }


@dataclass(frozen=True)
class ConvShape:
    """2-D convolution: input N x C x H x W (stored NHWC), weight K x C/groups x R x S, output N x K x P x Q."""

    family: ClassVar[str] = "conv2d"
    n: int
    c: int
    h: int
    w: int
    k: int
    r: int
    s: int
    stride: tuple[int, int] = (1, 1)
    pad: tuple[int, int] = (0, 0)
    dilation: tuple[int, int] = (1, 1)
    groups: int = 1

    @property
    def p(self) -> int:  # output height
        return (self.h + 2 * self.pad[0] - self.dilation[0] * (self.r - 1) - 1) // self.stride[0] + 1

    @property
    def q(self) -> int:  # output width
        return (self.w + 2 * self.pad[1] - self.dilation[1] * (self.s - 1) - 1) // self.stride[1] + 1

    def label(self) -> str:
        def hw(t):
            return str(t[0]) if t[0] == t[1] else f"{t[0]}x{t[1]}"

        s = f"n{self.n} c{self.c} {self.h}x{self.w} k{self.k} {self.r}x{self.s} s{hw(self.stride)} p{hw(self.pad)}"
        if self.dilation != (1, 1):
            s += f" d{hw(self.dilation)}"
        if self.groups != 1:
            s += f" g{self.groups}"
        return s

    def as_dict(self) -> dict:
        return {
            "n": self.n,
            "c": self.c,
            "h": self.h,
            "w": self.w,
            "k": self.k,
            "r": self.r,
            "s": self.s,
            "stride": list(self.stride),
            "pad": list(self.pad),
            "dilation": list(self.dilation),
            "groups": self.groups,
        }


@dataclass(frozen=True)
class AttentionShape:
    """Scaled dot-product attention of `batch_heads` independent problems (batch x heads): softmax(Q K^T / sqrt(d))
    V with Q [BH, q_len, head_dim], K and V [BH, kv_len, head_dim]; `causal` masks the upper triangle."""

    family: ClassVar[str] = "attention"
    batch_heads: int
    q_len: int
    kv_len: int
    head_dim: int
    causal: bool = False

    def label(self) -> str:
        s = f"bh{self.batch_heads} q{self.q_len} kv{self.kv_len} d{self.head_dim}"
        return s + " causal" if self.causal else s

    def as_dict(self) -> dict:
        return {
            "batch_heads": self.batch_heads,
            "q_len": self.q_len,
            "kv_len": self.kv_len,
            "head_dim": self.head_dim,
            "causal": self.causal,
        }


@dataclass(frozen=True)
class Case:
    """One measurable problem: an op (`gemm`, `conv2d_fwd`, `conv2d_bwd_data`, `conv2d_bwd_weight`),
    its shape and its dtype name (`fp32`, `tf32`, `fp16`, `bf16`, `fp8_e4m3`)."""

    op: str
    shape: GemmShape | ConvShape | AttentionShape
    dtype: str

    @property
    def family(self) -> str:
        """The op family (its spec in microbench.core.ops, its registry op): `gemm` or `conv2d`."""
        return self.shape.family

    @property
    def direction(self) -> str | None:
        """What follows the family in the op name (conv2d_bwd_data -> bwd_data); None for the family itself."""
        return None if self.op == self.family else self.op.removeprefix(self.family + "_")

    def label(self) -> str:
        return f"{self.op} {self.shape.label()} {self.dtype}"
