"""Attention through PyTorch's scaled_dot_product_attention: as PyTorch dispatches it (FlashAttention, memory-
efficient, cuDNN or the math path, whichever it picks for the shape and device), and forced onto the math path
(two GEMMs and a softmax, unfused), so that a trace's attention calls can be asked whether the fused kernel pays."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from microbench.core.tf32 import tf32_allowed
from microbench.roofline.registry import Unsupported, provider


def _sdpa(q: torch.Tensor, kv: torch.Tensor, causal: bool) -> torch.Tensor:
    # 4-D [1, BH, L, D]: PyTorch's fused backends (flash, memory-efficient) take only 4-D inputs and would send a
    # 3-D call to the math path
    return F.scaled_dot_product_attention(q[None], kv[0][None], kv[1][None], is_causal=causal)[0]


def _check(q: torch.Tensor, allow_tf32: bool) -> None:
    if allow_tf32 and q.device.type != "cuda":
        raise Unsupported("TF32 is a GPU Tensor Core format; this device has none")
    if q.dtype == getattr(torch, "float8_e4m3fn", None):
        raise Unsupported("scaled_dot_product_attention has no fp8")


@provider(
    "attention",
    "torch",
    baseline=True,
    library="torch scaled_dot_product_attention (FlashAttention / efficient / cuDNN / math, as dispatched)",
)
def attention_torch(q: torch.Tensor, kv: torch.Tensor, *, causal: bool = False, allow_tf32: bool = False):
    _check(q, allow_tf32)
    with tf32_allowed(allow_tf32):
        return _sdpa(q, kv, causal)


@provider("attention", "torch_math", library="torch scaled_dot_product_attention, math backend (unfused)")
def attention_torch_math(q: torch.Tensor, kv: torch.Tensor, *, causal: bool = False, allow_tf32: bool = False):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    _check(q, allow_tf32)
    with tf32_allowed(allow_tf32), sdpa_kernel(SDPBackend.MATH):
        return _sdpa(q, kv, causal)
