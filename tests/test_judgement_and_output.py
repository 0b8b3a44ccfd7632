"""Trustworthy numbers: the machine's conditions, verdicts never drawn from noise, the ceiling search, and
output a person can read (120 columns, no placeholders, keyed plot points, explained columns). No test here
depends on how fast this machine is: timings are synthetic."""

from __future__ import annotations

import json
import re

import pytest
from rich.console import Console

from microbench.core.conditions import Conditions, ConditionSettings, gpu_state, judge_conditions
from microbench.core.ops.work import Work
from microbench.core.results import KernelCaseRow
from microbench.core.stats import NoiseSettings, summarize
from microbench.report import roofline_report as report
from microbench.report.compare import compare, print_compare
from microbench.roofline.ceilings import COMPUTE, MEMORY, Ceiling, Ceilings
from microbench.roofline.runner import judge

ST = NoiseSettings()


# ---- conditions -------------------------------------------------------------------------------------------
def test_conditions_block_is_recorded():
    doc = Conditions(ConditionSettings(sample_s=0.05)).start().stop()
    assert isinstance(doc["busy"], bool) and doc["busy"] == bool(doc["reasons"])
    assert doc["threads"]["torch_threads"] >= 1 and doc["threads"]["why"]
    for when in ("before", "during"):
        assert doc[when]["other_cores"] is None or doc[when]["other_cores"] >= 0
    assert doc["cores"] >= 1


def test_own_cpu_time_counts_the_children_waited_for():
    """The ranks `comm` starts and the probe processes of `decompose` are the command's own work: their CPU time
    is not "other processes" (a two-rank `comm ddp` once called its own ranks a busy machine)."""
    import os
    import subprocess
    import sys

    from microbench.core.conditions import _own_jiffies

    burn_s = 0.3  # the child spins until it has used this much CPU time itself, however loaded the machine is
    before = _own_jiffies()
    subprocess.run([sys.executable, "-c", f"import time\nwhile time.process_time() < {burn_s}: pass"], check=True)
    counted_s = (_own_jiffies() - before) / os.sysconf("SC_CLK_TCK")
    assert counted_s >= burn_s - 0.05  # a jiffy or two of rounding, never the whole child


def test_conditions_judgement():
    st = ConditionSettings(max_other_cores=0.25, max_load_per_core=1.0, max_steal_share=0.05)
    quiet = {
        "cores": 2,
        "before": {"loadavg": [0.3, 0.2, 0.1], "other_cores": 0.02, "steal_share": 0.0},
        "during": {"other_cores": 0.1, "steal_share": 0.01},
    }
    assert judge_conditions(quiet, st) == []
    busy = {
        "cores": 2,
        "before": {"loadavg": [3.5, 2.0, 1.0], "other_cores": 1.9, "steal_share": 0.0},
        "during": {"other_cores": 1.2, "steal_share": 0.2, "gpu": {"throttle": ["hardware thermal slowdown"]}},
    }
    reasons = judge_conditions(busy, st)
    assert len(reasons) == 5
    assert any("1.90 of 2 cores" in r for r in reasons) and any("load average 3.50" in r for r in reasons)
    assert any("steal" in r for r in reasons) and any("thermal" in r for r in reasons)


def test_gpu_state_without_nvidia_driver():
    import torch

    if torch.cuda.is_available():
        pytest.skip("an NVIDIA driver is here: gpu_state reads it (checked on GPU machines)")
    s = gpu_state(0)
    assert s["available"] is False and s["why"].startswith("not available")


# ---- verdicts and noise -----------------------------------------------------------------------------------
def _ceilings(noise=()):
    return Ceilings(
        [
            Ceiling("measured fp32", COMPUTE, "fp32", 1.0, "TFLOP/s", "measured", "", (0.95, 1.05), noise),
            Ceiling("measured memory", MEMORY, None, 1000.0, "GB/s", "measured", "", (950.0, 1050.0)),
        ]
    )


def _row(baseline=False):
    return KernelCaseRow(
        op="gemm", shape="1000x1000x1000", dtype="fp32", provider="torch", device="cpu", baseline=baseline
    )


WORK = Work(2_000_000_000, 12_000_000)  # 2 GFLOP at 167 FLOP/B: compute-bound under a 1 TFLOP/s roof


def test_above_roof_beyond_both_spreads_is_flagged():
    r = judge(_row(), WORK, summarize([1.0, 1.0, 1.01, 1.0, 0.99], ST), _ceilings())  # 2 TFLOP/s: 200 %
    assert r.pct_of_ceiling == pytest.approx(200, rel=0.02)
    assert len(r.flags) == 1 and r.flags[0].startswith("above the measured compute roof (200 %")


def test_within_the_ceilings_spread_is_not_flagged():
    # 2.06 ms: 0.97 TFLOP/s median, within the ceiling's own 0.95-1.05
    r = judge(_row(), WORK, summarize([2.0, 2.06, 2.1, 2.06, 2.03], ST), _ceilings())
    assert r.flags == []


def test_noisy_row_gets_no_verdict():
    # bimodal: 1 ms and 20 ms; its median would be "above the roof"
    t = summarize([1.0] * 4 + [20.0] * 4 + [1.0], ST)
    r = judge(_row(), WORK, t, _ceilings())
    assert r.flags and r.flags[0].startswith("noisy: ") and "bimodal" in r.flags[0]
    assert not any(f.startswith("above") for f in r.flags)


def test_noisy_ceiling_gives_no_verdict_but_a_row_above_it_is_flagged():
    """No 'beyond both spreads' verdict from a roof whose repeats disagree; the row above it is still flagged
    (rows above their ceiling were shown unflagged)."""
    r = judge(_row(), WORK, summarize([1.0, 1.0, 1.01, 1.0, 0.99], ST), _ceilings(noise=("bimodal",)))
    assert len(r.flags) == 1 and "whose own repeats disagree (bimodal)" in r.flags[0]
    assert "beyond both spreads" not in r.flags[0]


def test_baseline_gemm_above_its_own_ceiling_says_why():
    r = judge(_row(baseline=True), WORK, summarize([1.0, 1.0, 1.01, 1.0, 0.99], ST), _ceilings())
    assert "the ceiling comes from the same library's GEMM" in r.flags[0]


def _doc(rows, busy=False, kind="cpu"):
    return {
        "hardware": {
            "kind": kind,
            "name": "test cpu",
            "arch": "x86_64",
            "units": 2,
            "memory_gib": 1.0,
            "clock_mhz": 2000.0,
            "isa_flags": [],
        },
        "software": {"torch": "t", "triton": "t", "python": "3"},
        "config": {"profile": "quick"},
        "ceilings": [c.as_dict() for c in _ceilings().items],
        "conditions": {"busy": busy, "reasons": ["before the run other processes kept 1.90 of 2 cores busy"]},
        "notes": [],
        "results": [r.as_dict() for r in rows],
    }


def _timed(provider, samples, baseline=False, op="gemm", shape="1000x1000x1000", dtype="fp32"):
    r = KernelCaseRow(op=op, shape=shape, dtype=dtype, provider=provider, device="cpu", baseline=baseline)
    return judge(r, WORK, summarize(samples, ST), _ceilings())


def test_baseline_ratio_same_noise_or_number():
    base = _timed("torch", [4.0, 4.1, 4.2, 4.0, 4.1], baseline=True)
    rows = [
        base,
        _timed("a", [4.1, 4.15, 4.2, 4.05, 4.1]),
        _timed("b", [2.0, 2.01, 2.0, 2.02, 2.0]),
        _timed("c", [2.0] * 4 + [30.0] * 4),
    ]
    ratios = report.baseline_ratios([r.as_dict() for r in rows])
    assert ratios == {1: "same", 2: f"{4.1 / 2.0:.2f}x", 3: "noise"}


# ---- output a person can read -----------------------------------------------------------------------------
LONG = [
    ("conv2d_bwd_weight", "n32 c1024 14x14 k512 1x1 s1 p0 d2 g4", "bf16", "cupy_wgmma"),
    ("gemm", "96x[512x512x64] A^TB^T", "fp8_e4m3", "cupy_blas"),
    ("conv2d_bwd_data", "n32 c3 224x224 k64 7x7 s2 p3", "fp32", "triton"),
]


def _long_doc(busy=False):
    rows = [_timed(p, [1.0, 1.01, 1.02, 1.0, 0.99], op=op, shape=shape, dtype=dt) for op, shape, dt, p in LONG]
    rows[0].flags.append("above the measured compute roof (162 %, 1.45x beyond both spreads): test")
    return _doc(rows, busy)


def test_results_table_keeps_op_shape_dtype_provider_at_120_columns():
    console = Console(width=120, record=True, color_system=None)
    report.print_report(_long_doc(), console)
    text = console.export_text()
    assert max(len(line) for line in text.splitlines()) <= 120
    for op, shape, dt, p in LONG:
        line = next((ln for ln in text.splitlines() if shape in ln), None)
        assert line is not None, f"shape {shape!r} lost at 120 columns"
        assert op.replace("conv2d_", "conv ") in line and dt in line and p in line


def test_busy_warning_first_and_no_placeholders():
    console = Console(width=120, record=True, color_system=None)
    report.print_report(_long_doc(busy=True), console)
    text = console.export_text()
    assert text.lstrip().startswith("warning: machine busy: before the run other processes kept 1.90")
    assert "rerun when" in text
    assert not re.search(r"\bN\b", text), "a placeholder N in the report"
    assert "(162 %, 1.45x beyond both spreads)" in text


def test_reason_counts_show_ranges_not_placeholders():
    rows = [
        KernelCaseRow(
            op="gemm",
            shape=f"{n}x1x1",
            dtype="fp32",
            provider="triton",
            status="skipped",
            reason=f"unsupported: {n} multiply-adds is too large (limit 200000000)",
        )
        for n in (300, 5000, 70)
    ]
    assert report.reason_counts(rows) == {
        "triton skipped: unsupported: 70-5000 multiply-adds is too large (limit 200000000)": 3
    }


def test_roofline_only_present_dtypes_distinct_roofs_marked_and_numbered():
    import matplotlib.pyplot as plt

    doc = _long_doc()
    doc["ceilings"] += [
        Ceiling(f"estimate {d}", COMPUTE, d, 0.5, "TFLOP/s", "estimate").as_dict() for d in ("fp32", "bf16", "fp16")
    ]
    fig = report.roofline_figure(doc)
    try:
        ax = fig.axes[0]
        labels = [ln.get_label() for ln in ax.get_lines()]
        assert not any(lab.startswith("fp16") for lab in labels)  # no fp16 row: no fp16 roof
        roofs = [
            (ln.get_color(), str(ln.get_linestyle()), ln.get_dashes() if hasattr(ln, "get_dashes") else None)
            for ln in ax.get_lines()
            if "TFLOP/s" in ln.get_label()
        ]
        assert len(roofs) == len(set(roofs))  # no two roofs drawn alike
        texts = {t.get_text() for t in ax.texts}
        numbers = {n for t in texts for n in t.split(",")}  # points on one spot share a label: "1,2,3"
        assert {"1", "2", "3"} <= numbers  # every timed row's number beside its point
        assert "fp32 / bf16 estimate" in texts  # coinciding roofs share one label
        assert any(lab == "above its roof (flagged)" for lab in [h.get_label() for h in ax.collections])
    finally:
        plt.close(fig)


def test_html_explains_every_column_and_warns():
    from microbench.report.html import results_html

    page = results_html(_long_doc(busy=True), plot=False)
    assert page.index("warning: machine busy") < page.index("<h2>results</h2>")
    columns, _ = report.results_cells(_long_doc())
    for name, _ in columns:
        assert f"<dt><b>{name}</b></dt>" in page.replace("&#x27;", "'"), name


# ---- compare ----------------------------------------------------------------------------------------------
def _write(tmp_path, name, rows):
    d = tmp_path / name
    d.mkdir()
    doc = _doc(rows)
    doc["schema"] = "dawnscope.results/1"
    (d / "results.json").write_text(json.dumps(doc))
    return d


def test_compare_directories_same_within_noise_and_narrow(tmp_path):
    a = _write(
        tmp_path, "run1", [_timed(p, [1.0, 1.05, 1.1, 1.0, 1.02], op=op, shape=s, dtype=dt) for op, s, dt, p in LONG]
    )
    b = _write(
        tmp_path, "run2", [_timed(p, [1.04, 1.08, 1.12, 1.06, 1.1], op=op, shape=s, dtype=dt) for op, s, dt, p in LONG]
    )
    cmp = compare([a, b])
    cells = cmp["cases"][0]["cells"]
    second = cells[cmp["machines"][1]["label"]]
    assert second["verdict"] == "same within noise"
    console = Console(width=120, record=True, color_system=None)
    print_compare(cmp, console)
    text = console.export_text()
    for op, shape, dt, p in LONG:
        line = next((ln for ln in text.splitlines() if shape in ln), None)
        assert line is not None and dt in line and p in line and "same" in line
    # median (p20-p80) of 1.0, 1.0, 1.02, 1.05, 1.1 (inclusive deciles: p20 = 1.0, p80 = 1.05 + 0.2 * 0.05)
    assert "1.02 (1-1.06)" in text


def test_compare_directory_without_results(tmp_path):
    from microbench.compare import cli as cmd

    (tmp_path / "empty").mkdir()
    assert cmd.main([str(tmp_path / "empty")]) == 2


# ---- the ceiling search (synthetic timings: the search's logic, not this machine's speed) ---------------
def test_gemm_search_walks_to_the_best_shape_and_repeats_it(monkeypatch, cfg):
    from microbench.core.config import CeilingSettings
    from microbench.core.device import cpu_device
    from microbench.core.shapes import GemmShape
    from microbench.roofline import ceilings as C
    from microbench.roofline import registry

    peak = GemmShape(48, 64, 32)  # the synthetic library is fastest here, which no square reaches

    def fake_measure(fns, device, timing, noise=None):
        a, b = fake_measure.shape_of(fns)
        s = GemmShape(a.shape[0], b.shape[1], a.shape[1])
        dist = abs(s.m - peak.m) + abs(s.n - peak.n) + abs(s.k - peak.k)
        tflops = 1.0 / (1 + dist / 16)
        ms = 2 * s.m * s.n * s.k / (tflops * 1e12) * 1e3
        return summarize([ms] * 5, ST)

    captured = {}

    def fake_bind(provider, case, a, b):
        captured["ab"] = (a, b)
        return lambda: None

    fake_measure.shape_of = lambda fns: captured["ab"]
    monkeypatch.setattr(C, "time_calls", fake_measure)
    monkeypatch.setattr(registry, "bind", fake_bind)
    st = CeilingSettings({"fp32": (16, 32, 48, 64)}, (1,), budget_s=60.0, repeats=3, top=2)
    own = [GemmShape(7, 5, 3, batch=2, trans_a=True), GemmShape(4096, 4096, 4096)]  # the second: beyond the search
    search = C.GemmSearch(registry.baseline("gemm"), "fp32", cpu_device(), cfg)
    c = search.run(st.gemm_sizes["fp32"], own, st.budget_s, st)
    assert c.value == pytest.approx(1.0) and "48x64x32" in c.note
    assert GemmShape(7, 5, 3, batch=2, trans_a=True) in search.timed  # the profile's own shape was timed
    assert GemmShape(4096, 4096, 4096) not in search.timed  # larger than the largest square: left out
    best_two = sorted(search.timed, key=search.best, reverse=True)[:2]
    assert all(len(search.timed[s]) == 3 for s in best_two)
    assert c.search[0]["shape"] == "48x64x32" and c.noise == ()


def test_gemm_search_without_budget_times_one_shape_and_says_so(monkeypatch, cfg):
    from microbench.core.config import CeilingSettings
    from microbench.core.device import cpu_device
    from microbench.roofline import ceilings as C
    from microbench.roofline import registry

    monkeypatch.setattr(C, "time_calls", lambda *a, **k: summarize([1.0] * 5, ST))
    st = CeilingSettings({"fp32": (16, 32)}, (1,), budget_s=0.0, repeats=2, top=1)
    search = C.GemmSearch(registry.baseline("gemm"), "fp32", cpu_device(), cfg)
    c = search.run(st.gemm_sizes["fp32"], [], 0.0, st)
    assert c is not None and "16x16x16" in c.note and list(search.timed) == [C.GemmShape(16, 16, 16)]
    assert len(search.timed[C.GemmShape(16, 16, 16)]) == 2  # repeated all the same
    assert any("budget of 0 s spent before 1 starting shape(s), e.g. 32x32x32" in n for n in search.notes)


# ---- decompose: the profiler's overhead -------------------------------------------------------------------
def test_profiler_overhead_flags():
    from microbench.decompose.pipeline import profiler_overhead

    quiet = summarize([100.0, 101.0, 99.0, 100.5], ST)
    slower = summarize([140.0, 141.0, 139.0, 140.5], ST)
    out = profiler_overhead(quiet, slower, operator_ms=120.0, max_spread=0.25)
    assert out["profiler_overhead"] == pytest.approx(0.4, rel=0.01)
    assert len(out["step_flags"]) == 1 and "disagree beyond noise" in out["step_flags"][0]
    assert profiler_overhead(quiet, summarize([101.0, 100.0, 102.0], ST), 95.0, 0.25)["step_flags"] == []
    # ResNet-50 at batch 1 on a busy CPU: 8.3 s unprofiled against 1.35 s of operators in a 1.4 s profiled step
    out = profiler_overhead(
        summarize([8300.0, 8250.0, 8400.0], ST),
        summarize([1400.0, 1390.0, 1410.0], ST),
        operator_ms=1350.0,
        max_spread=0.25,
    )
    assert out["step_flags"][0].startswith("impossible: the profiled step") and "-83%" in out["step_flags"][0]
    assert out["profiler_overhead"] is None  # the "profiler overhead -84 %": never printed as a figure
    out = profiler_overhead(None, summarize([100.0, 100.0, 100.0], ST), operator_ms=30.0, max_spread=0.25)
    assert out["profiler_overhead"] is None and "cover only 30%" in out["step_flags"][0]
    noisy = profiler_overhead(summarize([10.0, 10.0, 90.0, 90.0, 10.0, 90.0], ST), quiet, 95.0, 0.25)
    assert "no verdict" in noisy["step_flags"][0]


@pytest.mark.slow
def test_depthwise_model_backward_is_twice_forward():
    """The MobileNetV2-style test model through the decomposition: backward matrix FLOPs are twice the forward,
    less the stem convolution's backward-data (no gradient for the images)."""
    from microbench import kernels
    from microbench.decompose.pipeline import DecomposeOptions, decomposition_doc

    kernels.load_all()
    doc = decomposition_doc(
        "microbench.models.mobilenet:make",
        DecomposeOptions(
            batch=2,
            replay=False,
            measure_ceilings=False,
            plot=False,
            timed_steps=1,
            profiled_steps=1,
            profiler_warmup_steps=1,
        ),
    )
    s = doc["summary"]
    stem = 2 * 2 * 16 * 32 * 32 * 3 * 9  # 3x3 stride 2 conv, 3 -> 16 channels, 64x64 -> 32x32, batch 2
    assert s["backward_flops"] == 2 * s["forward_flops"] - stem
    assert 1.8 < s["backward_flops"] / s["forward_flops"] <= 2.0
    assert s["flop_counter_flops"] > 3 * s["flops_per_step"]  # torch's counter: grouped backward as ungrouped
    assert "profiler_overhead" in s and "step_flags" in s and isinstance(doc["conditions"]["busy"], bool)


# ---- progress when stderr is not a terminal ---------------------------------------------------------------
def test_progress_line_per_case_on_a_pipe(tiny_config, tmp_path, capsys):
    from microbench.roofline import cli as roofline

    assert (
        roofline.main(
            [
                "--profile",
                "tiny",
                "--config",
                str(tiny_config),
                "--out",
                str(tmp_path / "o"),
                "--device",
                "cpu",
                "--no-plot",
            ]
        )
        == 0
    )
    err = capsys.readouterr().err
    cases = [ln for ln in err.splitlines() if "] case " in ln]
    assert len(cases) == 7 and cases[0].endswith("case 1/7: gemm 64x48x32 fp32")
    doc = json.loads((tmp_path / "o" / "results.json").read_text())
    assert isinstance(doc["conditions"]["busy"], bool) and doc["conditions"]["threads"]["torch_threads"] >= 1


def test_compare_command_takes_result_directories(tmp_path, capsys):
    from microbench.compare import cli as cmd

    a = _write(tmp_path, "a", [_timed("torch", [1.0, 1.05, 1.1, 1.0, 1.02], baseline=True)])
    b = _write(tmp_path, "b", [_timed("torch", [2.0, 2.01, 2.02, 2.0, 2.01], baseline=True)])
    assert cmd.main([str(a), str(b)]) == 0
    assert "0.51x" in capsys.readouterr().out  # 1.02 ms / 2.01 ms: b is half as fast, beyond both spreads
