"""Fuzzing every reader of user input (Hypothesis): the config loader, the trace reader and the results
reader (compare's), fed random bytes and mutated real files (bench.toml; a slice of a real H100 trace,
tests/data/h100_bert_small_slice.json; a real results.json from docs/), end in a result or in one
InputError / ConfigError line, never in another exception. A result they return holds no NaN or infinity.

Bounded for CI by a fixed number of examples per test (about 20 s for the whole file on a 2-core machine), never by
time: a per-example deadline is a timing threshold (on a loaded machine a first example took 6.2 s, its rerun
0.18 s, and Hypothesis failed the test as flaky), and it cannot catch a hang, since it is checked only once an
example has returned. HYPOTHESIS_PROFILE=long runs 20x more examples, for a fuzzing session by hand.
"""

from __future__ import annotations

import functools
import json
import math
import os
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from microbench.core.config import DEFAULT_CONFIG, load_config
from microbench.core.errors import InputError
from microbench.core.jsonio import dumps
from microbench.report.compare import load_machine
from tests.conftest import NCU, NSYS, REPO

from .conftest import analyze

settings.register_profile(
    "ci",
    max_examples=60,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
settings.register_profile("long", parent=settings.get_profile("ci"), max_examples=1200)
FUZZ = settings.get_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

BENCH_TOML = DEFAULT_CONFIG.read_bytes()
TRACE = (REPO / "tests" / "data" / "h100_bert_small_slice.json").read_text()
_RESULTS = json.loads((REPO / "docs" / "cpu-roofline" / "results.json").read_text())
RESULTS = {**_RESULTS, "results": _RESULTS["results"][:24]}  # a real file, cut to keep each example fast

# What users and broken tools put where a number belongs.
ODD_VALUES = [
    "nan",
    "NaN",
    "inf",
    "-inf",
    "Infinity",
    "-Infinity",
    "1e308",
    "1e999",
    "-1",
    "0",
    "-0.0",
    "1e20",
    "9223372036854775808",
    "100000000000000000000",
    "true",
    "null",
    '"x"',
    "[]",
    "{}",
    "[1, [2]]",
    '"\\u0000"',
]
NUMBER = re.compile(rb"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")


@st.composite
def mutated(draw, original: bytes, odd=ODD_VALUES):
    """A real file with a few edits: numbers swapped for odd values, byte ranges deleted, duplicated,
    overwritten with random bytes, or the file cut short."""
    data = bytearray(original)
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["number", "number", "delete", "dup", "bytes", "cut"]))
        if kind == "number":
            spans = [m.span() for m in NUMBER.finditer(data)]
            if spans:
                a, b = draw(st.sampled_from(spans))
                data[a:b] = draw(st.sampled_from(odd)).encode()
            continue
        a = draw(st.integers(0, max(len(data) - 1, 0)))
        b = draw(st.integers(a, min(len(data), a + 64)))
        if kind == "delete":
            del data[a:b]
        elif kind == "dup":
            data[a:a] = data[a:b]
        elif kind == "bytes":
            data[a:b] = draw(st.binary(max_size=16))
        else:
            del data[a:]
    return bytes(data)


JSON_LEAF = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.text(max_size=8),
    st.floats(allow_nan=True, allow_infinity=True),
)
JSON_VALUE = st.recursive(
    JSON_LEAF,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)


@st.composite
def restructured(draw, doc):
    """A real JSON document with a few values, anywhere in it, replaced by any JSON value (of any type)."""
    doc = json.loads(json.dumps(doc))
    for _ in range(draw(st.integers(1, 3))):
        node, key = None, None
        cur = doc
        for _ in range(draw(st.integers(1, 5))):
            if isinstance(cur, dict) and cur:
                node, key = cur, draw(st.sampled_from(sorted(cur)))
            elif isinstance(cur, list) and cur:
                node, key = cur, draw(st.integers(0, len(cur) - 1))
            else:
                break
            cur = node[key]
        if node is not None:
            node[key] = draw(JSON_VALUE)
    return json.dumps(doc).encode()  # Python writes NaN / Infinity, which Python's reader accepts


def assert_finite(v, where="doc"):
    if isinstance(v, float):
        assert math.isfinite(v), f"{where} = {v}"
    elif isinstance(v, dict):
        for k, x in v.items():
            assert_finite(x, f"{where}.{k}")
    elif isinstance(v, (list, tuple)):
        for i, x in enumerate(v):
            assert_finite(x, f"{where}[{i}]")


def one_line_or_result(read, path, data: bytes):
    path.write_bytes(data)
    try:
        result = read(path)
    except InputError as e:  # ConfigError is one
        line = e.line()
        assert line and "\n" not in line
        return None
    return result


@pytest.fixture
def cfg_path(tmp_path):
    return tmp_path / "bench.toml"


@FUZZ
@given(data=mutated(BENCH_TOML))
def test_config_loader_on_mutated_bench_toml(cfg_path, data):
    cfg = one_line_or_result(load_config, cfg_path, data)
    if cfg is not None:
        assert_finite(cfg.tolerance)
        assert_finite([cfg.timing.warmup_ms, cfg.timing.rep_ms, cfg.timing.max_case_seconds])


@FUZZ
@given(data=st.binary(max_size=200) | st.text(max_size=200).map(str.encode))
def test_config_loader_on_random_bytes(cfg_path, data):
    one_line_or_result(load_config, cfg_path, data)


@functools.cache
def _config():
    return load_config()


def _analyze(path):
    return analyze(path, _config())


@FUZZ
@given(data=mutated(TRACE.encode()))
def test_trace_reader_on_a_mutated_real_trace(tmp_path, data):
    doc = one_line_or_result(_analyze, tmp_path / "trace.json", data)
    if doc is not None:
        assert_finite(doc)


@FUZZ
@given(data=restructured(json.loads(TRACE)))
def test_trace_reader_on_a_restructured_real_trace(tmp_path, data):
    doc = one_line_or_result(_analyze, tmp_path / "trace.json", data)
    if doc is not None:
        assert_finite(doc)


@FUZZ
@given(data=st.binary(max_size=200))
def test_trace_reader_on_random_bytes(tmp_path, data):
    one_line_or_result(_analyze, tmp_path / "trace.json", data)


@FUZZ
@given(data=mutated(json.dumps(RESULTS, indent=1).encode()))
def test_results_reader_on_a_mutated_real_results_file(tmp_path, data):
    m = one_line_or_result(load_machine, tmp_path / "results.json", data)
    if m is not None:
        assert_finite(list(m.cells.values()))


@FUZZ
@given(data=restructured(RESULTS))
def test_results_reader_on_a_restructured_real_results_file(tmp_path, data):
    """Through the whole comparison (with the unmutated file as the baseline), not only the reader."""
    from microbench.report.compare import compare, compare_html

    base = tmp_path / "base.json"
    base.write_text(json.dumps(RESULTS))
    path = tmp_path / "results.json"
    path.write_bytes(data)
    try:
        cmp = compare([base, path])
        compare_html(cmp)
    except InputError as e:
        assert "\n" not in e.line()
        return
    assert_finite(cmp)


@functools.cache
def _trace_report() -> dict:
    """A real trace report (python -m microbench.trace --json) of the slice, as compare reads it."""
    return json.loads(dumps(_analyze(REPO / "tests" / "data" / "h100_bert_small_slice.json")))


@FUZZ
@given(data=st.data())
def test_compare_of_trace_reports_on_a_restructured_report(tmp_path, data):
    from microbench.report.trace_compare import compare_traces, load_trace_reports, trace_compare_html

    base, path = tmp_path / "base.json", tmp_path / "report.json"
    base.write_text(json.dumps(_trace_report()))
    path.write_bytes(data.draw(restructured(_trace_report())))
    try:
        cmp = compare_traces(load_trace_reports([base, path]))
        trace_compare_html(cmp)
    except InputError as e:
        assert "\n" not in e.line()
        return
    assert_finite(cmp)


# ---- the Nsight readers, the time-to-accuracy readers and comm results read back as a fabric --------------
from tests.conftest import SHARED  # noqa: E402

needs_nsight = pytest.mark.skipif(not NSYS.is_file() or not NCU.is_file(), reason=f"{SHARED / 'nsight'} is not here")
# Each example reads a whole real export: fewer of them.
FUZZ_SLOW = settings(FUZZ, max_examples=max(FUZZ.max_examples // 4, 10))
SQL_ODD = ["'x'", "''", "NULL", "-1", "0.5", "1e300", "-9e18", "9223372036854775807", "X'00ff'", "'12'"]


@st.composite
def nsys_edits(draw):
    """A few cells of the real export's tables that the reader reads, set to odd values."""
    from microbench.trace.nsys import FIELDS

    edits = []
    for _ in range(draw(st.integers(1, 3))):
        table = draw(st.sampled_from(sorted(FIELDS)))
        column = draw(st.sampled_from(sorted(FIELDS[table])))
        edits.append((table, column, draw(st.sampled_from(SQL_ODD)), draw(st.integers(0, 50))))
    return edits


@needs_nsight
@FUZZ_SLOW
@given(edits=nsys_edits())
def test_nsys_reader_on_a_mutated_real_export(tmp_path, edits):
    import shutil
    import sqlite3

    path = tmp_path / "t.sqlite"
    shutil.copy(NSYS, path)
    os.chmod(path, 0o644)
    con = sqlite3.connect(path)
    for table, column, value, k in edits:
        try:
            con.execute(
                f'UPDATE "{table}" SET "{column}" = {value} WHERE rowid = '
                f'(SELECT rowid FROM "{table}" ORDER BY rowid LIMIT 1 OFFSET {k})'
            )
        except sqlite3.Error:  # a NOT NULL column, a table this export lacks: that edit is not made
            pass
    con.commit()
    con.close()
    try:
        doc = analyze(path, _config())
    except InputError as e:
        assert "\n" not in e.line()
        return
    assert_finite(doc)


@needs_nsight
@FUZZ_SLOW
@given(
    data=mutated(NCU.read_bytes() if NCU.is_file() else b"", odd=ODD_VALUES + ["n/a", "1,2,3", "9.9.9", "-5", "1e400"])
)
def test_ncu_reader_on_a_mutated_real_export(tmp_path, data):
    doc = one_line_or_result(_analyze, tmp_path / "k.ncu.csv", data)
    if doc is not None:
        assert_finite(doc)


def _mllog_doc(key, t, value=None, **meta):
    return {
        "namespace": "",
        "time_ms": t,
        "event_type": "POINT_IN_TIME",
        "key": key,
        "value": value,
        "metadata": {"file": "x.py", "lineno": 1, **meta},
    }


MLLOG_RUN = [
    _mllog_doc("submission_benchmark", 0, "resnet"),
    _mllog_doc("submission_org", 0, "org"),
    _mllog_doc("submission_platform", 0, "sys"),
    _mllog_doc("run_start", 1000),
    _mllog_doc("eval_accuracy", 5000, 0.76, epoch_num=3),
    _mllog_doc("run_stop", 9000, status="success"),
]


def _board_is_writable(root):
    """The leaderboard over `root`: every file an entry or listed as unreadable, and its JSON writable."""
    from microbench.tta.leaderboard import build

    board = build([root], check=False)
    dumps(board.as_list())  # refuses NaN / Infinity
    return board


@FUZZ
@given(doc=restructured(MLLOG_RUN))
def test_mlperf_reader_on_a_restructured_log(tmp_path, doc):
    d = tmp_path / "results" / "sys" / "resnet"
    d.mkdir(parents=True, exist_ok=True)
    lines = json.loads(doc)
    (d / "result_0.txt").write_text("\n".join(":::MLLOG " + json.dumps(ll) for ll in lines) + "\n")
    board = _board_is_writable(tmp_path)
    assert len(board.entries) + len(board.unreadable) == 1


DAWN_TSV = b"epoch\thours\ttop1Accuracy\n1\t0.1\t80.5\n2\t0.2\t94.3\n3\t0.3\t95.1\n"
DAWN_JSON = json.dumps({"author": "a", "hardware": "8 V100", "framework": "pytorch", "costPerHour": 24.48}).encode()


@FUZZ
@given(tsv=mutated(DAWN_TSV, odd=ODD_VALUES + ["soon", "1e400"]), meta=mutated(DAWN_JSON))
def test_dawnbench_reader_on_mutated_files(tmp_path, tsv, meta):
    d = tmp_path / "CIFAR10" / "train"
    d.mkdir(parents=True, exist_ok=True)
    (d / "x.tsv").write_bytes(tsv)
    (d / "x.json").write_bytes(meta)
    board = _board_is_writable(tmp_path)
    assert len(board.entries) + len(board.unreadable) == 1


FABRIC_RESULTS = {
    "results": [
        {"op": "allreduce", "bytes": b, "nranks": 2, "time_ms": {"median": t}, "busbw_gbps": bw, "status": "ok"}
        for b, t, bw in ((8, 0.01, 0.0008), (1 << 20, 0.5, 2.1))
    ]
}


@FUZZ
@given(data=restructured(FABRIC_RESULTS))
def test_comm_results_read_back_as_a_fabric(tmp_path, data):
    from microbench.comm.scale import Workload, fabric_from_results, sweep

    fabric = one_line_or_result(fabric_from_results, tmp_path / "results.json", data)
    if fabric is not None:
        assert_finite(sweep(Workload(10.0, 10**6), [1, 2, 8, 64], fabric))
