"""The Nsight Compute stage with the fake `ncu` of tests/test_device_check_ncu.py, which models
the documented behaviour: it writes its --log-file export only when it exits (a run killed before that leaves
nothing), profiles the kernels of the one GEMM `--app --only LABEL` runs, prints ERR_NVGPUCTRPERM when the
driver restricts the counters, and its `--query-metrics` may fail. The exports are the real
tests/data/nsight/copy_blocked.ncu.csv cloned under marker and GEMM names."""

from __future__ import annotations

import os
import re

import pytest

from devtools import ncucheck

from .test_device_check_ncu import GEMMS, _labelled_export, fake_ncu, real_export  # noqa: F401 - fixtures

HANG = """
if label == os.environ.get("FAKE_NCU_HANG"):
    import time
    time.sleep(120)  # the export is written at exit: never
"""


@pytest.fixture
def hanging_ncu(fake_ncu):
    ncu = fake_ncu / "bin" / "ncu"
    text = ncu.read_text()
    marker = "rows = list(csv.reader("
    ncu.write_text(text.replace(marker, HANG.strip() + "\n" + marker, 1))
    return fake_ncu


def test_a_gemm_that_hangs_under_ncu_costs_its_share_and_keeps_the_others(
    hanging_ncu, real_export, tmp_path, monkeypatch, capsys
):
    export = _labelled_export(real_export, tmp_path / "labelled.csv", GEMMS)
    monkeypatch.setenv("FAKE_NCU_CSV", str(export))
    monkeypatch.setenv("FAKE_NCU_HANG", "cublas_fp32_no_tf32")
    out = tmp_path / "ncu.csv"
    assert ncucheck.main([str(out), "--deadline-s", "30"]) == 1
    text = capsys.readouterr().out
    assert re.search(r"cublas_fp32_no_tf32: no export \(stopped at its \d+ s share\)", text)
    got = {r["label"]: r["as_expected"] for r in ncucheck.evidence(out)}
    assert got == {"cublas_bf16": True, "triton_bf16": False}  # the runs before and after the hang both kept


def test_a_failed_query_keeps_its_message_and_asks_only_this_chips_metrics(
    fake_ncu, real_export, tmp_path, monkeypatch, capsys
):
    (tmp_path / "query.txt").write_text("==ERROR== Failed to initialize the metric library\n")
    monkeypatch.setenv("FAKE_NCU_QUERY_RC", "1")
    monkeypatch.setenv("FAKE_NCU_CSV", str(_labelled_export(real_export, tmp_path / "l.csv", GEMMS[:1])))
    monkeypatch.setattr(ncucheck, "chip_arch", lambda: "sm_90")
    ncucheck.main([str(tmp_path / "ncu.csv"), "--deadline-s", "60"])
    text = capsys.readouterr().out
    assert "ncu --query-metrics exit 1: ==ERROR== Failed to initialize the metric library" in text
    args = (tmp_path / "args.txt").read_text().split("----")[0].strip().split("\n")
    asked = args[args.index("--metrics") + 1].split(",")
    assert "sm__inst_executed_pipe_tensor_op_gmma.sum" in asked
    assert not any(m.startswith(("sm__pipe_tc_", "sm__pipe_tensor_cycles")) for m in asked)  # Blackwell's


def test_counters_not_permitted_are_said_plainly_and_end_the_stage(fake_ncu, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(
        "FAKE_NCU_SAY",
        "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access "
        "NVIDIA GPU Performance Counters on the target device 0.",
    )
    assert ncucheck.main([str(tmp_path / "ncu.csv"), "--deadline-s", "60"]) == 1
    err = capsys.readouterr().err
    assert "ERR_NVGPUCTRPERM: this user may not read the GPU's performance counters" in err
    assert (tmp_path / "args.txt").read_text().count("----") == 1  # no second run after it


def test_the_wgmma_gemms_transpose_copy_is_its_helper_not_the_gemm(real_export, tmp_path):
    gmma = {"sm__inst_executed_pipe_tensor_op_gmma.sum": "65,536", "sm__inst_executed_pipe_tensor_op_hmma.sum": "0"}
    none = {"sm__inst_executed_pipe_tensor_op_gmma.sum": "0", "sm__inst_executed_pipe_tensor_op_hmma.sum": "0"}
    path = _labelled_export(real_export, tmp_path / "ncu.csv", [("cupy_wgmma_bf16", "transpose_copy_kernel", none)])
    # the GEMM kernel follows the copy under the same marker
    lines = path.read_text().splitlines()
    extra = _labelled_export(
        real_export, tmp_path / "g.csv", [("cupy_wgmma_bf16", "void gemm_wgmma<__nv_bfloat16, 128, 256, 4>(int)", gmma)]
    )
    gemm_rows = [
        ln.replace('"0","', '"2","', 1).replace('"1","', '"3","', 1) for ln in extra.read_text().splitlines()[1:]
    ]
    path.write_text("\n".join(lines + [r for r in gemm_rows if "gemm_wgmma" in r]) + "\n")
    rows = {r["label"]: (r["counters_say"], r["expected"], r["as_expected"]) for r in ncucheck.evidence(path)}
    assert rows == {"cupy_wgmma_bf16 (helper)": ("no", None, None), "cupy_wgmma_bf16": ("yes", "yes", True)}


def test_ncu_is_found_in_the_standalone_install_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "nocuda"))
    for version in ("2024.3.1", "2025.1.0", "2023.2.2"):
        (tmp_path / "opt" / version).mkdir(parents=True)
        (tmp_path / "opt" / version / "ncu").write_text("")
    monkeypatch.setattr(ncucheck, "NCU_DIRS", (str(tmp_path / "opt"),))
    if os.path.exists("/usr/local/cuda/bin/ncu"):
        pytest.skip("this machine has /usr/local/cuda/bin/ncu, found first")
    assert ncucheck.find_ncu() == str(tmp_path / "opt" / "2025.1.0" / "ncu")
