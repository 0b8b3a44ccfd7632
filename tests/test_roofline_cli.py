"""The main job end to end on this CPU, with a tiny profile."""

from __future__ import annotations

import csv
import json

import pytest

from microbench.roofline import cli as roofline
from microbench.roofline import registry
from microbench.roofline.registry import provider

REQUIRED_ROW_KEYS = {
    "op",
    "shape",
    "dtype",
    "provider",
    "device",
    "time_ms",
    "flops",
    "bytes",
    "tflops",
    "gbps",
    "intensity",
    "ceiling",
    "pct_of_ceiling",
    "bound",
    "tensor_cores",
    "tensor_core_evidence",
    "rel_err",
    "status",
    "reason",
}


@pytest.mark.slow
def test_main_job_writes_everything(tiny_config, tmp_path, capsys):
    out = tmp_path / "out"
    assert roofline.main(["--profile", "tiny", "--config", str(tiny_config), "--out", str(out), "--device", "cpu"]) == 0
    doc = json.loads((out / "results.json").read_text())
    assert {"hardware", "software", "config", "ceilings", "results"} <= set(doc)
    assert doc["hardware"]["kind"] == "cpu" and doc["software"]["torch"]
    rows = doc["results"]
    # 2 gemm shapes x 2 dtypes x (torch, cupy_blas) + 3 conv directions x (torch) = 11 rows
    assert len(rows) == 11
    for r in rows:
        assert REQUIRED_ROW_KEYS <= set(r)
    ok = [r for r in rows if r["provider"] == "torch"]
    assert all(r["status"] == "ok" and r["tflops"] > 0 and r["time_ms"]["median"] > 0 for r in ok)
    assert all(r["time_ms"]["p20"] <= r["time_ms"]["median"] <= r["time_ms"]["p80"] for r in ok)
    assert {r["op"] for r in ok} == {"gemm", "conv2d_fwd", "conv2d_bwd_data", "conv2d_bwd_weight"}
    assert all(
        r["status"] == "skipped" and r["reason"].startswith("unavailable") for r in rows if r["provider"] == "cupy_blas"
    )
    bf16 = next(r for r in ok if r["dtype"] == "bf16")
    assert bf16["tensor_cores"] in ("yes", "no", "unknown") and bf16["tensor_core_evidence"]
    with open(out / "results.csv") as f:
        assert len(list(csv.DictReader(f))) == 11
    for name in ("roofline.png", "roofline.svg"):
        assert (out / name).stat().st_size > 1000
    assert "<svg" in (out / "roofline.svg").read_text()[:2000]
    printed = capsys.readouterr().out
    assert "TFLOP/s" in printed and "ceilings" in printed


def test_interrupted_run_keeps_measured_rows(tiny_config, tmp_path):
    text = tiny_config.read_text().replace('providers = ["torch", "cupy_blas"]', 'providers = ["torch", "t_ctrl_c"]')
    tiny_config.write_text(text)
    out = tmp_path / "out"
    with registry.scoped():

        @provider("gemm", "t_ctrl_c")
        def ctrl_c(a, b, *, allow_tf32=False):
            if a.shape[-2] == 7:  # the profile's second GEMM shape: Ctrl-C arrives while it is being measured
                raise KeyboardInterrupt
            return a @ b

        code = roofline.main(["--profile", "tiny", "--config", str(tiny_config), "--out", str(out), "--no-plot"])
    assert code == 130
    doc = json.loads((out / "results.json").read_text())
    assert doc["interrupted"] is True
    # the first shape in fp32 and bf16, through both providers, was measured before the interrupt
    assert [(r["dtype"], r["provider"], r["status"]) for r in doc["results"]][:4] == [
        ("fp32", "torch", "ok"),
        ("fp32", "t_ctrl_c", "ok"),
        ("bf16", "torch", "ok"),
        ("bf16", "t_ctrl_c", "ok"),
    ]
    assert all(r["tflops"] for r in doc["results"][:4])


def test_help_explains_every_option(capsys):
    with pytest.raises(SystemExit) as e:
        roofline.main(["--help"])
    assert e.value.code == 0
    text = capsys.readouterr().out
    for opt in ("--profile", "--device", "--out", "--config"):
        assert opt in text
