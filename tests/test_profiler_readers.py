"""Readers of NVIDIA's profilers on the real exports in tests/data/nsight, with expected values computed here
independently: the Nsight Compute CSV with the csv module, the Nsight Systems SQLite file by SQL over its tables."""

from __future__ import annotations

import csv
import io
import sqlite3

import pytest

from microbench.core.errors import InputError
from microbench.trace.counters import combine_calls, contradiction, counter_verdict, sass_flops
from microbench.trace.ncu import looks_like_ncu_csv, parse_number, read_ncu_csv
from microbench.trace.nsys import process_of, read_nsys_sqlite

from .conftest import NCU, NSYS

needs_nsight = pytest.mark.skipif(
    not NCU.is_file() or not NSYS.is_file(), reason="tests/data/nsight (real Nsight exports) is not in this checkout"
)


def _long_rows():
    with open(NCU, newline="") as f:
        return list(csv.DictReader(f))


def _metric(rows, section, name):
    hit = [r for r in rows if r["Section Name"] == section and r["Metric Name"] == name]
    assert len(hit) == 1
    return float(hit[0]["Metric Value"].replace(",", "")), hit[0]["Metric Unit"]


@needs_nsight
def test_ncu_long_form_duration_and_bytes():
    rows = _long_rows()
    dur, unit = _metric(rows, "GPU Speed Of Light Throughput", "Duration")
    assert unit == "ns" and dur == 21_058_944  # "21,058,944": the thousands separators are gone
    thr, unit = _metric(rows, "Memory Workload Analysis", "Memory Throughput")
    assert unit == "byte/s"
    (k,) = read_ncu_csv(NCU)
    assert k.id == 0 and k.name == rows[0]["Kernel Name"] and k.cc == "7.5" and k.device == 0
    assert k.duration_ns == dur
    assert k.dram_bytes == pytest.approx(thr * dur * 1e-9)
    s = k.summary()
    assert s["achieved_dram_tbs"] == pytest.approx(thr / 1e12)
    # This export has section metrics only: no tensor-pipe counter, no FP instruction counts, no verdict.
    assert s["tensor_pipe_pct"] is None and s["tensor_ops_by_precision"] == {} and s["sass_flops"] is None
    assert counter_verdict(k.values(), "memcpy").tensor_cores is None
    assert k.value("Launch Statistics/Grid Size") == 1024 and k.value("Occupancy/Achieved Occupancy") == 96.26


def _raw_page(rows, extra: dict[str, tuple[str, str]] | None = None) -> str:
    """The same kernel in `ncu --page raw` layout: one column per metric, a units row under the header."""
    ident = [
        "ID",
        "Process ID",
        "Process Name",
        "Host Name",
        "Kernel Name",
        "Context",
        "Stream",
        "Block Size",
        "Grid Size",
        "Device",
        "CC",
    ]
    metrics = {}
    for r in rows:
        if r["Metric Name"] and r["Section Name"] == "GPU Speed Of Light Throughput":
            metrics.setdefault(r["Metric Name"], (r["Metric Unit"], r["Metric Value"]))
    metrics |= extra or {}
    out = io.StringIO()
    w = csv.writer(out, quoting=csv.QUOTE_ALL)
    w.writerow(ident + list(metrics))
    w.writerow([""] * len(ident) + [u for u, _ in metrics.values()])
    w.writerow([rows[0][c] for c in ident] + [v for _, v in metrics.values()])
    return "==PROF== Disconnected from process 6153\n" + out.getvalue()


@needs_nsight
def test_ncu_raw_page_gives_the_same_numbers(tmp_path):
    rows = _long_rows()
    raw = tmp_path / "raw.csv"
    raw.write_text(_raw_page(rows))
    assert looks_like_ncu_csv(raw.read_text()[:4096])
    (k,) = read_ncu_csv(raw)
    (long_k,) = read_ncu_csv(NCU)
    assert k.duration_ns == long_k.duration_ns == 21_058_944
    assert k.value("Elapsed Cycles") == 12_319_469 and k.metrics["Elapsed Cycles"][1] == "cycle"
    assert k.name == long_k.name and k.cc == "7.5"


@needs_nsight
def test_tensor_counters_are_the_strongest_evidence(tmp_path):
    """The real kernel with tensor-pipe and FP-instruction columns added (values invented for the test; the names
    are Nsight Compute's): the verdict comes from them, and a name that says otherwise is reported."""
    rows = _long_rows()
    extra = {
        "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active": ("%", "42.50"),
        "sm__ops_path_tensor_src_bf16_dst_fp32.sum": ("", "1,048,576"),
        "sm__ops_path_tensor_src_fp8_dst_fp32.sum": ("", "n/a"),
        "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum": ("inst", "1,000"),
        "smsp__sass_thread_inst_executed_op_fadd_pred_on.sum": ("inst", "10"),
    }
    raw = tmp_path / "raw.csv"
    raw.write_text(_raw_page(rows, extra))
    (k,) = read_ncu_csv(raw)
    assert k.tensor_pipe_pct == 42.5
    assert k.tensor_ops_by_precision == {"bf16": 1_048_576}  # n/a is no value, not zero
    assert k.sass_flops == 2 * 1000 + 10
    v = counter_verdict(k.values(), "memcpy")
    assert v.tensor_cores == "yes" and "sm__ops_path_tensor_src_bf16_dst_fp32.sum" in v.evidence
    assert "name says tensor_cores=no" in contradiction("no", v)
    assert contradiction("yes", v) is None and contradiction("unknown", v) is None
    zero = {"sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active": 0.0}
    assert counter_verdict(zero, "gemm").tensor_cores == "no"


def test_fp_instruction_counts_judge_a_gemm_against_its_model_flops():
    m = {
        "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum": 1e9,
        "smsp__sass_thread_inst_executed_op_fmul_pred_on.sum": 0,
    }
    assert sass_flops(m) == 2e9
    assert counter_verdict(m, "gemm", model_flops=2.1e9).tensor_cores == "no"
    assert counter_verdict(m, "gemm", model_flops=1e12).tensor_cores == "yes"
    assert counter_verdict(m, "gemm", model_flops=1e10).tensor_cores is None  # 20 %: neither
    assert counter_verdict(m, "elementwise", model_flops=1e12).tensor_cores is None


@pytest.mark.parametrize(
    "text,value",
    [("1,215,000,000.00", 1.215e9), ("96.26", 96.26), ("n/a", None), ("", None), ("0", 0.0), ("(256, 1, 1)", None)],
)
def test_parse_number(text, value):
    assert parse_number(text) == value


def test_ncu_bad_input_is_one_line(tmp_path):
    bad = tmp_path / "x.csv"
    bad.write_text("a,b\n1,2\n")
    with pytest.raises(InputError, match="not an Nsight Compute CSV"):
        read_ncu_csv(bad)
    bad.write_text(
        '"ID","Kernel Name","Section Name","Metric Name","Metric Unit","Metric Value"\n"x","k","s","m","",""\n'
    )
    with pytest.raises(InputError, match="row 2: ID 'x'"):
        read_ncu_csv(bad)


# --- Nsight Systems ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sql():
    if not NSYS.is_file():
        pytest.skip("tests/data/nsight is not in this checkout")
    con = sqlite3.connect(f"file:{NSYS}?mode=ro", uri=True)
    yield lambda q, *a: con.execute(q, a).fetchall()
    con.close()


@pytest.fixture(scope="module")
def export():
    if not NSYS.is_file():
        pytest.skip("tests/data/nsight is not in this checkout")
    return read_nsys_sqlite(NSYS)


def test_nsys_kernels(export, sql):
    ((n, total_ns),) = sql("SELECT COUNT(*), SUM(end - start) FROM CUPTI_ACTIVITY_KIND_KERNEL")
    assert n == 3689 == len(export.kernels)  # SOURCES.md
    assert sum(k["dur_us"] for k in export.kernels) == pytest.approx(total_ns / 1000)
    by_name = dict(
        sql(
            "SELECT s.value, COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s "
            "ON s.id = k.demangledName GROUP BY s.value"
        )
    )
    got: dict[str, int] = {}
    for k in export.kernels:
        got[k["name"]] = got.get(k["name"], 0) + 1
    assert got == by_name
    first = sql(
        "SELECT start, streamId, correlationId, gridX, blockX FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY start LIMIT 1"
    )[0]
    k0 = export.kernels[0]
    assert (k0["ts_us"] * 1000, k0["stream"], k0["correlation"], k0["grid"][0], k0["block"][0]) == pytest.approx(first)


def test_nsys_launches_memcpy_ranges_gpu(export, sql):
    assert len(export.launches) == sql("SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME")[0][0]
    ((n, nbytes, ns),) = sql("SELECT COUNT(*), SUM(bytes), SUM(end - start) FROM CUPTI_ACTIVITY_KIND_MEMCPY")
    assert (len(export.copies), sum(c["bytes"] for c in export.copies)) == (n, nbytes) == (89, 2_883_944)
    assert sum(c["dur_us"] for c in export.copies) == pytest.approx(ns / 1000)
    assert {c["kind"] for c in export.copies} == {"Memcpy Device-to-Host"}
    ranges = sql(
        "SELECT COALESCE(e.text, s.value), e.end - e.start FROM NVTX_EVENTS e LEFT JOIN StringIds s "
        "ON s.id = e.textId WHERE e.end IS NOT NULL AND e.eventType = "
        "(SELECT id FROM ENUM_NSYS_EVENT_TYPE WHERE name = 'NvtxPushPopRange')"
    )
    assert len(ranges) == len(export.ranges) == 786
    assert sorted((r["name"], round(r["dur_us"] * 1000)) for r in export.ranges) == sorted(ranges)
    (gpu,) = export.gpus
    assert (gpu["name"], gpu["smCount"], gpu["computeMajor"], gpu["computeMinor"]) == ("Tesla T4", 40, 7, 5)
    assert export.meta["EXPORT_SCHEMA_VERSION"] == "3.20.2"
    # every launch and range of this one-process program carries its pid
    assert (
        {r["pid"] for r in export.ranges}
        == {r["pid"] for r in export.launches}
        == {process_of(export.ranges[0]["tid"])}
    )


def test_nsys_bad_input_is_one_line(tmp_path):
    bad = tmp_path / "x.sqlite"
    bad.write_bytes(b"not a database")
    with pytest.raises(InputError, match="not an SQLite database"):
        read_nsys_sqlite(bad)
    other = tmp_path / "other.sqlite"
    sqlite3.connect(other).execute("CREATE TABLE t (x)").connection.commit()
    with pytest.raises(InputError, match="StringIds"):
        read_nsys_sqlite(other)


@needs_nsight
def test_truncated_and_ragged_exports_are_one_line(tmp_path):
    cut = tmp_path / "cut.sqlite"
    cut.write_bytes(NSYS.read_bytes()[:50_000])  # an export cut short: SQLite magic, broken pages
    with pytest.raises(InputError, match="SQLite error|StringIds"):
        read_nsys_sqlite(cut)
    lines = NCU.read_text().splitlines()
    ragged = tmp_path / "ragged.csv"
    ragged.write_text("\n".join(lines[:3] + ['"0","6153","python3.11"']) + "\n")
    with pytest.raises(InputError, match="row 4: 3 fields"):
        read_ncu_csv(ragged)
    from microbench.trace import ncu

    odd = tmp_path / "odd.csv"
    odd.write_text("\n".join(lines).replace('"ns","21,058,944"', '"fortnight","21,058,944"') + "\n")
    with pytest.raises(InputError, match="kernel ID 0: duration: unknown time unit 'fortnight'"):
        ncu.read(odd)


def test_counters_of_several_calls_sum_counts_and_average_rates():
    calls = [
        {
            "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active": 40.0,
            "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum": 10,
            "gpu__time_duration.sum": 5.0,
        },
        {
            "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active": 60.0,
            "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum": 30,
            "gpu__time_duration.sum": 7.0,
        },
    ]
    got = combine_calls(calls)
    assert got == {
        "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active": 50.0,
        "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum": 40,
        "gpu__time_duration.sum": 12.0,
    }


def test_ncu_csv_captured_with_the_applications_own_output(tmp_path):
    """`ncu --csv ./app > out.csv`: the application's stdout sits between ncu's `==PROF==` lines and the header
    (was refused as 'not JSON: starts with =')."""
    from microbench.trace.analysis import detect_format

    app_log = "".join(f"epoch 0 step {i}: loss 0.{i:03d}\n" for i in range(300))  # longer than the sniffed head
    captured = tmp_path / "out.csv"
    captured.write_text(
        "==PROF== Connected to process 6153 (/usr/bin/python3.11)\n"
        + app_log
        + '==PROF== Profiling "copy_blocked": 0%....50%....100% - 8 passes\n'
        + "==PROF== Disconnected from process 6153\n"
        + NCU.read_text()
    )
    assert detect_format(captured) == "ncu"
    assert read_ncu_csv(captured) == read_ncu_csv(NCU)


def test_ncu_lines_without_a_header_are_named_in_one_line(tmp_path):
    bad = tmp_path / "out.csv"
    bad.write_text("==PROF== Connected to process 1\nhello\n==PROF== Disconnected from process 1\n")
    with pytest.raises(InputError, match="no header line"):
        read_ncu_csv(bad)
