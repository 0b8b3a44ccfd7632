"""The measuring core on a real GPU (skipped, visibly, without one; scripts/device-check runs them)."""

from __future__ import annotations

import pytest
import torch

from microbench.core.cases import make_inputs
from microbench.core.config import TimingSettings
from microbench.core.device import detect, fingerprint
from microbench.core.shapes import Case, GemmShape
from microbench.roofline import registry
from microbench.roofline.ceilings import build_ceilings
from microbench.roofline.evidence import vendor_evidence
from microbench.roofline.registry import bind
from microbench.roofline.timing import time_calls

pytestmark = pytest.mark.gpu


def test_fingerprint_and_datasheet(cfg):
    dev = detect("cuda")
    fp = fingerprint(dev)
    assert fp["kind"] in ("cuda", "rocm") and fp["units"] > 0 and fp["memory_bytes"] > 0
    assert fp["arch"].startswith("sm_") or fp["arch"].startswith("gfx")
    c = build_ceilings(dev, cfg, measure_now=False)
    assert c.notes  # matched, unknown or ambiguous: the report says which


def test_event_timing_with_l2_flush():
    dev = detect("cuda")
    a = torch.randn(2048, 2048, device=dev.torch_device, dtype=torch.bfloat16)
    t = time_calls(lambda: a @ a, dev, TimingSettings(warmup_ms=5, rep_ms=20, min_reps=5))
    assert t.reps >= 5 and 0 < t.p20_ms <= t.median_ms <= t.p80_ms


@pytest.mark.parametrize("dtype, expected", [("bf16", "yes"), ("fp16", "yes"), ("tf32", "yes")])
def test_vendor_gemm_tensor_core_evidence(dtype, expected):
    dev = detect("cuda")
    case = Case("gemm", GemmShape(4096, 4096, 4096), dtype)
    call = bind(registry.baseline("gemm"), case, *make_inputs(case, dev.torch_device))
    ev = vendor_evidence(case, dev, call)
    assert ev.tensor_cores == expected, ev.evidence


def test_fp32_with_tf32_forbidden_is_not_reported_as_tensor_core():
    dev = detect("cuda")
    case = Case("gemm", GemmShape(4096, 4096, 4096), "fp32")
    call = bind(registry.baseline("gemm"), case, *make_inputs(case, dev.torch_device))
    ev = vendor_evidence(case, dev, call)
    assert ev.tensor_cores != "yes", ev.evidence


def test_measured_ceilings_below_datasheet(cfg):
    """Bounded like the other GPU tests: a 1 s search budget per dtype (the first square and the repeats of
    the best always run), not bench.toml's 20 s: the bound is checked, not the best ceiling found."""
    dev = detect("cuda")
    c = build_ceilings(dev, cfg, budget_s=1.0)
    bf16, mem = c.compute("bf16"), c.memory()
    assert bf16 is not None and bf16.value > 0 and mem is not None and mem.value > 0
    sheet = c.compute("bf16", ("datasheet",))
    if sheet is not None:  # measured above the datasheet would be a timing bug (e.g. zeros, no sync)
        assert bf16.value < sheet.value * 1.05
