"""The hardware-counter stage of scripts/device-check (devtools.ncucheck), on a CPU with a fake `ncu` on
PATH that replays a real Nsight Compute export (tests/data/nsight/copy_blocked.ncu.csv): the metrics asked are
those the chip lists, the run is at the chip's own clocks, and the export is read by the project's ncu reader
into a verdict per labelled GEMM against the expected one (the fp32 GEMM with TF32 off is the negative control).
The labelled export is the real one with its kernel cloned under the marker and GEMM names, tensor-pipe
metric rows added (values chosen here)."""

from __future__ import annotations

import csv
import io
import os
import stat
import sys

import pytest

from devtools import devicecheck as dc
from devtools import ncucheck

FAKE_NCU = """#!{python}
import csv, io, os, sys
args = sys.argv[1:]
if "--query-metrics" in args:
    sys.stdout.write(open(os.environ["FAKE_NCU_QUERY"]).read())
    sys.exit(int(os.environ.get("FAKE_NCU_QUERY_RC", "0")))
open(os.environ["FAKE_NCU_ARGS"], "a").write("\\n".join(args) + "\\n----\\n")
if os.environ.get("FAKE_NCU_SAY"):
    print(os.environ["FAKE_NCU_SAY"])
    sys.exit(1)
# as ncu profiling `--app --only LABEL`: the export's kernels from that label's marker to the next marker
label = args[args.index("--only") + 1]
rows = list(csv.reader(io.StringIO(open(os.environ["FAKE_NCU_CSV"]).read())))
names = {{r[0]: r[4] for r in rows[1:] if len(r) > 4}}
keep, on = set(), not any(n.startswith("dawnscope_mark_") for n in names.values())
for kid in sorted(names, key=int):
    if names[kid].startswith("dawnscope_mark_"):
        on = names[kid] == "dawnscope_mark_" + label
    if on:
        keep.add(kid)
if keep:
    out = io.StringIO()
    csv.writer(out, quoting=csv.QUOTE_ALL).writerows([rows[0]] + [r for r in rows[1:] if r[0] in keep])
    open(args[args.index("--log-file") + 1], "w").write('==PROF== Connected to process 1\\n' + out.getvalue())
"""

# As `ncu --query-metrics` prints its table on a Hopper chip: base names, then a description.
QUERY = """Device NVIDIA H200 (GH100)
---------------------------------------------- ---------------------------------------------------------
Metric Name                                    Metric Description
---------------------------------------------- ---------------------------------------------------------
dram__bytes                                    # of bytes accessed in DRAM
gpu__time_duration                             total duration in nanoseconds
sm__inst_executed_pipe_tensor_op_gmma          # of warp instructions executed by the tensor pipe (wgmma)
sm__inst_executed_pipe_tensor_op_hmma          # of warp instructions executed by the tensor pipe (HMMA)
sm__pipe_tensor_op_gmma_cycles_active          # of cycles where the tensor pipe was active (wgmma)
sm__pipe_tensor_op_hmma_cycles_active          # of cycles where the tensor pipe was active (HMMA)
smsp__sass_thread_inst_executed_op_ffma_pred_on # of FFMA thread instructions executed
"""


@pytest.fixture
def real_export(shared_dir):
    path = shared_dir / "nsight" / "copy_blocked.ncu.csv"
    if not path.is_file():
        pytest.skip(f"{path} is not here")
    return path


@pytest.fixture
def fake_ncu(tmp_path, monkeypatch):
    """`ncu` on PATH: answers the query with QUERY and 'profiles' by copying FAKE_NCU_CSV to --log-file."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    ncu = bin_dir / "ncu"
    ncu.write_text(FAKE_NCU.format(python=sys.executable))
    ncu.chmod(ncu.stat().st_mode | stat.S_IEXEC)
    (tmp_path / "query.txt").write_text(QUERY)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_NCU_QUERY", str(tmp_path / "query.txt"))
    monkeypatch.setenv("FAKE_NCU_ARGS", str(tmp_path / "args.txt"))
    return tmp_path


def _labelled_export(real, out, gemms: list[tuple[str, str, dict[str, str]]]):
    """The real export's kernel cloned as marker + GEMM per label, each GEMM with `metrics` rows added."""
    rows = list(csv.reader(io.StringIO(real.read_text())))
    header, body = rows[0], [r for r in rows[1:] if r and r[0] == "0"]
    col = {c: i for i, c in enumerate(header)}
    out_rows, kid = [header], 0

    def clone(name, extra):
        nonlocal kid
        for r in body:
            out_rows.append(
                [str(kid) if i == col["ID"] else name if i == col["Kernel Name"] else v for i, v in enumerate(r)]
            )
        for metric, value in extra.items():
            r = [""] * len(header)
            r[col["ID"]], r[col["Kernel Name"]] = str(kid), name
            r[col["Section Name"]], r[col["Metric Name"]], r[col["Metric Value"]] = (
                "Command line profiler metrics",
                metric,
                value,
            )
            out_rows.append(r)
        kid += 1

    for label, kernel, metrics in gemms:
        clone(f"dawnscope_mark_{label}", {})
        clone(kernel, metrics)
    buf = io.StringIO()
    csv.writer(buf, quoting=csv.QUOTE_ALL).writerows(out_rows)
    out.write_text(buf.getvalue())
    return out


GEMMS = [
    (
        "cublas_bf16",
        "nvjet_hsh_256x128_64x4_1x2_h_bz_coopA_NNT",
        {"sm__inst_executed_pipe_tensor_op_gmma.sum": "1,048,576", "sm__inst_executed_pipe_tensor_op_hmma.sum": "0"},
    ),
    (
        "cublas_fp32_no_tf32",
        "sm90_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize128x128x8_stage3_warpsize2x2x1_ffma_aligna4",
        {"sm__inst_executed_pipe_tensor_op_gmma.sum": "0", "sm__inst_executed_pipe_tensor_op_hmma.sum": "0"},
    ),
    (
        "triton_bf16",
        "_gemm_kernel",
        {"sm__inst_executed_pipe_tensor_op_gmma.sum": "0", "sm__inst_executed_pipe_tensor_op_hmma.sum": "0"},
    ),
]


def test_counter_stage_with_a_fake_ncu_replaying_a_real_export(fake_ncu, real_export, tmp_path, monkeypatch, capsys):
    export = _labelled_export(real_export, tmp_path / "labelled.csv", GEMMS)
    monkeypatch.setenv("FAKE_NCU_CSV", str(export))
    out = tmp_path / "ncu.csv"
    assert ncucheck.main([str(out)]) == 1  # two of the five GEMMs are not in the export: not profiled
    runs = [r.strip("\n").split("\n") for r in (tmp_path / "args.txt").read_text().split("----") if r.strip()]
    assert [r[r.index("--only") + 1] for r in runs] == [g["label"] for g in ncucheck.settings()["gemm"]]
    args = runs[0]  # one ncu run per GEMM, each ending the program after a few kernels
    assert args[args.index("--launch-count") + 1] == "6" and args[args.index("--kill") + 1] == "yes"
    assert args[args.index("--clock-control") + 1] == "none"
    assert args[args.index("--profile-from-start") + 1] == "off"
    asked = args[args.index("--metrics") + 1].split(",")
    # only what the chip lists: Hopper's gmma and hmma counters, none of Blackwell's tcgen05 names
    assert "sm__inst_executed_pipe_tensor_op_gmma.sum" in asked
    assert "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active" in asked
    assert not any(m.startswith(("sm__pipe_tc_", "sm__pipe_tensor_cycles")) for m in asked)
    assert args[-4:] == ["devtools.ncucheck", "--app", "--only", "cublas_bf16"]  # the profiled program

    rows = ncucheck.evidence(out)
    got = {r["label"]: (r["counters_say"], r["as_expected"]) for r in rows}
    # markers are not GEMMs; the Triton clone carries zero tensor counts: the counters say no, unexpected
    assert got == {"cublas_bf16": ("yes", True), "cublas_fp32_no_tf32": ("no", True), "triton_bf16": ("no", False)}
    bf16 = next(r for r in rows if r["label"] == "cublas_bf16")
    assert bf16["duration_ns"] == pytest.approx(21_058_944)  # the real export's Duration row
    assert bf16["tensor_metrics"]["sm__inst_executed_pipe_tensor_op_gmma.sum"] == 1_048_576
    text = capsys.readouterr().out
    assert "sm__inst_executed_pipe_tensor_op_gmma" in text.splitlines()[0]  # what the chip offers, logged
    assert "UNEXPECTED" in text and "as expected" in text


def test_the_real_export_unlabelled_is_read_and_said_so(fake_ncu, real_export, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_NCU_CSV", str(real_export))
    out = tmp_path / "ncu.csv"
    assert ncucheck.main([str(out)]) == 0
    rows = ncucheck.evidence(out)
    # each of the five runs profiled the same unmarked kernel: five kernels, none known by a label
    assert [(r["label"], r["expected"], r["as_expected"]) for r in rows] == [("before any marker", None, None)] * 5
    assert rows[0]["kernel"].startswith("copy_blocked")


def test_summary_carries_the_counter_evidence(real_export, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    _labelled_export(real_export, out / "ncu.csv", GEMMS[:2])
    summary = dc.write_summary(out, [], dry=True, deadline_s=1, elapsed_s=0).read_text()
    assert "hardware counters (ncu.csv" in summary
    assert [ln.split()[0] for ln in summary.splitlines() if "as expected" in ln] == [
        "cublas_bf16",
        "cublas_fp32_no_tf32",
    ]


def test_no_ncu_is_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("CUDA_HOME", str(tmp_path))
    assert ncucheck.main([str(tmp_path / "ncu.csv")]) == 1
    assert ncucheck.main([str(tmp_path / "ncu.csv"), "--dry-run"]) == 0  # a dry run has nothing to profile
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and err[0].startswith("ncucheck: no Nsight Compute")


def test_metrics_asked_are_those_the_chip_lists():
    cfg = ncucheck.settings()
    listed = ncucheck.listed_metrics(QUERY)
    assert "sm__pipe_tensor_op_hmma_cycles_active" in listed and "Metric" not in listed
    asked, offered = ncucheck.choose_metrics(listed, cfg)
    assert all(m.split(".")[0] in listed for m in asked)
    assert "sm__inst_executed_pipe_tensor_op_gmma" in offered
    hopper, _ = ncucheck.choose_metrics(set(), cfg, "sm_90")  # the query failed: Hopper's candidates only
    assert "sm__inst_executed_pipe_tensor_op_gmma.sum" in hopper
    assert not any(
        m.startswith(("sm__pipe_tc_", "sm__pipe_tensor_cycles", "sm__inst_executed_pipe_tensor.")) for m in hopper
    )
    assert ncucheck.choose_metrics(set(), cfg, None)[0] == cfg["always"]  # an unknown chip: no tensor guess
    assert [g["label"] for g in cfg["gemm"]][-1] == "cupy_wgmma_bf16"  # the unverified kernel last
    assert {g["label"]: g["expect"] for g in cfg["gemm"]}["cublas_fp32_no_tf32"] == "no"
