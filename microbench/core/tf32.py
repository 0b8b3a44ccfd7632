"""TF32 on or off for one vendor-library call, through whichever switch this PyTorch has."""
from __future__ import annotations

import contextlib

import torch


@contextlib.contextmanager
def tf32_allowed(allowed: bool):
    matmul = torch.backends.cuda.matmul
    conv = getattr(torch.backends.cudnn, "conv", None)
    if hasattr(matmul, "fp32_precision") and conv is not None and hasattr(conv, "fp32_precision"):
        saved = (matmul.fp32_precision, conv.fp32_precision)
        value = "tf32" if allowed else "ieee"
        matmul.fp32_precision, conv.fp32_precision = value, value
        try:
            yield
        finally:
            matmul.fp32_precision, conv.fp32_precision = saved
    else:  # PyTorch before the fp32_precision switches
        saved = (matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
        matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = allowed
        try:
            yield
        finally:
            matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved
