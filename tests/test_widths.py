"""Every command's table where it is read: on a terminal at its width; piped, at 120 columns or COLUMNS. Nothing
here runs a measurement: the tables are drawn from small documents, real traces and real leaderboard files."""

from __future__ import annotations

import json

import pytest

from microbench.report.roofline_report import wide_console

from .conftest import REPO, SLICE, needs_shared


def _lines(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if ln.strip()]


def _fits(text: str, width: int = 120) -> None:
    widest = max(_lines(text), key=len)
    assert len(widest) <= width, f"{len(widest)} columns: {widest!r}"


def test_piped_output_is_120_columns_and_honours_COLUMNS(monkeypatch, capsys):
    monkeypatch.delenv("COLUMNS", raising=False)
    assert wide_console().width == 120  # capsys: stdout is not a terminal
    monkeypatch.setenv("COLUMNS", "100")
    assert wide_console().width == 100 and wide_console(stderr=True).width == 100


def _rows_doc(provider_rows):
    from microbench.core.ops.work import Work
    from microbench.core.results import KernelCaseRow
    from microbench.core.stats import NoiseSettings, summarize
    from microbench.roofline.ceilings import COMPUTE, MEMORY, Ceiling, Ceilings
    from microbench.roofline.judge import judge

    ceil = Ceilings(
        [
            Ceiling("measured fp32", COMPUTE, "fp32", 1.0, "TFLOP/s", "measured", "", (0.95, 1.05)),
            Ceiling("measured memory", MEMORY, None, 1000.0, "GB/s", "measured", "", (950.0, 1050.0)),
        ]
    )
    rows = []
    for provider, status in provider_rows:
        for shape in ("1000x1000x1000", "n8 c64 56x56 k256 1x1 s1 p0"):
            r = KernelCaseRow(
                op="gemm",
                shape=shape,
                dtype="fp32",
                provider=provider,
                device="cpu",
                baseline=provider == "torch",
                status=status,
                reason="" if status == "ok" else "unavailable: needs a CUDA or ROCm GPU",
            )
            if status == "ok":
                judge(r, Work(2 * 10**9, 12 * 10**6), summarize([4.0, 4.01, 3.99, 4.0, 4.02], NoiseSettings()), ceil)
            rows.append(r)
    return {
        "hardware": {
            "kind": "cpu",
            "name": "test cpu",
            "arch": "x86_64",
            "units": 2,
            "memory_gib": 1.0,
            "clock_mhz": 2000.0,
            "isa_flags": [],
        },
        "software": {"torch": "t", "triton": "t", "python": "3"},
        "config": {"profile": "quick"},
        "ceilings": [c.as_dict() for c in ceil.items],
        "notes": [],
        "conditions": {"busy": False},
        "schema": "dawnscope.results/1",
        "results": [r.as_dict() for r in rows],
    }


def test_roofline_groups_providers_that_cannot_run(monkeypatch, capsys):
    """On a CPU most of the quick profile's rows were GPU providers that cannot run: one line per provider."""
    from microbench.report.roofline_report import print_report

    monkeypatch.delenv("COLUMNS", raising=False)
    doc = _rows_doc([("torch", "ok"), ("triton", "skipped"), ("cupy_blas", "skipped")])
    print_report(doc)
    out = capsys.readouterr().out
    _fits(out)
    table = [ln for ln in _lines(out) if "1000x1000x1000" in ln]
    assert len(table) == 1 and "torch" in table[0]  # the skipped providers' rows are not in the table
    assert "not in the table: the 4 rows of triton, cupy_blas" in out.replace("\n", " ")
    assert "triton skipped: unavailable: needs a CUDA or ROCm GPU" in out


def test_compare_fits_120_columns_piped(monkeypatch, capsys, tmp_path):
    from microbench.report.compare import compare, print_compare

    monkeypatch.delenv("COLUMNS", raising=False)
    files = []
    for name in ("a machine with a long name, 2 sockets", "another machine with an even longer name"):
        doc = _rows_doc([("torch", "ok"), ("triton_gemm_persistent", "ok")])
        doc["hardware"]["name"] = name
        path = tmp_path / f"{len(files)}.json"
        path.write_text(json.dumps(doc))
        files.append(path)
    print_compare(compare(files))
    out = capsys.readouterr().out
    _fits(out)
    assert "n8 c64 56x56 k256 1x1 s1 p0" in out


def test_trace_fits_120_columns_piped(monkeypatch, capsys):
    from microbench.trace import cli as trace

    monkeypatch.delenv("COLUMNS", raising=False)
    assert trace.main([str(SLICE)]) == 0
    _fits(capsys.readouterr().out)


def test_comm_tables_fit_120_columns_piped(monkeypatch, capsys):
    from microbench.comm import cli as comm
    from microbench.comm.collectives import to_rows
    from microbench.comm.report import print_collectives

    monkeypatch.delenv("COLUMNS", raising=False)
    assert (
        comm.main(
            [
                "scale",
                "--step-ms",
                "100",
                "--gradient-bytes",
                "100000000",
                "--workers",
                "1,8,128",
                "--fabric",
                "v100_nvlink",
                "--paper",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    _fits(out)
    rec = {
        "op": "allreduce",
        "requested_bytes": 2**24,
        "message_bytes": 2**24,
        "elements": 2**22,
        "nranks": 2,
        "samples_ms": [1.0, 1.0, 1.01, 0.99, 1.0],
        "wrong": 0,
    }
    doc = {
        "comm": {"backend": "gloo", "nranks": 2},
        "results": [r.as_dict() for r in to_rows([rec], "cpu", "gloo")],
        "hardware": {
            "kind": "cpu",
            "name": "a long CPU name " * 4,
            "arch": "x86_64",
            "units": 2,
            "memory_gib": 1.0,
            "clock_mhz": None,
            "isa_flags": ["avx2", "avx512f", "amx_bf16"],
        },
        "software": {"torch": "t", "triton": "t", "python": "3"},
    }
    print_collectives(doc)
    out = capsys.readouterr().out
    _fits(out)
    assert "allreduce" in out and "16777216" in out


def test_inspect_table_fits_120_columns_piped(monkeypatch, capsys):
    """inspect's table (records as the compiles give them: an sm_90 and a gfx942 one with a long fallback note) at
    120 columns: kernel, config, target, the instruction count and the verdict are never cut."""
    from microbench.inspect.cli import _table
    from microbench.roofline.sass import StaticRecord

    monkeypatch.delenv("COLUMNS", raising=False)
    common = dict(
        default=True,
        wants_wgmma=False,
        hmma=0,
        hgmma=0,
        qgmma=0,
        imma=0,
        ffma=12,
        registers=168,
        shared_bytes=0,
        dynamic_shared_bytes=98304,
        stack_bytes=0,
        local_bytes=0,
        spill_stores=0,
        spill_loads=0,
        tensor_core_instructions=64,
    )
    recs = [
        StaticRecord(
            "triton_gemm",
            "BM128 BN256 BK64 w8 s3 GM8",
            "sm_90",
            "bf16",
            hgmma=64,
            matrix_instructions=64,
            matrix_instruction_kinds=["HGMMA.64x256x16.F32.BF16"],
            matrix_per_k_step=4,
            matrix_cores="yes",
            occupancy=8,
            occupancy_unit="warps/SM",
            **{k: v for k, v in common.items() if k != "hgmma"},
        ),
        StaticRecord(
            "triton_gemm",
            "BM256 BN256 BK64 w8 s2 GM8",
            "gfx942",
            "fp8_e4m3",
            matrix_instructions=128,
            matrix_instruction_kinds=["v_mfma_f32_32x32x8_f16"],
            matrix_per_k_step=8,
            matrix_cores="fallback",
            fallback="OCP fp8 (fp8e4nv) is not gfx942's native flavour: upcast to f16, run at the fp16 matrix rate",
            vgprs=256,
            agprs=128,
            sgprs=80,
            lds_bytes=65536,
            occupancy=2,
            occupancy_unit="waves/SIMD",
            **common,
        ),
    ]
    wide_console().print(_table(recs, width=120))
    text = capsys.readouterr().out
    _fits(text)
    for cell in ("triton_gemm", "BM128 BN256 BK64", "sm_90", "gfx942", "fallback", "yes"):
        assert cell in text, cell


@needs_shared("dawnbench")
def test_tta_leaderboard_keeps_rank_and_runs_piped(monkeypatch, capsys, shared_dir):
    from microbench.tta import leaderboard
    from microbench.tta.report import print_leaderboard

    monkeypatch.delenv("COLUMNS", raising=False)
    tsvs = sorted((shared_dir / "dawnbench").rglob("*.tsv"))[:2]
    if not tsvs:
        pytest.skip("no DAWNBench files in the shared folder")
    print_leaderboard(leaderboard.build(tsvs))
    out = capsys.readouterr().out
    _fits(out)
    header = next(ln for ln in _lines(out) if "time-to-accuracy" in ln)
    assert header.lstrip().startswith("#") and "runs" in header
    times = [ln for ln in _lines(out) if ln.lstrip()[:1].isdigit()]
    assert times and not any("0:0…" in ln or ":…" in ln for ln in times)


# ---- quiet and alive -----------------------------------------------------------------------------------------
def test_heartbeat_prints_each_stage_and_keeps_long_work_alive():
    import io
    import time

    from microbench.core.args import Heartbeat

    out = io.StringIO()
    with Heartbeat("decompose resnet9", every_s=0.05, stream=out, force=True) as beat:
        beat.update("record")
        deadline = time.monotonic() + 30  # a loaded machine may be slow to run the thread: wait for it, no bound
        while "(still working)" not in out.getvalue() and time.monotonic() < deadline:
            time.sleep(0.02)
    lines = out.getvalue().splitlines()
    assert lines[0].endswith("] record")  # nothing before the first stage: an error at once stays one line
    assert any(line.endswith("] record (still working)") for line in lines[1:])


def test_heartbeat_is_silent_on_a_terminal():
    import io

    from microbench.core.args import Heartbeat

    class Tty(io.StringIO):
        def isatty(self):
            return True

    out = Tty()
    with Heartbeat("x", every_s=0.01, stream=out) as beat:
        beat.update("y")
    assert out.getvalue() == ""


def test_no_kineto_usdt_lines_from_our_profiling():
    """torch.profiler's Kineto writes `USDT:... profiler_start` lines to stderr; the commands' profiling does not."""
    import os
    import subprocess
    import sys

    code = (
        "import torch\nfrom microbench.core.device import quiet_profiler\nquiet_profiler()\n"
        "from torch.profiler import profile\nwith profile():\n    torch.mm(torch.ones(8, 8), torch.ones(8, 8))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "KINETO_LOG_LEVEL"}
    env["PYTHONPATH"] = str(REPO)
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert res.returncode == 0, res.stderr
    assert "USDT" not in res.stderr and "STAGE" not in res.stderr


def test_roof_labels_never_overlap():
    from microbench.report.roofline_report import LABEL_PT, label_lifts

    values = [1.30, 1.33, 0.30, 0.0042, 1.31]  # bf16 measured / estimate / datasheet close together
    lifts = label_lifts(values, 1e-4, 10.0)
    import math

    per_decade = 430.0 / math.log10(10.0 / 1e-4)
    ys = sorted(math.log10(v) * per_decade + lift for v, lift in zip(values, lifts))
    assert all(b - a >= LABEL_PT - 1e-9 for a, b in zip(ys, ys[1:]))
    assert lifts[3] == 0.0 and lifts[2] == 0.0  # far apart: left where they were


def test_point_numbers_on_one_spot_share_one_label():
    """Three providers of one shape land on one spot (the reviewer's rows 29, 35 and 41): one label for the three;
    points a decade apart keep their own; no two groups' anchors closer than POINT_LABEL_PT."""
    import math

    from microbench.report.roofline_report import PLOT_HEIGHT_PT, PLOT_WIDTH_PT, POINT_LABEL_PT, point_label_groups

    pts = [(10.0, 0.5), (10.05, 0.502), (1.0, 0.05), (10.02, 0.499), (100.0, 0.5)]
    groups = point_label_groups(pts, (0.05, 4000.0), (1e-4, 3.0))
    assert groups == [[0, 1, 3], [2], [4]]
    sx, sy = PLOT_WIDTH_PT / math.log10(4000 / 0.05), PLOT_HEIGHT_PT / math.log10(3 / 1e-4)
    anchors = [(math.log10(pts[g[0]][0]) * sx, math.log10(pts[g[0]][1]) * sy) for g in groups]
    assert all(math.dist(a, b) >= POINT_LABEL_PT for i, a in enumerate(anchors) for b in anchors[i + 1 :])


def test_trace_compare_html_says_human_labels_with_the_keys_in_the_glossary():
    from microbench.report.trace_compare import compare_traces, trace_compare_html

    from .conftest import analyze

    amd = REPO / "tests" / "data" / "amd_mi300x_synthetic.json"
    docs = [(p, json.loads(json.dumps(analyze(p), default=str))) for p in (amd, SLICE)]
    html = trace_compare_html(compare_traces(docs))
    body, glossary = html.split("<h2>glossary</h2>")
    assert "exposed communication" in body and "exposed_comm_us" not in body and "gpu_span_us" not in body
    assert "<code>exposed_comm_us</code>" in glossary and "<code>tc_gemm</code>" in glossary
    assert ">tc_gemm<" not in body


def test_compare_pages_draw_their_pictures(tmp_path):
    """compare of results: the ratio per case; compare of two trace reports: time by class per machine."""
    from microbench.report.compare import compare, compare_html
    from microbench.report.trace_compare import compare_traces, trace_compare_html

    from .conftest import analyze

    files = []
    for name in ("machine a", "machine b"):
        doc = _rows_doc([("torch", "ok")])
        doc["hardware"]["name"] = name
        path = tmp_path / f"{len(files)}.json"
        path.write_text(json.dumps(doc))
        files.append(path)
    html = compare_html(compare(files))
    assert "<h2>ratio per case</h2>" in html and "data:image/png;base64," in html
    amd = REPO / "tests" / "data" / "amd_mi300x_synthetic.json"
    docs = [(p, json.loads(json.dumps(analyze(p), default=str))) for p in (amd, SLICE)]
    html = trace_compare_html(compare_traces(docs))
    assert "<h2>time by class per machine</h2>" in html and "data:image/png;base64," in html
