"""2-D convolution in three directions (forward, backward-data, backward-weight), NHWC operands."""

from __future__ import annotations

import re

from microbench.core.ops import aten
from microbench.core.ops.base import OpSpec, random_operand
from microbench.core.ops.work import Work, conv2d_work
from microbench.core.shapes import CONV_DIRECTIONS, CONV_OPS, Case, ConvShape

_ONEDNN_PROBLEM = re.compile(
    r"(?:g(\d+))?mb(\d+)_ic(\d+)oc(\d+)_ih(\d+)oh\d+kh(\d+)sh(\d+)dh(\d+)ph(\d+)"
    r"_iw(\d+)ow\d+kw(\d+)sw(\d+)dw(\d+)pw(\d+)"
)
_ONEDNN_DIRECTION = {
    "forward_training": "fwd",
    "forward_inference": "fwd",
    "backward_data": "bwd_data",
    "backward_weights": "bwd_weight",
}


def tensor_shapes(s: ConvShape) -> tuple[tuple, tuple, tuple]:
    """(input, weight, output) shapes in logical NCHW / KCRS order."""
    return (s.n, s.c, s.h, s.w), (s.k, s.c // s.groups, s.r, s.s), (s.n, s.k, s.p, s.q)


def convolution(direction: str, a, b, s: ConvShape):
    """The convolution in whatever dtype a and b have (the float64 reference, and the vendor provider)."""
    import torch
    import torch.nn.functional as F

    kw = dict(stride=s.stride, padding=s.pad, dilation=s.dilation, groups=s.groups)
    x_shape, w_shape, _ = tensor_shapes(s)
    if direction == "fwd":
        return F.conv2d(a, b, **kw)
    if direction == "bwd_data":
        return torch.nn.grad.conv2d_input(x_shape, b, a, **kw)
    if direction == "bwd_weight":
        return torch.nn.grad.conv2d_weight(a, w_shape, b, **kw)
    raise ValueError(f"unknown conv direction {direction!r}")


class Conv2dSpec(OpSpec):
    family = "conv2d"
    shape_keys = frozenset({"n", "c", "h", "w", "k", "r", "s", "stride", "pad", "dilation", "groups"})
    required_keys = frozenset({"n", "c", "h", "w", "k", "r", "s"})
    group_keys = frozenset({"directions"})
    data_row_fields = "w h c n k filter_w filter_h pad_w pad_h stride_w stride_h (DeepBench conv)"
    signature = (
        "fn(a, b, *, shape: ConvShape, direction: str, allow_tf32: bool) -> out\n"
        "            fwd: (x, w) -> y;  bwd_data: (dy, w) -> dx;  bwd_weight: (x, dy) -> dw   (NHWC tensors)"
    )
    aten_ops = aten.replayed_ops("conv2d")  # microbench/data/op_models.toml `replay`
    onednn_kind = "convolution"

    def parse_shape(self, rd, t: dict, where: str) -> ConvShape:
        rd.keys(t, where, self.shape_keys, self.required_keys)
        dims = {d: rd.num(t, d, where, integer=True) for d in ("n", "c", "h", "w", "k", "r", "s")}
        shape = ConvShape(
            **dims,
            stride=rd.dim_pair(t, "stride", where, 1, 1),
            pad=rd.dim_pair(t, "pad", where, 0, 0),
            dilation=rd.dim_pair(t, "dilation", where, 1, 1),
            groups=rd.num(t, "groups", where, default=1, integer=True),
        )
        if shape.c % shape.groups or shape.k % shape.groups:
            rd.fail(f"{where}.groups", shape.groups, f"must divide c={shape.c} and k={shape.k}")
        if shape.p <= 0 or shape.q <= 0:
            rd.fail(where, t, f"filter larger than the padded input: output would be {shape.p}x{shape.q}")
        return shape

    def data_row(self, row: list) -> dict:
        if len(row) != 11:  # DeepBench: [w, h, c, n, k, filter_w, filter_h, pad_w, pad_h, stride_w, stride_h]
            raise ValueError(f"has {len(row)} fields, expected 11 (DeepBench conv)")
        w, h, c, n, k, fw, fh, pw, ph, sw, sh = row
        return {"n": n, "c": c, "h": h, "w": w, "k": k, "r": fh, "s": fw, "pad": [ph, pw], "stride": [sh, sw]}

    def case_ops(self, rd, group: dict, where: str) -> list[str]:
        directions = rd.strings(group, "directions", where, default=["fwd"])
        for d in directions:
            if d not in CONV_DIRECTIONS:
                rd.fail(f"{where}.directions", d, f"unknown direction (known: {', '.join(CONV_DIRECTIONS)})")
        return [CONV_OPS[d] for d in directions]

    def inputs(self, case: Case, device, gen) -> tuple:
        """NHWC (channels_last) tensors in logical NCHW order: (x, w), (dy, w) or (x, dy)."""
        import torch

        x_shape, w_shape, y_shape = tensor_shapes(case.shape)
        first, second = {"fwd": (x_shape, w_shape), "bwd_data": (y_shape, w_shape), "bwd_weight": (x_shape, y_shape)}[
            case.direction
        ]
        cl = torch.channels_last
        return (
            random_operand(first, case.dtype, device, gen).contiguous(memory_format=cl),
            random_operand(second, case.dtype, device, gen).contiguous(memory_format=cl),
        )

    def compute(self, case: Case, a, b):
        return convolution(case.direction, a, b, case.shape)

    def work(self, case: Case) -> Work:
        return conv2d_work(case.shape, case.dtype, case.direction)

    def call(self, fn, case: Case, a, b, *, allow_tf32: bool):
        return fn(a, b, shape=case.shape, direction=case.direction, allow_tf32=allow_tf32)

    def aten_cases(self, op: str, args, dtype: str) -> tuple[list[Case], str]:
        """The directions an ATen convolution operator computes, with their shapes (2-D, not transposed)."""
        if op == "aten::convolution":
            x, w, _bias, stride, padding, dilation, transposed, _op, groups = args[:9]
            directions = ["fwd"]
        else:  # aten::convolution_backward
            _gy, x, w, _bias_sizes, stride, padding, dilation, transposed, _op, groups, mask = args[:11]
            directions = [d for d, on in zip(("bwd_data", "bwd_weight"), mask[:2]) if on]
        if transposed:
            return [], "transposed convolution: no replayable case"
        if x.dim() != 4:
            return [], f"{x.dim() - 2}-D convolution: only conv2d is replayed"
        (n, c, h, w_), (k, _, r, s) = tuple(x.shape), tuple(w.shape)
        shape = ConvShape(
            n=n,
            c=c,
            h=h,
            w=w_,
            k=k,
            r=r,
            s=s,
            stride=tuple(stride),
            pad=tuple(padding),
            dilation=tuple(dilation),
            groups=groups,
        )
        return [Case(CONV_OPS[d], shape, dtype) for d in directions], ""

    def problem_key(self, case: Case) -> tuple:
        s = case.shape
        return ("conv", case.direction, s.groups, s.n, s.c, s.k, s.h, s.w, s.r, s.s, *s.stride, *s.pad, *s.dilation)

    def onednn_key(self, rec) -> tuple | None:
        m = _ONEDNN_PROBLEM.search(rec.problem)
        direction = _ONEDNN_DIRECTION.get(rec.prop)
        if not m or not direction:
            return None
        g, mb, ic, oc, ih, kh, sh, dh, ph, iw, kw, sw, dw, pw = m.groups()
        # oneDNN counts dilation from 0 (dh0 = dense); PyTorch from 1.
        return (
            "conv",
            direction,
            int(g or 1),
            int(mb),
            int(ic),
            int(oc),
            int(ih),
            int(iw),
            int(kh),
            int(kw),
            int(sh),
            int(sw),
            int(ph),
            int(pw),
            int(dh) + 1,
            int(dw) + 1,
        )

    def short_op(self, op: str) -> str:
        return op.replace("conv2d_", "conv ")


SPEC = Conv2dSpec()
