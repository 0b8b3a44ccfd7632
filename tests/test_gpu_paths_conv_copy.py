"""the Triton convolution wrapper must not copy its output inside a timed call.

`torch.empty(...).contiguous(memory_format=torch.channels_last)` allocates NCHW and then copies it into a
channels-last tensor (aten::contiguous -> aten::clone -> aten::copy_) on every call, which a GPU timing counts.
The wrapper runs here in its planning mode (kernels/triton_runtime.planning: everything a GPU call does on the
host, the launches recorded, none made), so the profiler on this CPU sees exactly the ATen operators the
wrapper itself issues around the kernel; no Triton interpreter is involved. What a GPU run adds (the kernel
itself, the split-K partial sum of backward-weight with split > 1) is not counted here.
"""

from __future__ import annotations

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from microbench.core.shapes import ConvShape
from microbench.kernels import conv_triton as ct
from microbench.kernels.triton_runtime import planning

SHAPE = ConvShape(1, 8, 6, 6, 8, 3, 3, pad=(1, 1))
COPIES = ("aten::contiguous", "aten::clone", "aten::copy_")


def _nhwc(*shape: int) -> torch.Tensor:
    return torch.randn(*shape).to(memory_format=torch.channels_last)


@pytest.mark.parametrize("direction", ["fwd", "bwd_data", "bwd_weight"])
def test_one_call_makes_no_copy_of_its_output(direction):
    x, w, dy = _nhwc(1, 8, 6, 6), _nhwc(8, 8, 3, 3), _nhwc(1, 8, 6, 6)
    a, b = {"fwd": (x, w), "bwd_data": (dy, w), "bwd_weight": (x, dy)}[direction]
    with planning("sm_90") as compiles, profile(activities=[ProfilerActivity.CPU]) as prof:
        out = ct.conv2d(a, b, shape=SHAPE, direction=direction, split_k=1)
    ops = [e.name for e in prof.events() if e.name.startswith("aten::")]
    assert compiles, "the wrapper reached its launch"
    assert out.is_contiguous(memory_format=torch.channels_last)
    assert [op for op in ops if op in COPIES] == [], ops
