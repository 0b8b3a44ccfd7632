"""TF32 on or off for one vendor-library call, set and restored through one API.

PyTorch 2.9 and later keep two spellings of the TF32 switches: the legacy `torch.backends.cuda.matmul.allow_tf32`
/ `torch.backends.cudnn.allow_tf32` (with `torch.get_float32_matmul_precision()`), and the new `fp32_precision`
strings (`torch.backends.cuda.matmul.fp32_precision`, `torch.backends.cudnn.conv/rnn.fp32_precision`). The legacy
setters write both states; the new setters write only the new one, after which reading a legacy spelling raises
RuntimeError ("you have used mix of the legacy and new APIs", aten/src/ATen/Context.cpp: allowTF32CuBLAS checks
float32_matmul_precision against the new matmul precision, allowTF32CuDNN checks conv, rnn and the legacy flag
agree). So the switch is set through the legacy setters while they exist, which keeps both spellings readable,
inside and after the context; the new strings are put back as they were on the way out (their "none", inherit
from the parent, is not a value the legacy setters can write). A PyTorch without the legacy switches gets the new
API alone, one without the new ones the legacy alone.
"""

from __future__ import annotations

import contextlib
import warnings

import torch

# The new-API switches that decide TF32 for cuBLAS and cuDNN: (object path, attribute).
_NEW = ("cuda.matmul", "cudnn.conv", "cudnn.rnn")


def _new_switch(path: str):
    obj = torch.backends
    for part in path.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    try:
        _ = obj.fp32_precision
    except (AttributeError, RuntimeError):  # a PyTorch before the fp32_precision strings
        return None
    return obj


def _has_legacy() -> bool:
    return hasattr(torch._C, "_set_cublas_allow_tf32") and hasattr(torch._C, "_set_cudnn_allow_tf32")


def _legacy_state(new: dict) -> tuple[bool, bool]:
    """(cuBLAS, cuDNN) TF32 as the legacy getters read them; where a caller mixed the APIs they raise, and
    the new strings say what was in force."""
    try:
        return bool(torch.backends.cuda.matmul.allow_tf32), bool(torch.backends.cudnn.allow_tf32)
    except RuntimeError:
        return new.get("cuda.matmul") == "tf32", new.get("cudnn.conv") == "tf32"


def _set_legacy(cublas: bool, cudnn: bool) -> None:
    with warnings.catch_warnings():  # PyTorch's once-per-process note that the legacy spelling is deprecated
        warnings.simplefilter("ignore")
        torch.backends.cuda.matmul.allow_tf32 = cublas
        torch.backends.cudnn.allow_tf32 = cudnn


def _set_new(values: dict) -> None:
    for path, value in values.items():
        switch = _new_switch(path)
        if switch is not None and switch.fp32_precision != value:
            switch.fp32_precision = value


@contextlib.contextmanager
def tf32_allowed(allowed: bool):
    switches = {p: _new_switch(p) for p in _NEW}
    saved_new = {p: s.fp32_precision for p, s in switches.items() if s is not None}
    legacy = _has_legacy()
    saved_legacy = _legacy_state(saved_new) if legacy else None
    if legacy:
        _set_legacy(allowed, allowed)
    else:
        _set_new({p: "tf32" if allowed else "ieee" for p in saved_new})
    try:
        yield
    finally:
        if legacy:
            _set_legacy(*saved_legacy)
        _set_new(saved_new)
