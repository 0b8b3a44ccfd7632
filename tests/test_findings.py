"""Findings first: the per-step breakdown in the TensorBoard plugin's categories and the GPU idle split by
what the host was doing (timeline/gpu_time.host_breakdown), the findings and their savings from the prediction
model (findings/engine.py), the terminal section and the trace's HTML page, on the shared real traces."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import numpy as np
import pytest

from microbench.core.config import load_config
from microbench.core.dtypes import cpu_native_bf16
from microbench.core.stats import NoiseSettings
from microbench.findings import engine as F
from microbench.findings import facts as FX
from microbench.findings import rules as R
from microbench.predict.estimate import Variant, unshaped_fp32, unshaped_rows
from microbench.predict.kernels import MATRIX, ActivityWork
from microbench.trace import cli as trace_cli
from microbench.trace import gpu_time
from microbench.trace.analysis import TraceAnalysis, read_trace
from microbench.trace.metrics import union

from .conftest import REPO, TRACES, analyze_with_findings, needs_traces

pytestmark = needs_traces


@pytest.fixture(scope="module")
def config():
    return load_config(None)


@pytest.fixture(scope="module")
def bert(config):
    return TraceAnalysis.open(TRACES / "h100_bert_small.json.gz", config)


@pytest.mark.parametrize("name", ["h100_bert_small", "v100_resnet_ddp_rank0", "a100_torchrec_rank0"])
def test_breakdown_adds_up_to_the_step_and_idle_split_to_its_host_part(name):
    tl = read_trace(TRACES / f"{name}.json.gz")
    _, steps, _ = gpu_time.step_breakdowns(tl)
    assert steps
    lo, hi = gpu_time.plugin_windows(tl, tl.step_windows())
    k = tl.activities
    for st, a, b in zip(steps, lo, hi):
        parts = st["breakdown_us"]
        assert set(parts) == set(gpu_time.PLUGIN_CATEGORIES)
        assert sum(parts.values()) == pytest.approx(st["breakdown_span_us"], rel=1e-9)
        assert st["breakdown_span_us"] == pytest.approx(b - a)
        idle = st["idle_by_host_us"]
        assert sum(idle.values()) == pytest.approx(
            parts["runtime"] + parts["dataloader"] + parts["cpu_exec"] + parts["other"], rel=1e-9, abs=1e-6
        )
        # kernel time in the window: the union of the kernels' intervals clipped to it (GPU first)
        on = k.category == 0
        s, e = union(np.clip(k.ts_us[on], a, b), np.clip(k.end_us[on], a, b))
        assert parts["kernel"] == pytest.approx(float((e - s).sum()), rel=1e-9)


def test_the_bert_step_splits_its_idle_by_host_activity():
    """H100 BERT (one step, 4,426 us CPU; 307 us of kernels): the step owns its sync (.item() and the
    cudaDeviceSynchronize / cudaStreamSynchronize calls) apart from the other runtime calls."""
    tl = read_trace(TRACES / "h100_bert_small.json.gz")
    (st,) = gpu_time.step_breakdowns(tl)[1]
    assert st["breakdown_us"]["kernel"] == pytest.approx(st["computation_us"], rel=1e-6)
    assert st["idle_by_host_us"]["sync"] > 0
    assert st["idle_by_host_us"]["dataloader"] == 0.0  # no DataLoader in an inference trace
    host = gpu_time.host_intervals(tl)
    assert len(host["sync_runtime"][0]) == 3 and len(host["sync_ops"][0]) >= 1


def test_torchrec_waits_on_its_host_not_on_launches(config):
    """591 us of host-side idle per kernel (launch_gap_per_kernel_us): the host's own work, which a CUDA graph
    does not remove: host_bound, and no launch_bound beside it."""
    ta = TraceAnalysis.open(TRACES / "a100_torchrec_rank0.json.gz", config)
    r = F.findings_of(ta, config)
    ids = [f["id"] for f in r["findings"]]
    assert ids[0] == "host_bound" and "launch_bound" not in ids
    assert "CUDA graph" not in r["findings"][0]["fix"] and r["findings"][0]["saving_us"]["low"] == 0.0


def test_bert_is_launch_bound_first_with_a_range_inside_its_idle(bert, config):
    r = F.findings_of(bert, config)
    top = r["findings"][0]
    assert top["id"] == "launch_bound" and r["per"] == "step"
    s = top["saving_us"]
    st = bert.steps[0]
    assert 0 < s["low"] <= s["expected"] <= s["high"] <= st["breakdown_span_us"] - st["busy_us"] + 1e-6
    assert s["expected"] <= st["idle_us"] + 1e-6  # never more than the idle the trace shows
    assert "CUDA graph" in top["fix"] and set(top) >= {"id", "what", "share", "evidence", "fix", "saving_us"}
    assert f"{st['breakdown_span_us']:,.0f} us step" in top["what"]  # the what names the step it is a share of
    # the bf16 trace has nothing to move to Tensor Cores: no AMP finding, and AMP is not "not checked" either
    assert "amp" not in {f["id"] for f in r["findings"]} | {n["id"] for n in r["not_checked"]}


def test_a_trace_without_shapes_names_amp_from_the_kernel_names(config):
    """The V100 DDP rank was recorded without shapes: its fp32 cuBLAS / cuDNN kernels (volta_sgemm_*, *_scudnn_*,
    dgrad_engine<float, ...>) are fp32 by their names, and the model moves `share` of each one's time above the
    floor at the ratio of the two precisions' achievable rates: all of it at share 1, none at share 0."""
    ta = TraceAnalysis.open(TRACES / "v100_resnet_ddp_rank0.json.gz", config)
    r = F.findings_of(ta, config)
    top = r["findings"][0]
    assert top["id"] == "amp" and "float16" in top["fix"] and "no operator shapes" in top["evidence"]["layer"]
    assert "none of them has a FLOP count" in top["what"] and "assumed" in top["what"]
    assert "amp" not in {n["id"] for n in r["not_checked"]}
    f = FX.Facts(ta, config)
    w, chip = f.work, f.chip
    rows = np.flatnonzero(unshaped_rows(w))
    assert len(rows) and {w.precision[i] for i in rows} == {"fp32"}
    assert w.dur_us[rows].sum() > 0.9 * w.dur_us[np.isin(w.group, MATRIX)].sum()  # the cask offset kernels: not
    all_math = np.maximum(w.dur_us[rows] - chip.floor_us, 0.0) * (
        1 - chip.rate("fp32", False) / chip.rate("fp16", False)
    )
    assert f.saved("fp16", Variant(), share=1.0)[rows] == pytest.approx(all_math)
    assert f.saved("fp16", Variant(), share=0.0)[rows] == pytest.approx(np.zeros(len(rows)))
    s = top["saving_us"]
    assert s["low"] == pytest.approx(R.dtype_saving(f, "fp16")["low"]) and 0 < s["low"] < s["expected"] < s["high"]
    assert f.unshaped_share[0] == FX.assumptions()["unshaped"]["share"]  # the trace has no kernel with FLOPs


def test_a_range_profiler_trace_makes_no_finding_from_its_replayed_durations(config):
    """The A100 counters trace is of fp32 sgemm kernels without shapes, which the names would move: but each
    kernel was replayed alone to read its counters, so its duration is no run time to save from."""
    ta = TraceAnalysis.open(TRACES / "a100_cupti_counters.json.gz", config)
    assert FX.unshaped_rows(FX.Facts(ta, config).work).any()
    r = F.findings_of(ta, config)
    assert r["findings"] == [] and [n["id"] for n in r["not_checked"]] == ["all"]
    assert "77 kernels" in r["not_checked"][0]["why"] and "not run times" in r["not_checked"][0]["why"]


def test_names_give_fp32_only_to_kernels_without_tensor_cores_and_16_bit_types():
    names = [
        "volta_sgemm_64x64_nt",
        "cudnn_infer_volta_scudnn_128x64_relu_small_nn_v1",
        "void cudnn::detail::dgrad_engine<float, 512, 6>(int)",
        "volta_h884gemm_64x64_nn",
        "void gemv<float, c10::Half>(int)",
        "volta_sgemm_128x32_tn",
        "volta_dgemm_64x64_nn",
    ]
    n = len(names)
    w = ActivityWork(
        names,
        np.ones(n),
        np.array(["gemm_conv"] * n, dtype=object),
        np.array(["gemm"] * n, dtype=object),
        np.zeros(n),
        np.full(n, np.nan),
        np.full(n, None, dtype=object),
        np.zeros(n, dtype=np.int64),
        np.full(n, None, dtype=object),
        np.full(n, None, dtype=object),
        0,
        [],
    )
    no_tc = np.array([True, True, True, False, True, False, True])
    assert list(unshaped_fp32(w, no_tc).precision) == ["fp32", "fp32", "fp32", None, None, None, None]


def test_a_trace_without_shapes_whose_names_say_nothing_says_why_amp_is_not_checked(config, monkeypatch):
    from microbench.predict import estimate as model

    rule = model.assumptions() | {"unshaped": {"fp32_name": "^no kernel is called this$", "share": 0.5}}
    monkeypatch.setattr(model, "assumptions", lambda: rule)
    ta = TraceAnalysis.open(TRACES / "v100_resnet_ddp_rank0.json.gz", config)
    r = F.findings_of(ta, config)
    why = {n["id"]: n["why"] for n in r["not_checked"]}
    assert "record_shapes=True" in why["amp"] and "62.9%" in why["amp"]
    assert not any(f["id"] in ("amp", "tf32") for f in r["findings"])


def test_a_trace_without_steps_checks_only_what_needs_no_steps(config):
    """The A100 AlexNet trace has no steps, and read whole its span is the warm-up forward's (12.3 s of runtime
    calls at context creation, allocation): the step rules are not checked, saying so, not called host-bound."""
    ta = TraceAnalysis.open(TRACES / "a100_alexnet_forward.json.gz", config)
    r = F.findings_of(ta, config)
    assert r["per"] == "trace" and not r["findings"]
    stopped = {
        n["id"]
        for n in r["not_checked"]
        if n["why"].startswith("no steps, and read whole the trace is mostly one-off set-up")
    }
    assert stopped == {rid for rid, rule in FX.rules()["rules"].items() if "steps" in rule["needs"]}


def test_amp_saving_is_the_prediction_models_with_its_range(config):
    """The TorchRec rank (A100-class; the trace names no device, so it is given): its fp32 / TF32 GEMMs moved to
    bf16 by the prediction model on the same chip. The saving is the busy time the model removes; the range is
    the model's alternative assumptions, and it moves with the chip's rates (no fixed percentage)."""
    ta = TraceAnalysis.open(TRACES / "a100_torchrec_rank0.json.gz", config)
    f = FX.Facts(ta, config, "a100_sxm4_80gb")
    s = R.dtype_saving(f, "bf16")
    assert 0 < s["low"] <= s["expected"] <= s["high"]
    kernel_us = f.per_step(ta.tl.activities.dur_us) * f.overlap
    assert s["high"] < kernel_us  # a saving is never the whole busy time
    amp = R.rule_amp(f, FX.rules()["rules"]["amp"])
    assert amp["saving_us"] == s and "bfloat16" in amp["fix"]
    # fp16 on the same chip: the same datasheet rate, the same expected saving
    assert R.dtype_saving(f, "fp16")["expected"] == pytest.approx(s["expected"], rel=1e-6)
    # without the chip nothing is predicted: it is "not checked", with why
    r = F.findings_of(ta, config)
    assert "datasheet" in {n["id"]: n["why"] for n in r["not_checked"]}["amp"]


def test_terminal_opens_with_findings_and_groups_not_checked(capsys):
    assert trace_cli.main([str(TRACES / "a100_alexnet_forward.json.gz")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("no finding:")
    n_steps_rules = sum("steps" in r["needs"] for r in FX.rules()["rules"].values())
    grouped = [ln for ln in out if ln.startswith(f"not checked ({n_steps_rules}:")]
    assert len(grouped) == 1 and "launch_bound" in grouped[0] and "host_bound" in grouped[0]
    assert trace_cli.main([str(TRACES / "h100_bert_small.json.gz")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("findings (")
    assert next(ln for ln in out if ln[:2] == "1.").startswith("1. launch_bound")


def test_json_carries_the_findings_in_rank_order(tmp_path):
    out = tmp_path / "t.json"
    assert trace_cli.main([str(TRACES / "h100_bert_small.json.gz"), "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert list(doc)[:3] == ["schema", "file", "findings"]
    savings = [f["saving_us"]["expected"] for f in doc["findings"]]
    assert savings == sorted(savings, reverse=True) and len(savings) <= 5
    assert {"breakdown_us", "idle_by_host_us", "breakdown_span_us"} <= set(doc["steps"][0])


EXTERNAL = re.compile(
    r"https?://|//[a-z0-9.-]+\.[a-z]{2,}/|<script|<link|@import|url\((?!#)", re.IGNORECASE
)  # url(#id): a local clip path


def _page(tmp_path, name: str = "h100_bert_small"):
    page = tmp_path / f"{name}.html"
    assert trace_cli.main([str(TRACES / f"{name}.json.gz"), "--html", str(page)]) == 0
    return page


def test_the_html_page_is_self_contained_with_its_sections(tmp_path):
    text = _page(tmp_path).read_text()
    assert text.startswith("<!DOCTYPE html>") and not EXTERNAL.search(text), EXTERNAL.search(text)
    for src in re.findall(r'(?:src|href)="([^"]*)"', text):
        assert src.startswith(("data:", "#")), src
    for h in (
        "findings",
        "GPU summary",
        "step breakdown",
        "kernels by class",
        "top operators",
        "roofline",
        "communication and overlap",
        "integrity notes",
    ):
        assert f"<h2>{h}" in text
    assert text.count("<svg") == 2  # the stacked bars and the roofline
    assert "launch_bound" in text and "aten::linear" in text and "ProfilerStep#6" in text


def chromium() -> str | None:
    return next((p for n in ("chromium", "chromium-browser", "google-chrome") if (p := shutil.which(n))), None)


@pytest.mark.skipif(chromium() is None, reason="chromium not installed (Debian: apt-get install -y chromium)")
def test_the_html_page_renders_its_charts_and_tables_in_headless_chromium(tmp_path):
    import matplotlib.image as mpimg

    page = _page(tmp_path)
    png = tmp_path / "page.png"
    cmd = [
        chromium(),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--no-first-run",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={tmp_path / 'profile'}",
        f"--screenshot={png}",
        "--window-size=1280,2400",
        page.resolve().as_uri(),
    ]
    r = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and png.is_file(), r.stderr[-2000:]
    img = mpimg.imread(png)[..., :3]
    assert img.shape[:2] == (2400, 1280)
    ink = (img < 0.9).any(axis=-1)
    assert ink.mean() > 0.02
    # the stacked bar's kernel blue (#4e79a7) and cpu_exec yellow (#edc948) are on the page: the chart rendered
    for rgb in ((0x4E, 0x79, 0xA7), (0xED, 0xC9, 0x48)):
        near = (np.abs(img - np.array(rgb) / 255.0) < 0.04).all(axis=-1)
        assert near.sum() > 200, rgb
    # the tables' header background (#e8eef6) fills rows: the tables rendered
    head = (np.abs(img - np.array((0xE8, 0xEE, 0xF6)) / 255.0) < 0.02).all(axis=-1)
    assert head.sum() > 5000
    # nothing is wider than the 1280 px window: no horizontal overflow column is all ink at the right edge
    assert not ink[:, -3:].all(axis=0).any()


# The TensorBoard plugin's own overview of its ResNet-50 sample (tests/data/traces/SOURCES.md: its test
# expectations, tb_plugin/test/result_check_file.txt): the average step and its parts, in us.
PLUGIN_STEP_US = 141_068
PLUGIN_BREAKDOWN_US = {
    "kernel": 99_145,
    "memcpy": 3_160,
    "memset": 98,
    "runtime": 10_564,
    "dataloader": 1_186,
    "cpu_exec": 22_665,
    "other": 4_251,
}


def test_the_plugins_step_breakdown_is_reproduced_within_2_percent_of_the_step():
    tl = read_trace(TRACES / "v100_resnet50_tbplugin_2021schema.json.gz")
    _, steps, _ = gpu_time.step_breakdowns(tl)
    assert len(steps) == 6
    step = np.mean([st["breakdown_span_us"] for st in steps])
    assert abs(step - PLUGIN_STEP_US) <= 0.02 * PLUGIN_STEP_US
    for cat, us in PLUGIN_BREAKDOWN_US.items():
        ours = np.mean([st["breakdown_us"][cat] for st in steps])
        assert abs(ours - us) <= 0.02 * PLUGIN_STEP_US, (cat, ours, us)


def test_the_plugins_sample_names_amp_first_as_the_plugin_does(config):
    """The plugin recommends AMP for this fp32 V100 run; so do the findings, with the saving the prediction model
    gives for the convolutions and GEMMs; the forward convolutions, whose FLOPs the 1.9 schema does not give, at the
    share of their time the trace's other fp32 matrix kernels spend at their roofline."""
    ta = TraceAnalysis.open(TRACES / "v100_resnet50_tbplugin_2021schema.json.gz", config)
    r = F.findings_of(ta, config)
    top = r["findings"][0]
    assert top["id"] == "amp" and "float16" in top["fix"]  # V100: fp16 Tensor Cores, no bf16
    s = top["saving_us"]
    assert 0 < s["low"] < s["expected"] < s["high"] < PLUGIN_STEP_US and s["expected"] < top["time_us"]
    assert "no FLOP count" in top["what"] and "fp32 matrix kernels with FLOPs" in top["what"]
    f = FX.Facts(ta, config)
    assert 0.5 < f.unshaped_share[0] < 1


@pytest.mark.parametrize("columns", [120, 80])
def test_compare_keeps_operator_and_shape_readable_and_names_only_what_exists(tmp_path, monkeypatch, capsys, columns):
    from microbench.compare import cli as compare_cli

    docs = []
    for name in ("h100_bert_small", "mi300_bert_small"):
        docs.append(tmp_path / f"{name}.json")
        assert trace_cli.main([str(TRACES / f"{name}.json.gz"), "--json", str(docs[-1])]) == 0
    capsys.readouterr()
    monkeypatch.setenv("COLUMNS", str(columns))
    assert compare_cli.main([str(d) for d in docs]) == 0
    out = capsys.readouterr().out
    assert "aten::scaled_dot_product_attention" in out and "M=141 N=30522 K=512" in out
    assert "report.html" not in out and "results.json" not in out
    assert max(len(ln) for ln in out.splitlines()) <= columns


def test_trace_footnotes_name_no_file_it_did_not_write(monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "80")
    assert trace_cli.main([str(TRACES / "v100_resnet_ddp_rank0.json.gz")]) == 0
    out = capsys.readouterr().out
    assert "narrow terminal" in out and "report.html" not in out and "results.json" not in out


def test_a_step_that_is_also_an_annotation_shows_the_same_numbers_in_both(config):
    doc = analyze_with_findings(TRACES / "h100_bert_small.json.gz", config)
    (st,) = doc["steps"]
    (a,) = [a for a in doc["annotations"] if a["name"] == st["name"]]
    assert (a["calls"], a["wall_us"], a["kernel_count"]) == (1, st["wall_us"], st["kernel_count"]) == (1, 4426.114, 60)
    assert a["kernel_time_us"] == pytest.approx(st["kernel_time_us"])


def test_decompose_opens_with_findings_and_writes_the_same_page(tmp_path):
    """A CPU decomposition: the CPU is the device, its operators the activities; the rules that read GPU idle time
    are not checked, each with its reason (findings.toml `cpu_why`), and a model this small (a few kFLOP of matrix
    work: less than a microsecond to save at any CPU rate) has no finding; report.html is the CPU's page, with the
    host breakdown per step of its trace."""
    from microbench import decompose_step

    doc = decompose_step(
        "tests.ext_model:make_inplace",
        batch=4,
        device="cpu",
        out=tmp_path,
        replay=False,
        measure_ceilings=False,
        plot=False,
        timed_steps=0,
        profiled_steps=1,
        profiler_warmup_steps=0,
    )
    assert list(doc)[:2] == ["schema", "findings"] and doc["findings"] == []
    rules = FX.rules()["rules"]
    native = cpu_native_bf16(doc["hardware"]["isa_flags"])  # else amp is not checked either (below)
    cpu_rules = [
        rid
        for rid, r in rules.items()
        if "cpu_why" in r or rid in ("dataloader", "allocator") or (rid == "amp" and not native)
    ]
    assert [n["id"] for n in doc["findings_not_checked"]] == cpu_rules
    assert "channels_last" in cpu_rules and ("amp" in cpu_rules) != native
    # dataloader is checked on a CPU where the step loads its batches; this one makes its inputs once
    (dl,) = [n for n in doc["findings_not_checked"] if n["id"] == "dataloader"]
    assert dl["why"] == "a CPU run: " + rules["dataloader"]["cpu_no_loader"]
    # allocator reads the unprofiled steps' system time, and --timed-steps 0 times none
    (al,) = [n for n in doc["findings_not_checked"] if n["id"] == "allocator"]
    assert "--timed-steps 0" in al["why"]
    from microbench.report.findings_report import headline, not_checked_lines

    assert headline(doc).startswith("no finding: no rule") and len(not_checked_lines(doc)) == len(
        {rules[r].get("cpu_why", r) for r in cpu_rules}
    )
    if not native:
        (amp,) = [n for n in doc["findings_not_checked"] if n["id"] == "amp"]
        assert amp["why"] == rules["amp"]["cpu_no_bf16"]
    page = (tmp_path / "report.html").read_text()
    assert "<h2>step breakdown</h2>" in page and "<svg" in page and "cpu_exec" in page and "CPU summary" in page
    saved = json.loads((tmp_path / "decomposition.json").read_text())
    assert saved["files"]["report_html"].endswith("report.html")
    (st,) = saved["trace_analysis"]["steps"]
    assert sum(st["breakdown_us"].values()) == pytest.approx(st["breakdown_span_us"])
    assert st["breakdown_us"]["cpu_exec"] > 0 and st["breakdown_us"]["kernel"] == 0


def test_a_jobs_page_is_its_straggler_ranks_page_with_the_job_first(tmp_path):
    page = tmp_path / "job.html"
    ranks = [str(TRACES / f"a100_torchrec_rank{r}.json.gz") for r in (0, 1)]
    assert trace_cli.main([*ranks, "--readers", "0", "--html", str(page)]) == 0
    text = page.read_text()
    assert text.index("<h2>the job</h2>") < text.index("<h2>findings</h2>")
    assert "straggler: rank 1" in text and "rank 1&#x27;s page" in text and "<svg" in text


def test_a_flag_shared_by_many_layer_rows_is_one_line_with_its_count():
    from rich.console import Console

    from microbench.report.decomposition import flag_groups

    why = "impossible: above the datasheet peak"
    layers = [{"name": f"layer{i}", "phase": "forward", "flags": [why]} for i in range(7)]
    layers.append({"name": "fc", "phase": "backward", "flags": ["noisy: repeats disagree"]})
    groups = flag_groups(layers)
    assert [(t, len(rows)) for t, rows in groups] == [(why, 7), ("noisy: repeats disagree", 1)]
    console = Console(width=120, record=True)
    from microbench.report import decomposition

    for text, rows in groups:  # the lines the report prints (print_decomposition's loop)
        console.print(f"flag ({len(rows)} layer rows): {text}")
    assert console.export_text().count(why) == 1 and decomposition.flag_groups is flag_groups


def test_predicts_range_says_how_often_it_held():
    from microbench.predict.chips import assumptions
    from microbench.report.prediction_report import headline

    v = assumptions()["validation"]
    assert (v["held"], v["checks"]) == (2, 8)
    doc = {
        "source": {"device": "a", "busy_us": 1.0, "kernel_time_us": 1.0, "idle_us": 0.0, "steps": 1},
        "target": {"device": "b", "busy_us": 1.0, "busy_us_low": 0.5, "busy_us_high": 2.0, "idle_us": 0.0},
        "range": {"assumptions": [], "dominant": None, "validation": v},
    }
    assert "the range held the measured time in 2 of 8 checks" in headline(doc)[1]


@pytest.mark.parametrize(
    "name,source",
    [
        ("v100_resnet50_tbplugin_2021schema", None),
        ("h100_bert_small", None),
        ("mi300_bert_small", None),
        ("a100_torchrec_rank0", "a100_sxm4_80gb"),
    ],
)
def test_findings_agree_with_the_numbers_below_them(config, name, source):
    """Each finding's range is ordered and inside the step; its share is its time over the step time the report
    names; its what prints that time; the launch-bound idle share is the step table's (1 - GPU time / window)."""
    doc = analyze_with_findings(TRACES / f"{name}.json.gz", config, source=source)
    step = doc["findings_step_time_us"]
    assert step == pytest.approx(np.mean([st["breakdown_span_us"] for st in doc["steps"]]))
    assert doc["findings"]
    for f in doc["findings"]:
        s = f["saving_us"]
        assert 0 <= s["low"] <= s["expected"] <= s["high"] <= step
        assert f["share"] == pytest.approx(f["time_us"] / step)
        assert f"{f['time_us']:,.0f} us" in f["what"] or f["id"] == "launch_bound"
        if f["id"] == "launch_bound":
            busy = np.mean(
                [
                    1 - sum(st["breakdown_us"][c] for c in ("kernel", "memcpy", "memset")) / st["breakdown_span_us"]
                    for st in doc["steps"]
                ]
            )
            assert f"{busy:.1%}" in f["what"] and f"{f['time_us']:,.0f} us" in f["what"]
            assert s["expected"] <= np.mean([st["idle_us"] for st in doc["steps"]]) + 1e-6


def test_the_host_and_layout_rules_below_their_thresholds_read_the_traces_own_numbers(config, monkeypatch):
    """With every threshold at 0 (findings.toml's are the reasons a rule applies), the dataloader rule on the
    plugin's sample gives the plugin's own DataLoader time (1,186 us per step), the sync rule on BERT the step's
    sync idle, and the channels_last rule the NCHW <-> NHWC transposes' time per step."""
    for module in (FX, R, F):  # each reads the thresholds through its own name
        monkeypatch.setattr(module, "threshold", lambda name: 0.0)
    rule = FX.rules()["rules"]
    plugin = FX.Facts(TraceAnalysis.open(TRACES / "v100_resnet50_tbplugin_2021schema.json.gz", config), config)
    dl = R.rule_dataloader(plugin, rule["dataloader"])
    assert dl["saving_us"]["expected"] == pytest.approx(1186, abs=1) and "num_workers" in dl["fix"]
    assert dl["saving_us"]["low"] == 0  # the workers may take the main process's cores (low_reason)
    cl = R.rule_channels_last(plugin, rule["channels_last"])
    k = plugin.ta.tl.activities
    mask = plugin.name_mask(rule["channels_last"]["pattern"])
    assert cl["time_us"] == pytest.approx(plugin.per_step(np.where(mask, k.dur_us, 0.0)))
    assert cl["saving_us"]["low"] < cl["saving_us"]["high"] and "channels_last" in cl["fix"]
    bert = FX.Facts(TraceAnalysis.open(TRACES / "h100_bert_small.json.gz", config), config)
    sync = R.rule_sync(bert, rule["sync"])
    assert sync["saving_us"]["expected"] == pytest.approx(bert.steps[0]["idle_by_host_us"]["sync"])


@pytest.mark.parametrize(
    "flags, native",
    [
        (["avx2", "fma"], False),
        (["avx2", "fma", "avx512f"], False),
        (["avx512f", "avx512_bf16"], True),
        (["amx_tile", "amx_bf16"], True),
    ],
)
def test_amp_is_not_offered_on_a_cpu_that_has_no_bf16_instructions(flags, native):
    """On a CPU without AVX512-BF16 / AMX-BF16 PyTorch converts bf16 to fp32 and back around every operator (an
    AVX2 EPYC: ResNet-9 15x slower under autocast, docs/findings.md): the amp rule is not checked there, with
    that reason, rather than offered with the estimate tier's bf16 rate (the fp32 one); on a CPU with them it is
    checked (here: on to the chip, which this made-up document has no ceilings for)."""
    doc = {"hardware": {"units": 2, "isa_flags": flags}, "ceilings": [], "layers": []}
    out = R.rule_amp(FX.CpuFacts(None, None, None, doc), FX.rules()["rules"]["amp"])
    assert cpu_native_bf16(flags) is native
    assert (out == FX.rules()["rules"]["amp"]["cpu_no_bf16"]) is not native
    assert native == (out == FX.NO_CHIP)
    # a document from before the ISA flags were recorded is checked as before
    assert FX.CpuFacts(None, None, None, {"hardware": {"units": 2}}).native_bf16


def test_a_cpu_decomposition_finds_bf16_autocast_with_the_models_saving(tmp_path):
    """The CPU as the device (findings/engine.py CpuFacts): an fp32 GEMM-bound step on a CPU with a bf16 rate
    in its cpu_estimate tier (bench.toml) gets the amp finding, its saving the prediction model's over the
    decomposition's own operators (the same dtype_saving as on a GPU), its chip the ceilings' estimate; the same
    step under bf16 autocast has nothing left to move. The measured before/after pairs are in docs/findings.md."""
    from microbench import decompose_step
    from microbench.findings.calibration import widened as widened_range
    from microbench.models.ranges import STEP_RANGE

    fast = {
        "device": "cpu",
        "replay": False,
        "measure_ceilings": False,
        "plot": False,
        "timed_steps": 0,
        "profiled_steps": 1,
        "profiler_warmup_steps": 0,
    }
    doc = decompose_step("tests.findings_models:matmul_mlp", batch=256, out=tmp_path / "fp32", **fast)
    est = {c["dtype"]: c["value"] for c in doc["ceilings"] if c["source"] == "estimate"}
    if not est.get("bf16", 0) > est["fp32"]:
        pytest.skip(f"this CPU's cpu_estimate tier has no bf16 rate above fp32 ({est}): AMP moves bytes only")
    ta = TraceAnalysis.open(tmp_path / "fp32" / "trace.json.gz", None, STEP_RANGE)
    f = FX.CpuFacts(ta, None, None, doc)
    assert f.chip.peak_tflops == est and f.chip.rate("bf16") > f.chip.rate("fp32")
    model_saving = R.dtype_saving(f, "bf16")
    # the CPU's base assumptions scale each GEMM operator's whole time with the rate (never below the bf16
    # datasheet roof) and hold the operators around them; halving those is the range's upper side
    gemm_us = sum(layer["gemm_time_ms"] for layer in doc["layers"]) * 1e3
    rest_us = sum(layer["time_ms"] for layer in doc["layers"]) * 1e3 - gemm_us
    rate_ratio = f.chip.rate("fp32") / f.chip.rate("bf16")
    assert 0 < model_saving["expected"] <= gemm_us * (1 - rate_ratio) * (1 + 1e-9)
    assert model_saving["low"] < model_saving["expected"] < model_saving["high"]
    assert rest_us > 0 and f.working[np.isin(f.work.group, ("gemm_conv",))].all()
    amp = [x for x in doc["findings"] if x["id"] == "amp"]
    if model_saving["expected"] >= FX.threshold("min_saving_share") * f.step_us:
        (x,) = amp
        # the model's range, widened by what verify measured of the rule (data/calibration.toml), never narrowed
        assert x.get("saving_model_us", x["saving_us"]) == pytest.approx(model_saving) and x["per"] == "step"
        widened, how = widened_range("amp", "cpu", model_saving, x.get("acts_on_us", x["time_us"]))
        assert x["saving_us"]["low"] == pytest.approx(widened["low"]) and x["saving_us"]["low"] <= model_saving["low"]
        assert (how is not None) == ("calibration" in x)
        assert "device_type='cpu'" in x["fix"] and x["evidence"]["layer"].startswith("oneDNN")
        assert x["time_us"] == pytest.approx(gemm_us)
    else:
        assert not amp  # a very slow (busy) run: the saving is under 2 % of its step
    after = decompose_step("tests.findings_models:matmul_mlp", batch=256, dtype="bf16", **fast)
    assert not [x for x in after["findings"] if x["id"] == "amp"]


def _cpu_loader_facts(cores: int, threads: int, busy: float | None, step_us: float, wait_us: float):
    """CpuFacts over one made-up profiled step of `step_us` with `wait_us` in enumerate(DataLoader), on `cores`
    cores with `threads` intra-op threads, the timed steps keeping `busy` cores busy."""
    idle = {"sync": 0.0, "runtime": 0.0, "dataloader": wait_us, "cpu_ops": step_us - wait_us, "other": 0.0}
    st = {
        "breakdown_span_us": step_us,
        "idle_by_host_us": idle,
        "kernel_count": 0,
        "breakdown_us": {
            "kernel": 0.0,
            "memcpy": 0.0,
            "memset": 0.0,
            "runtime": 0.0,
            "dataloader": wait_us,
            "cpu_exec": step_us - wait_us,
            "other": 0.0,
        },
    }
    spread = {} if busy is None else {"cpu_busy_cores": busy}
    doc = {
        "hardware": {"units": cores, "extra": {"torch_threads": threads}},
        "summary": {"step_time_spread": spread, "profiled_time_ms": step_us / 1e3},
    }
    f = FX.CpuFacts(None, None, None, doc)
    f.__dict__["steps"] = [st]  # the cached property, as TraceAnalysis.steps would give it
    return f


@pytest.mark.parametrize(
    "cores,threads,busy,expected",
    [
        (2, 1, 1.0, 3000.0),  # a free core: the worker takes all of the loading off the step
        # both cores busy: the rest of the step, on one thread, takes twice as long (7,000 us more): a loss
        (2, 2, 2.0, -4000.0),
        (4, 4, 2.0, 3000.0),  # the rest keeps 2.43 of 4 cores busy: three threads still cover it
        (3, 3, 2.0, 1500.0),  # the rest keeps 2.43 cores busy: on two threads it takes 8,500 us instead of 7,000
    ],
)
def test_the_cpu_dataloader_saving_is_the_loading_less_what_the_rest_loses_with_the_workers_core(
    cores, threads, busy, expected
):
    """findings.toml [rules.dataloader] cpu_model: a 10,000 us step, 3,000 us of it loading; after the fix the step is
    max(rest x used / min(used, threads left), loading), used from the timed steps' busy cores less the loading."""
    f = _cpu_loader_facts(cores, threads, busy, 10000.0, 3000.0)
    x = R.rule_dataloader(f, FX.rules()["rules"]["dataloader"])
    # a loss is shown as one (findings.toml [rules.dataloader] may_slow), not as a saving of 0
    assert x["saving_us"]["expected"] == pytest.approx(expected)
    assert x["saving_us"]["high"] == pytest.approx(3000.0)  # the rest loses nothing: all of the loading goes
    # unprobed: the loading may stay on the step (0), or the expected loss
    assert x["saving_us"]["low"] == pytest.approx(min(0.0, expected))
    assert x["time_us"] == 3000.0 and x["share"] == pytest.approx(0.3) and "num_workers=1" in x["fix"]
    assert ("set_num_threads" in x["fix"]) == (threads > cores - 1)


def _probed(f, step_ms: float, loading_ms: float, handoff_ms: tuple[float, float, float]):
    """`f` with decompose's loader probe (summary.loader_ms): the loading and the one worker's hand-off per batch
    (p20, median, p80), timed without the profiler, in a step timed at `step_ms`."""

    def timing(p20, median, p80):
        return {"median": median, "p20": p20, "p80": p80, "cov": 0.1, "reps": 20, "noise": []}

    f.doc["summary"] |= {
        "step_time_ms": step_ms,
        "loader_ms": {"in_process": timing(loading_ms, loading_ms, loading_ms), "one_worker": timing(*handoff_ms)},
    }
    return f


def test_the_cpu_dataloader_saving_counts_the_workers_hand_off_and_the_unprofiled_loading():
    """With the probe the loading and the step are the unprofiled ones (the trace's 3,000 us of a 10,000 us step
    become 2,000 of 8,000: the profiler's cost per small operator is not saved), and each batch's hand-off from the
    worker stays on the step: expected 2,000 - 600, high less the hand-off's p20, low less its p80."""
    rule = FX.rules()["rules"]["dataloader"]
    f = _probed(_cpu_loader_facts(2, 1, 1.0, 10000.0, 3000.0), 8.0, 2.0, (0.4, 0.6, 0.9))
    x = R.rule_dataloader(f, rule)
    assert x["saving_us"] == pytest.approx({"low": 1100.0, "expected": 1400.0, "high": 1600.0})
    assert x["time_us"] == pytest.approx(2000.0) and x["share"] == pytest.approx(0.25)
    assert "hand each batch over in 600 us" in x["what"] and x["evidence"]["loader_ms"]["one_worker"]["median"] == 0.6
    assert "(25.0% of the 8,000 us step timed without the profiler)" in x["what"]  # not the header's profiled step
    # its evidence is the CPU's own (no GPU idle, no kernels): the ranges and the probe
    from microbench.report.findings_report import evidence_text

    assert evidence_text(x["evidence"]) == (
        "the profiled steps' enumerate(DataLoader) ranges and decompose's loader probe (summary.loader_ms)"
    )
    # the rest may shift within the timed steps' own p20 - p80 (7.6 - 8.8 of 8.0 ms): low with the rest at its p80,
    # high at its p20
    f.doc["summary"]["step_time_spread"] |= {"median": 8.0, "p20": 7.6, "p80": 8.8}
    assert R.rule_dataloader(f, rule)["saving_us"] == pytest.approx({"low": 500.0, "expected": 1400.0, "high": 1900.0})
    assert "noisy" not in R.rule_dataloader(f, rule)["what"]
    f.doc["summary"]["loader_ms"]["one_worker"]["noise"] = ["p20-p80 spread 40% of the median > 25%"]
    assert "noisy: p20-p80 spread 40% of the median > 25%" in R.rule_dataloader(f, rule)["what"]  # the judge's word
    # a hand-off dearer than the loading: the fix would slow the step, and the range says by how much (it was
    # clipped at 0 until verify measured such a loss); the engine makes no finding of it (under min_saving_share)
    f = _probed(_cpu_loader_facts(2, 1, 1.0, 10000.0, 3000.0), 8.0, 2.0, (1.8, 2.1, 2.4))
    assert R.rule_dataloader(f, rule)["saving_us"] == pytest.approx({"low": -400.0, "expected": -100.0, "high": 200.0})


def test_an_unmeasured_cpu_is_taken_at_its_worst_and_one_core_has_no_worker_fix():
    """Without the timed steps' busy cores the rest is taken to use every thread (here both cores: the rest
    on one thread, a loss); a one-core CPU has no core to give a worker: no finding."""
    rule = FX.rules()["rules"]["dataloader"]
    x = R.rule_dataloader(_cpu_loader_facts(2, 2, None, 10000.0, 3000.0), rule)
    assert x["saving_us"]["expected"] == x["saving_us"]["low"] == pytest.approx(-4000.0)  # the rest on one thread
    assert R.rule_dataloader(_cpu_loader_facts(1, 1, 1.0, 10000.0, 3000.0), rule) is None


def test_a_cpu_step_with_a_loader_records_its_loading_and_the_cores_it_keeps_busy(tmp_path):
    """A workload with make_loader (models/loader.py) takes a new batch inside every step: the trace has the
    profiler's enumerate(DataLoader) range in each step, the per-step breakdown counts it as dataloader, the
    rule is checked (not listed as not checked), and the timed steps say how many cores they kept busy."""
    from microbench import decompose_step

    doc = decompose_step(
        "tests.findings_models:digits_loader",
        batch=8,
        device="cpu",
        out=tmp_path,
        replay=False,
        measure_ceilings=False,
        plot=False,
        timed_steps=30,
        profiled_steps=2,
        profiler_warmup_steps=0,
    )
    steps = doc["trace_analysis"]["steps"]
    assert len(steps) == 2 and all(st["breakdown_us"]["dataloader"] > 0 for st in steps)
    assert "dataloader" not in [n["id"] for n in doc["findings_not_checked"]]
    spread = doc["summary"]["step_time_spread"]
    # within its error where the window was long enough for it (roofline.timing._busy_cores: 30 steps of 3 - 6 ms
    # here, two threads; many threads on a fast machine may need a longer window), never more cores than there are
    busy = spread.get("cpu_busy_cores")
    assert busy is None or 0 < busy <= doc["hardware"]["units"] + NoiseSettings().max_busy_error_cores
    probe = doc["summary"]["loader_ms"]  # the loading without the profiler, and one worker's hand-off
    assert probe["in_process"]["median"] > 0 and probe["one_worker"]["median"] > 0
    assert probe["in_process"]["reps"] == probe["one_worker"]["reps"] >= 5
    assert doc["run"]["loader_workers"] == 0


def test_decompose_runs_the_dataloader_fix_to_measure_it(tmp_path):
    """--num-workers N (DecomposeOptions.num_workers): the same workload's DataLoader with N workers, recorded in
    `run`; the step's enumerate(DataLoader) is then the hand-off, and no probe runs (it is for in-process loading)."""
    from microbench import decompose_step

    doc = decompose_step(
        "tests.findings_models:digits_loader",
        batch=8,
        device="cpu",
        out=tmp_path,
        replay=False,
        measure_ceilings=False,
        plot=False,
        timed_steps=3,
        profiled_steps=2,
        profiler_warmup_steps=0,
        num_workers=1,
    )
    assert doc["run"]["loader_workers"] == 1 and "loader_ms" not in doc["summary"]
    assert all(st["breakdown_us"]["dataloader"] > 0 for st in doc["trace_analysis"]["steps"])


def test_the_allocator_saving_is_the_probes_measured_difference():
    """[rules.allocator]: a CPU step that re-faults its freed buffers; its saving is the step timed again with glibc's
    thresholds fixed (summary.allocator_ms): expected the medians' difference, low the default's p20 less the fixed
    p80, high the default's p80 less the fixed p20. No probe (the step does not page-fault) is no finding; no system
    time measured, or not glibc, is a rule not checked, with the reason."""
    rule = FX.rules()["rules"]["allocator"]
    f = _cpu_loader_facts(2, 2, 2.0, 70000.0, 0.0)
    assert R.rule_allocator(f, rule).startswith("a CPU run without its unprofiled steps' system time")
    f.doc["summary"]["step_time_spread"] |= {"sys_ms_per_call": 0.1, "minor_faults_per_call": 3.0}
    assert R.rule_allocator(f, rule) is None
    default = {
        "median": 67.0,
        "p20": 64.0,
        "p80": 70.0,
        "noise": [],
        "sys_ms_per_call": 15.0,
        "minor_faults_per_call": 7000.0,
    }
    fixed = {
        "median": 52.0,
        "p20": 50.0,
        "p80": 55.0,
        "noise": [],
        "sys_ms_per_call": 0.0,
        "minor_faults_per_call": 50.0,
    }
    f.doc["summary"]["allocator_ms"] = {"default": default, "fixed": fixed, "env": "MALLOC_TOP_PAD_=1"}
    x = R.rule_allocator(f, rule)
    assert x["saving_us"] == pytest.approx({"low": 9000.0, "expected": 15000.0, "high": 20000.0})
    assert (
        x["time_us"] == 15000.0 and x["share"] == pytest.approx(15 / 67) and x["fix"].startswith("MALLOC_TOP_PAD_=1 ")
    )
    assert "7,000 page faults a step" in x["what"] and "52,000 us (50 faults)" in x["what"]
    f.doc["summary"]["allocator_ms"] = {"not_run": "not glibc's malloc"}
    assert R.rule_allocator(f, rule) == "a CPU run: not glibc's malloc"


def test_a_gpu_trace_lists_the_allocator_rule_as_not_checked(tmp_path):
    out = tmp_path / "t.json"
    assert trace_cli.main([str(TRACES / "h100_bert_small.json.gz"), "--json", str(out)]) == 0
    why = [n["why"] for n in json.loads(out.read_text())["findings_not_checked"] if n["id"] == "allocator"]
    assert why == [FX.rules()["rules"]["allocator"]["gpu_why"]]


def test_decompose_runs_the_allocator_probe_where_the_step_page_faults(tmp_path, monkeypatch):
    """stage_allocator: where the unprofiled steps spend os_time_share in the OS page-faulting, the step is timed again
    with the thresholds fixed (summary.allocator_ms). A workload given as an object is timed again in this process
    (a note that the thresholds stay fixed); not glibc: the rule is not checked, with why. The probe itself is stood
    in for (it cannot be undone in this process: tests/test_allocator.py runs it in a child)."""
    from microbench import decompose_step, models
    from microbench.decompose import allocator
    from microbench.decompose import pipeline as analysis
    from microbench.roofline.timing import time_calls

    monkeypatch.setattr(analysis, "_page_faulting", lambda t: True)

    monkeypatch.setattr(allocator, "probe", lambda step, dev, settings, noise: time_calls(step, dev, settings))
    kw = dict(
        batch=8,
        device="cpu",
        replay=False,
        measure_ceilings=False,
        plot=False,
        timed_steps=3,
        profiled_steps=1,
        profiler_warmup_steps=0,
    )
    workload = models.as_workload("tests.findings_models:digits_loader")
    doc = decompose_step(workload, out=tmp_path / "a", **kw)
    probe = doc["summary"]["allocator_ms"]
    assert probe["fixed"]["reps"] == 3 and probe["env"] == allocator.env_assignments() and probe["processes"] == 0
    assert any("stay so in a process" in n for n in doc["notes"])
    assert "allocator" not in [n["id"] for n in doc["findings_not_checked"]]  # checked (no saving to name here)
    monkeypatch.setattr(allocator, "probe", lambda *a: None)
    doc = decompose_step(workload, out=tmp_path / "b", **kw)
    assert {n["id"]: n["why"] for n in doc["findings_not_checked"]}["allocator"].startswith("a CPU run: not glibc")


def test_a_named_workload_is_probed_in_child_processes(tmp_path, monkeypatch):
    """A workload given by name is rebuilt in child processes (allocator.child_probe, stood in for here; its own test
    is in tests/test_allocator.py) with the step's batch, dtype, workers, threads and timed steps; this process's
    thresholds are left alone (no note), and a child that failed is the rule's reason for not checking."""
    from microbench import decompose_step
    from microbench.decompose import allocator
    from microbench.decompose import pipeline as analysis

    monkeypatch.setattr(analysis, "_page_faulting", lambda t: True)
    monkeypatch.setattr(allocator, "probe", lambda *a: pytest.fail("the in-process probe ran for a named workload"))
    seen = []
    side = {
        "median": 5.0,
        "p20": 4.0,
        "p80": 6.0,
        "reps": 6,
        "noise": [],
        "per_process": [5.0, 5.0],
        "sys_ms_per_call": 1.0,
        "minor_faults_per_call": 500.0,
    }
    monkeypatch.setattr(
        allocator,
        "child_probe",
        lambda spec, n, timeout_s: seen.append((spec, n)) or {"default": side, "fixed": side, "processes": n},
    )
    kw = dict(
        batch=8,
        device="cpu",
        replay=False,
        measure_ceilings=False,
        plot=False,
        timed_steps=3,
        profiled_steps=1,
        profiler_warmup_steps=0,
        dtype="bf16",
    )
    doc = decompose_step("tests.findings_models:digits_loader", out=tmp_path / "a", **kw)
    ((spec, n),) = seen
    assert n == allocator.processes() and doc["summary"]["allocator_ms"]["processes"] == n
    assert spec | {"threads": 0} == {
        "model": "tests.findings_models:digits_loader",
        "batch": 8,
        "dtype": "bf16",
        "num_workers": None,
        "threads": 0,
        "timed_steps": 3,
        "config": None,
    }
    assert not any("stay so in a process" in note for note in doc["notes"])
    # a CPU decomposition's page is the CPU's: no GPU summary, no GPU-side integrity notes beside its findings
    page = (tmp_path / "a" / "report.html").read_text()
    assert "CPU summary" in page and "layers, their FLOPs and the ceilings" in page and "<svg" in page
    assert "GPU summary" not in page and "no GPU kernel events" not in page
    # the fix measured no faster: checked, and said to be under the threshold (the step's flag is not left open)
    (below,) = [b for b in doc["findings_below_threshold"] if b["id"] == "allocator"]
    assert below["saving_us"]["expected"] == 0.0
    from microbench.report.findings_report import below_line

    assert "allocator 0 us" in below_line(doc)
    monkeypatch.setattr(allocator, "child_probe", lambda *a: "the allocator probe's child process failed (exit 1): X")
    doc = decompose_step("tests.findings_models:digits_loader", out=tmp_path / "b", **kw)
    assert {n["id"]: n["why"] for n in doc["findings_not_checked"]}["allocator"] == (
        "a CPU run: the allocator probe's child process failed (exit 1): X"
    )


def test_each_finding_says_how_often_its_own_rules_range_held_on_its_kind_of_device(capsys):
    """findings.toml [validation.RID]: a finding carries its rule's tally on the report's device (a GPU trace's amp
    finding: none on a GPU, the CPU's tally beside it), printed under it; a rule with no checks says so."""
    from rich.console import Console

    from microbench.report.findings_report import print_findings, validation_line

    v = F.validation_of("amp", "gpu")
    assert (v["checks"], v["held"], v["on"]) == (0, 0, "gpu") and v["elsewhere"]["cpu"]["checks"] > 0
    assert validation_line({"validation": v}).startswith(
        "its range is not yet checked against a fix's measured saving on a GPU (on a CPU "
    )
    c = F.validation_of("allocator", "cpu")
    assert validation_line({"validation": c}).startswith(
        f"its range held the measured saving in {c['held']} of {c['checks']} checks on a CPU"
    )
    # a rule with a derived range quotes verify's record: the checks it was drawn from, the held-out ones after
    a = F.validation_of("amp", "cpu")
    ver = a["verify"]
    assert ver["derived_from"] >= 1 and 0 <= ver["held_out_held"] <= ver["held_out_decidable"]
    assert validation_line({"validation": a}).endswith(
        f"dawnscope verify: the range derived from {ver['derived_from']} checks, then held {ver['held_out_held']} of "
        f"{ver['held_out_decidable']} decidable checks on workloads kept out (docs/findings.md, Calibration)"
    )
    assert "verify" not in F.validation_of("amp", "gpu")  # no GPU checks: nothing to quote
    assert validation_line({"validation": F.validation_of("sync", "gpu")}) == (
        "its range is not yet checked against a fix's measured saving (docs/findings.md)"
    )
    lb_v = F.validation_of("launch_bound", "gpu")
    doc = analyze_with_findings(TRACES / "h100_bert_small.json.gz")
    (lb,) = [x for x in doc["findings"] if x["id"] == "launch_bound"]
    assert lb["validation"]["checks"] == lb_v["checks"] > 0 and not lb_v["elsewhere"]  # public pairs, on a GPU
    console = Console(width=120, force_terminal=False)
    print_findings(console, doc)
    assert (
        f"checked: its range held the measured saving in {lb_v['held']} of {lb_v['checks']} checks on a GPU"
        in capsys.readouterr().out.replace("\n", " ")
    )


def test_the_validation_tallies_add_up_to_the_docs_count():
    """The per-rule tallies of findings.toml add up to docs/findings.md's "Range checks made so far: N, held M"."""
    tallies = [t for v in FX.rules()["validation"].values() for d, t in v.items() if d in ("cpu", "gpu")]
    m = re.search(r"Range checks made so far: (\d+), held (\d+)", (REPO / "docs" / "findings.md").read_text())
    assert (sum(t["checks"] for t in tallies), sum(t["held"] for t in tallies)) == (int(m[1]), int(m[2]))


def test_autocast_halves_only_the_kernels_whose_data_is_fp32():
    """predict/estimate.py autocast_halves (data/prediction.toml [autocast]): an embedding kernel already in
    c10::Half, an integer index permute, a host copy and a collective keep their bytes; a float kernel, one whose op
    ran in fp32, and one whose name says nothing are halved."""
    from microbench.predict.estimate import autocast_halves
    from microbench.predict.kernels import ActivityWork

    rows = [
        (
            "void split_embedding_codegen_forward_unweighted_kernel<c10::Half, c10::Half, float, false, long>(x)",
            "elementwise",
            None,
            False,
        ),
        (
            "void fbgemm_gpu::permute_2D_data_kernel<false, int, int, decltype(nullptr)>(int, int)",
            "copies",
            None,
            False,
        ),
        ("Memcpy HtoD (Pageable -> Device)", "copies", None, False),
        ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)", "communication", None, False),
        ("void permute_pooled_embs_kernel<float>(float const*, long const*)", "elementwise", None, True),
        ("void at::native::vectorized_elementwise_kernel<4, Functor>(int)", "elementwise", "fp32", True),
        ("void at::native::reduce_kernel<512, 1, Op>(Op)", "reduction", "bf16", False),
        ("fused_layer_norm_kernel", "normalization", None, True),
    ]
    n = len(rows)
    w = ActivityWork(
        [r[0] for r in rows],
        np.ones(n),
        np.array([r[1] for r in rows], dtype=object),
        np.array(["x"] * n, dtype=object),
        np.zeros(n),
        np.ones(n),
        np.full(n, None, dtype=object),
        np.zeros(n, dtype=np.int64),
        np.array([r[2] for r in rows], dtype=object),
        np.full(n, None, dtype=object),
        0,
        [],
    )
    assert autocast_halves(w).tolist() == [r[3] for r in rows]


def test_the_amp_finding_says_where_its_saving_is_beyond_the_matrix_kernels():
    """torchrec on an A100: most of its fp32 matrix kernels already run as TF32 on Tensor Cores (the line says how
    much), and the saving splits into the matrix kernels' part and the halved activations of the others, adding up
    to the expected; its FBGEMM Half embedding kernels are not halved, so the saving stays under what is there."""
    doc = analyze_with_findings(TRACES / "a100_torchrec_rank0.json.gz", load_config(), source="a100_sxm4_80gb")
    (amp,) = [x for x in doc["findings"] if x["id"] == "amp"]
    m = re.search(r"\(([\d,]+) us of them already TF32 on Tensor Cores\)", amp["what"])
    assert m and 0 < float(m[1].replace(",", "")) <= amp["time_us"]
    m = re.search(r"of the ([\d,]+) us it saves, ([\d,]+) us are on those kernels and ([\d,]+) us on", amp["what"])
    total, on, around = (float(g.replace(",", "")) for g in m.groups())
    assert total == pytest.approx(amp["saving_us"]["expected"], abs=1) and on + around == pytest.approx(total, abs=2)
    assert on < amp["time_us"]  # TF32 -> bf16 at most doubles the rate: under the matrix time it names


def test_exposed_communication_is_checked_without_steps_and_its_fix_fits_the_collective():
    """[rules.exposed_comm]: without step ranges (the MI350X rocprofv3 capture) the whole trace is checked, and its
    saving, small beside so little computation, is said to be under the threshold rather than 'not checked'; the
    TorchRec rank's exposed all-to-all gets the pipelining fix, not DDP's buckets."""
    doc = analyze_with_findings(TRACES / "mi350x_rocprofv3.json.gz", load_config())
    assert "exposed_comm" not in [n["id"] for n in doc["findings_not_checked"]]
    (below,) = [b for b in doc["findings_below_threshold"] if b["id"] == "exposed_comm"]
    assert 0 < below["saving_us"]["expected"] < 0.02 * doc["findings_step_time_us"]
    doc = analyze_with_findings(TRACES / "a100_torchrec_rank0.json.gz", load_config(), source="a100_sxm4_80gb")
    (comm,) = [x for x in doc["findings"] if x["id"] == "exposed_comm"]
    assert "SendRecv" in comm["evidence"]["kernels"][0]["kernel"] and "all-to-all" in comm["fix"]
    assert "bucket_cap_mb" not in comm["fix"]


def test_the_host_side_findings_trace_their_figures_back_to_the_breakdown(capsys):
    """launch_bound on the H100 BERT trace: its runtime and CPU-operator figures are the breakdown's runtime and
    cpu_exec less the time in a synchronize, and the line says so with that time, so that both add up."""
    doc = analyze_with_findings(TRACES / "h100_bert_small.json.gz")
    (lb,) = [x for x in doc["findings"] if x["id"] == "launch_bound"]
    (st,) = doc["steps"]
    sync = st["idle_by_host_us"]["sync"]
    m = re.search(
        r"runtime calls ([\d,]+), CPU operators ([\d,]+).*less their ([\d,]+) us in a synchronize", lb["what"]
    )
    runtime, cpu_ops, said_sync = (float(g.replace(",", "")) for g in m.groups())
    b = st["breakdown_us"]
    assert said_sync == pytest.approx(sync, abs=1)
    assert runtime + cpu_ops + said_sync == pytest.approx(b["runtime"] + b["cpu_exec"], abs=2)


def test_steps_that_launched_no_gpu_work_stop_the_step_rules_with_that_reason():
    """The Triton example's one ProfilerStep holds no kernel (13 s of host work, its kernel after it): the rules that
    split a step's GPU time are not checked, saying why, rather than checked at 0 us."""
    doc = analyze_with_findings(TRACES / "a100_triton_example.json.gz", load_config())
    why = {n["id"]: n["why"] for n in doc["findings_not_checked"]}
    assert (
        why["launch_bound"].startswith("the one step launched no GPU work") and why["host_bound"] == why["launch_bound"]
    )
    assert not doc["findings"] and not doc["findings_below_threshold"]


@needs_traces
def test_compare_of_two_traces_is_the_comparison_of_their_trace_reports(tmp_path, capsys):
    """`compare h100.json.gz mi300.json.gz` opens each trace as `trace --json` does (the project's bench.toml): the
    same MFU and findings as the two reports give, not `"mfu": null` and the dtype checks skipped."""
    from microbench.compare import cli as compare_cli

    traces = [TRACES / f"{name}.json.gz" for name in ("h100_bert_small", "mi300_bert_small")]
    reports = []
    for t in traces:
        reports.append(tmp_path / f"{t.name}.report.json")
        assert trace_cli.main([str(t), "--json", str(reports[-1])]) == 0
    direct, via_reports = tmp_path / "direct.json", tmp_path / "via.json"
    assert compare_cli.main([*map(str, traces), "--json", str(direct)]) == 0
    assert compare_cli.main([*map(str, reports), "--json", str(via_reports)]) == 0
    capsys.readouterr()
    a, b = json.loads(direct.read_text()), json.loads(via_reports.read_text())
    machines = lambda doc: [{k: m[k] for k in ("tensor_core_share", "mfu")} for m in doc["machines"]]  # noqa: E731
    assert machines(a) == machines(b)
    assert all(m["mfu"] is not None for m in machines(a))  # bench.toml's datasheet: H100 and MI300X peaks


def test_the_amp_rule_reads_each_distinct_kernel_once(config):
    """The findings' prediction work is linear in distinct kernels, not in kernels x scenarios: on the V100 DDP
    rank (4,350 kernels, 79 distinct names) the autocast name rules ran 146,280 times (352,991 regex searches)
    before they were cached per distinct (name, group, dtype). Counted, not timed."""
    from microbench.findings.analysis import TraceAnalysis
    from microbench.predict import estimate

    estimate.autocast_halves_of.cache_clear()
    ta = TraceAnalysis.open(TRACES / "v100_resnet_ddp_rank0.json.gz", config)
    assert ta.findings["findings"] or ta.findings["not_checked"]
    w = FX.Facts(ta, config).work
    distinct = len(set(zip(w.names, w.group, w.op_dtype)))
    assert 0 < estimate.autocast_halves_of.cache_info().misses <= distinct < len(w.names)
    again = estimate.autocast_halves_of.cache_info().misses
    second = TraceAnalysis.open(TRACES / "v100_resnet_ddp_rank0.json.gz", config).findings
    assert second["findings"] == ta.findings["findings"]
    assert estimate.autocast_halves_of.cache_info().misses == again  # a second trace of the same kernels: none
