"""Self-contained HTML reports: written by the roofline command and by compare, nothing fetched from anywhere,
and they render: headless Chromium loads each page and takes a screenshot that is not blank."""

from __future__ import annotations

import base64
import io
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from microbench.compare import cli as compare_cli
from microbench.roofline import cli as roofline

TINY_CONFIG = """
[timing]
warmup_ms = 1.0
rep_ms = 5.0
min_reps = 2
max_reps = 3
input_sets = 1

[tolerance]
fp32 = 1e-5
tf32 = 5e-3
fp16 = 5e-3
bf16 = 3e-2
fp8_e4m3 = 1.5e-1

[ceilings.cpu]
gemm_sizes = { fp32 = [64] }
copy_mb = 1

[profiles.tiny]
description = "one small GEMM, for the report tests"
providers = ["torch"]

[[profiles.tiny.gemm]]
dtypes = ["fp32"]
shapes = [{ m = 64, n = 64, k = 64 }, { m = 33, n = 7, k = 5 }]

[devices.h100_sxm5]
name = "NVIDIA H100 SXM5"
match = ["H100"]
fp32 = 67.0

[[cpu_estimate.tier]]
requires = []
fp32 = 8
"""

EXTERNAL = re.compile(r"https?://|//[a-z0-9.-]+\.[a-z]{2,}/|<script|<link|@import|url\(", re.IGNORECASE)


def chromium() -> str | None:
    return next((p for n in ("chromium", "chromium-browser", "google-chrome") if (p := shutil.which(n))), None)


@pytest.fixture(scope="module")
def roofline_out(tmp_path_factory) -> Path:
    """A real (tiny) roofline run on this CPU: results.json, the plot and report.html."""
    d = tmp_path_factory.mktemp("roofline")
    cfg = d / "bench.toml"
    cfg.write_text(TINY_CONFIG)
    assert roofline.main(["--profile", "tiny", "--device", "cpu", "--out", str(d / "out"), "--config", str(cfg)]) == 0
    return d / "out"


def assert_self_contained(text: str) -> None:
    assert text.startswith("<!DOCTYPE html>")
    assert not EXTERNAL.search(text), EXTERNAL.search(text).group(0)
    for src in re.findall(r'(?:src|href)="([^"]*)"', text):
        assert src.startswith("data:"), src


def test_roofline_writes_a_self_contained_report(roofline_out):
    import matplotlib.image as mpimg

    text = (roofline_out / "report.html").read_text()
    assert_self_contained(text)
    assert "64x64x64" in text and "33x7x5" in text  # the results table
    assert "measured fp32" in text  # the ceilings table
    imgs = re.findall(r'src="data:image/png;base64,([^"]+)"', text)
    assert len(imgs) == 1
    png = mpimg.imread(io.BytesIO(base64.b64decode(imgs[0])), format="png")
    assert png.shape[0] > 300 and png.shape[1] > 500


def test_strings_from_files_are_escaped(tmp_path):
    from microbench.report.html import results_html

    doc = {
        "hardware": {"name": "<script>alert(1)</script>", "kind": "cpu"},
        "software": {},
        "config": {},
        "results": [
            {
                "op": "gemm",
                "shape": "<b>x</b>",
                "dtype": "fp32",
                "provider": "p",
                "status": "ok",
                "reason": "",
                "flags": [],
            }
        ],
        "ceilings": [],
        "notes": ["a & b"],
    }
    text = results_html(doc, plot=False)
    assert "<script>" not in text and "&lt;script&gt;" in text and "&lt;b&gt;x&lt;/b&gt;" in text
    assert "a &amp; b" in text


def screenshot(html: Path, tmp: Path) -> Path:
    exe = chromium()
    png = tmp / (html.stem + ".png")
    cmd = [
        exe,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={tmp / 'chromium-profile'}",
        f"--screenshot={png}",
        "--window-size=1400,1000",
        html.resolve().as_uri(),
    ]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and png.is_file(), r.stderr[-2000:]
    return png


def assert_not_blank(png: Path) -> None:
    import matplotlib.image as mpimg

    img = mpimg.imread(png)[..., :3]
    assert img.shape[:2] == (1000, 1400)
    ink = (img < 0.9).any(axis=-1)  # pixels that are not (near) white
    assert ink.mean() > 0.01, f"only {ink.mean():.2%} of the screenshot is not white"
    colour = img.max(axis=-1) - img.min(axis=-1) > 0.25  # the plot's coloured roofs and points, red flags
    assert colour.any()


@pytest.mark.skipif(chromium() is None, reason="chromium not installed (Debian: apt-get install -y chromium)")
def test_reports_render_in_headless_chromium(roofline_out, tmp_path):
    assert_not_blank(screenshot(roofline_out / "report.html", tmp_path))

    # The comparison page: this run against a copy claiming another machine and torch.
    import json

    doc = json.loads((roofline_out / "results.json").read_text())
    doc["hardware"]["name"] = "NVIDIA H100 80GB HBM3"
    doc["software"]["torch"] = "2.9.1"
    other = tmp_path / "other.json"
    other.write_text(json.dumps(doc))
    page = tmp_path / "compare.html"
    assert compare_cli.main([str(roofline_out / "results.json"), str(other), "--html", str(page)]) == 0
    assert_self_contained(page.read_text())
    assert "torch versions differ" in page.read_text()
    assert_not_blank(screenshot(page, tmp_path))


def test_no_roofline_says_why_from_what_the_trace_has(cfg):
    """'no roofline (record shapes)' was printed for a trace that recorded shapes: the reason now comes from the
    trace (no operators, no shapes, or shapes whose operators have no FLOP count)."""
    from microbench.report.trace_html import roofline_html

    from .conftest import DATA, SLICE, analyze

    with_shapes = roofline_html(analyze(SLICE, cfg))
    assert "record_shapes" not in with_shapes and "shapes were recorded" in with_shapes
    without = roofline_html(analyze(DATA / "v100_resnet_ddp_2023schema_slice.json", cfg))
    assert "recorded without record_shapes=True" in without


def test_a_cpu_only_trace_s_host_time_is_not_called_gpu_idle(cfg):
    """A CPU process's trace (HTA's cpu_only rank): its CPU operators' time sat under `idle: CPU ops`; with no GPU
    activity in the trace the host's columns are its own work. A GPU trace keeps `idle: ...`, one-off set-up included."""
    from microbench.report.trace_html import steps_html

    from .conftest import TRACES, analyze_with_findings

    cpu = steps_html(analyze_with_findings(TRACES / "hta_cpu_only_rank34.json.gz", cfg))
    assert "host: CPU ops" in cpu and "idle: CPU ops" not in cpu
    gpu = steps_html(analyze_with_findings(TRACES / "h100_bert_small.json.gz", cfg))
    assert "idle: CPU ops" in gpu and "idle: one-off set-up" in gpu and "host: " not in gpu
