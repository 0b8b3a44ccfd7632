"""A model's training step predicted on a chip from its recorded operators, with no GPU: the step is built at its
real batch on fake tensors (torch's FakeTensorMode: shapes and dtypes, no arithmetic), every ATen operator
recorded with its FLOPs and bytes by the step package's recorder (microbench.decompose.oprecord, the same one
`decompose` uses), and each operator that moves data taken as one kernel at the target's roofline plus its launch
floor. There is no source time, so no slack: this is the step as the chip's achievable figures allow, a lower
side (docs/predict.md compares it with the shared V100 trace)."""

from __future__ import annotations

import numpy as np

from microbench import models
from microbench.core.datasheet import find_entry
from microbench.core.dtypes import PRECISION_OF
from microbench.core.errors import InputError
from microbench.models import ModelError
from microbench.predict.chips import Chip, assumptions, chip
from microbench.predict.estimate import roofline_us, wave_factor
from microbench.predict.kernels import GROUP_LABELS, GROUP_OF_CLASS, GROUPS, output_tiles


def record_step(model: str, batch: int | None, dtype: str):
    """The operator records of one training step of `model` at `batch` (None: the benchmark's batch) in `dtype`,
    on fake CPU tensors. The fp16 gradient scaler's inf check reads a value, which fake tensors do not have: the
    step runs without the scaler (its few tiny kernels are missing)."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    from microbench.decompose.oprecord import OpRecorder
    from microbench.models.ranges import StepRanges
    from microbench.models.step import STEP_DTYPES, TrainingStep

    if dtype not in STEP_DTYPES:
        raise InputError(None, f"unknown step dtype (use {', '.join(STEP_DTYPES)})", key="--dtype", value=dtype)
    wl = models.as_workload(model)
    batch = batch or (wl.facts.reference_batch if wl.facts else 32)
    ranges = StepRanges(wl.model, root_name=type(wl.model).__name__)
    try:
        with FakeTensorMode(allow_non_fake_inputs=True):
            step = TrainingStep(wl, batch, "cpu", dtype, ranges)
            step.scaler = None
            with OpRecorder(ranges) as rec:
                step()
    except (RuntimeError, ValueError, TypeError) as e:
        raise ModelError(
            None,
            f"the step could not be recorded on fake tensors: {str(e).splitlines()[0]}",
            key="--model",
            value=model,
        ) from None
    finally:
        ranges.remove()
        torch.set_grad_enabled(True)
    return wl, batch, rec.records


def _case_tiles(case, tile_m: int, tile_n: int) -> int:
    s = case.shape
    if hasattr(s, "m"):
        return output_tiles(s.m, s.n, tile_m, tile_n, s.batch)
    # a convolution's forward as a GEMM: M = N x P x Q output pixels, N = K output channels
    return output_tiles(s.n * s.p * s.q, s.k, tile_m, tile_n)


def _arrays(records, tile_m: int, tile_n: int):
    rows = [r for r in records if not r.op.startswith("prim::") and (r.bytes or r.flops)]
    group = np.array(
        ["attention" if "attention" in r.op else GROUP_OF_CLASS.get(r.cls, "other") for r in rows], dtype=object
    )
    flops = np.array([float(r.flops) for r in rows])
    nbytes = np.array([float(r.bytes) for r in rows])
    prec = np.array([PRECISION_OF.get(r.dtype or "") for r in rows], dtype=object)
    tiles = np.array([_case_tiles(r.cases[0], tile_m, tile_n) if r.cases else 0 for r in rows], dtype=np.int64)
    return rows, group, flops, nbytes, prec, tiles


def _times(tgt: Chip, arrays, datasheet_compute=False, datasheet_memory=False, floor_us=None, waves=True):
    rows, group, flops, nbytes, prec, tiles = arrays
    # a precision the chip has no rate for (bf16 on a V100) runs its arithmetic in fp32
    rate = np.array(
        [
            (tgt.rate(p, datasheet_compute) or tgt.rate("fp32", datasheet_compute) or np.nan) if p else np.nan
            for p in prec
        ],
        dtype=float,
    )
    bw = tgt.peak_memory_tbs if datasheet_memory else tgt.memory_tbs
    matrix = np.isin(group, ("gemm_conv", "attention")) & (flops > 0)
    t = nbytes / (bw * 1e6)
    t[matrix] = roofline_us(flops, nbytes, rate, bw, wave_factor(tiles, tgt.compute_units, waves))[matrix]
    return (tgt.floor_us if floor_us is None else floor_us) + np.where(np.isfinite(t), t, 0.0), matrix & ~np.isfinite(
        rate
    )


def from_model(
    model: str,
    on: str,
    cfg,
    batch: int | None = None,
    dtype: str = "fp32",
    measured: tuple[dict, float | None] = ({}, None),
) -> dict:
    tgt = chip(find_entry(on, cfg.devices, "--on"), *measured)
    d = assumptions()["defaults"]
    wl, batch, records = record_step(model, batch, dtype)
    arrays = _arrays(records, d["tile_m"], d["tile_n"])
    t, no_rate = _times(tgt, arrays)
    fallback = sorted({p for p in arrays[4] if p and tgt.rate(p) is None})
    busy = float(t.sum())
    alts = {
        "compute": _times(tgt, arrays, datasheet_compute=True)[0],
        "memory": _times(tgt, arrays, datasheet_memory=True)[0],
        "floor": _times(tgt, arrays, floor_us=d["kernel_floor_us"])[0],
        "waves": _times(tgt, arrays, waves=False)[0],
    }
    what = assumptions().get("alternatives", {})
    rng = [
        {
            "name": k,
            "what": what.get(k, {}).get("what", k)
            if k != "floor"
            else "launch floor: the default floor (data/prediction.toml) instead of the target's",
            "busy_us": float(v.sum()),
            "delta_us": float(v.sum()) - busy,
        }
        for k, v in alts.items()
    ]
    doc = _document(wl, batch, dtype, tgt, arrays, t, busy, rng, int(no_rate.sum()))
    if fallback:
        doc["notes"].append(
            f"{tgt.key} has no rate for {', '.join(fallback)}: those operators are timed at its fp32 rate"
        )
    return doc


def _document(wl, batch, dtype, tgt: Chip, arrays, t, busy, rng, no_rate: int) -> dict:
    rows, group, flops, nbytes, _, _ = arrays
    by = {g: float(t[group == g].sum()) for g in GROUPS if (group == g).any()}
    groups = [
        {
            "class": g,
            "label": GROUP_LABELS[g],
            "kernels": int((group == g).sum()),
            "source_us": None,
            "target_us": v,
            "ratio": None,
            "flops": float(flops[group == g].sum()),
            "bytes": float(nbytes[group == g].sum()),
        }
        for g, v in by.items()
    ]
    matrix = np.isin(group, ("gemm_conv", "attention"))
    notes = [
        f"{len(rows)} operators that move data, each taken as one kernel (the recorded step of {wl.name}, "
        f"batch {batch}, {dtype}, on fake tensors); no idle time: a step predicted from operators has no CPU "
        "gaps to hold",
        "no source trace: no slack beyond the roofline; real kernels are slower (docs/predict.md)",
    ]
    if no_rate:
        notes.append(f"{no_rate} matrix operators have no rate for their precision on {tgt.key}: counted by bytes only")
    return {
        "schema": "dawnscope.predict/1",
        "model": {
            "name": wl.name,
            "batch": batch,
            "dtype": dtype,
            "operators": len(rows),
            "flops": float(flops.sum()),
            "bytes": float(nbytes.sum()),
        },
        "source": {
            "device": "recorded operators (no GPU)",
            "busy_us": None,
            "busy_us_per_step": None,
            "idle_us": 0.0,
            "kernel_time_us": None,
            "steps": 1,
            "by_class_us": {},
        },
        "target": {
            "device": tgt.name,
            "chip": tgt.as_dict(),
            "busy_us": busy,
            "busy_us_low": busy + sum(min(r["delta_us"], 0.0) for r in rng),
            "busy_us_high": busy + sum(max(r["delta_us"], 0.0) for r in rng),
            "busy_us_per_step": busy,
            "idle_us": 0.0,
            "kernel_time_us": busy,
            "by_class_us": by,
            "matrix_share": float(t[matrix].sum()) / busy if busy > 0 else None,
            "achieved_tflops": float(flops.sum()) / (busy * 1e6) if busy > 0 else None,
        },
        "classes": groups,  # the report key keeps its name: it lists the prediction groups
        "range": {"assumptions": rng, "dominant": max(rng, key=lambda r: abs(r["delta_us"]))["name"]},
        "scenario": {"dtype": dtype, "batch_scale": 1.0},
        "unplaced": [],
        "unplaced_us": 0.0,
        "above_roof_kernels": 0,
        "kernels": [],
        "notes": notes,
    }
