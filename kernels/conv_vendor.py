"""Convolution through the vendor libraries via PyTorch: cuDNN / MIOpen on a GPU, oneDNN on a CPU, on
channels-last (NHWC) tensors, forward, backward-data and backward-weight."""

from __future__ import annotations

import torch

from microbench.core.dtypes import is_fp8
from microbench.core.ops.conv2d import convolution
from microbench.core.tf32 import tf32_allowed
from microbench.roofline.evidence import vendor_evidence
from microbench.roofline.registry import Unsupported, provider


@provider(
    "conv2d",
    "torch",
    baseline=True,
    library="torch conv2d: cuDNN/MIOpen (GPU), oneDNN (CPU), NHWC",
    evidence=vendor_evidence,
)
def conv2d_torch(a: torch.Tensor, b: torch.Tensor, *, shape, direction: str, allow_tf32: bool = False) -> torch.Tensor:
    if allow_tf32 and a.device.type != "cuda":
        raise Unsupported("TF32 is a GPU Tensor Core format; this device has none")
    if is_fp8(a.dtype):  # every flavour: gfx942's cases are stored as float8_e4m3fnuz
        raise Unsupported(f"no fp8 convolution in PyTorch ({a.dtype})")
    with tf32_allowed(allow_tf32):
        return convolution(direction, a, b, shape)
