"""Hostile inputs and faults, one test per class: every reader checks each field where it reads it,
only regular files are read or replaced, every command's argument errors are one line, numbers are bounded,
and a fault after rows were measured keeps them. Each class is fixed at one place (core.files,
core.errors.run_command, core.args, core.outdir), so each test stands for every input of its class.
"""

from __future__ import annotations

import csv
import importlib
import io
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys

import pytest

from microbench.core.errors import InputError, run_command, shown
from microbench.core.files import check_output, open_input
from microbench.core.outdir import LOCK_NAME, OutputDir, check_file, write_file
from tests.conftest import NCU, NSYS, SHARED, SLICE

needs_nsight = pytest.mark.skipif(not NSYS.is_file() or not NCU.is_file(), reason=f"{SHARED / 'nsight'} is not here")

trace_cmd = importlib.import_module("microbench.trace.cli")
compare_cmd = importlib.import_module("microbench.compare.cli")
comm_cmd = importlib.import_module("microbench.comm.cli")
tta_cmd = importlib.import_module("microbench.tta.cli")


def one_line(capsys) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    return lines[0]


# ---- only regular files ---------------------------------------------------------------------------------------
@pytest.fixture
def fifo(tmp_path):
    path = tmp_path / "pipe"
    os.mkfifo(path)
    return path


def test_a_fifo_a_device_or_a_folder_is_refused_at_once(fifo, tmp_path):
    """A FIFO with no writer would block open() forever, /dev/zero would never end: refused before any read."""
    for path, kind in ((fifo, "FIFO"), (tmp_path, "folder"), ("/dev/zero", "character device")):
        with pytest.raises(InputError, match=kind):
            open_input(path)


@pytest.mark.parametrize(
    "argv",
    [
        ["trace", "{p}"],
        ["compare", "{p}"],
        ["trace", str(SLICE), "--config", "{p}"],
        ["trace", str(SLICE), "--ceilings", "{p}"],
        ["tta", "leaderboard", "{p}"],
    ],
)
def test_every_command_refuses_a_fifo_input_in_one_line(fifo, argv, capsys):
    mod = {"trace": trace_cmd, "compare": compare_cmd, "tta": tta_cmd}[argv[0]]
    assert mod.main([a.replace("{p}", str(fifo)) for a in argv[1:]]) == 2
    assert "FIFO" in one_line(capsys)


def test_an_output_that_is_not_a_regular_file_is_never_replaced(fifo, tmp_path, capsys):
    """As root `--json /dev/null` would have replaced /dev/null with a regular file: a FIFO stands in for it."""
    assert trace_cmd.main([str(SLICE), "--json", str(fifo)]) == 2
    assert "only a regular file is replaced" in one_line(capsys) and fifo.is_fifo()
    with pytest.raises(InputError):
        write_file(fifo, "{}")  # the writer checks again, just before it replaces
    assert fifo.is_fifo()
    assert check_output(tmp_path / "absent.json", "--json") is None


def test_control_characters_in_names_stay_one_line(tmp_path, capsys):
    bad = tmp_path / "a\nb\x1b[31m.json"
    bad.write_text("{")
    assert trace_cmd.main([str(bad)]) == 2
    line = one_line(capsys)
    assert "a\\nb\\x1b[31m.json" in line and "\x1b" not in line
    assert shown("x\ty\x9b") == "x\\ty\\x9b"


def test_a_name_too_long_is_one_line(tmp_path, capsys):
    long = tmp_path / ("n" * 300)
    assert trace_cmd.main([str(long)]) == 2
    assert "too long" in one_line(capsys)
    assert trace_cmd.main([str(SLICE), "--json", str(long / "x.json")]) == 2
    assert "too long" in one_line(capsys)
    with pytest.raises(InputError, match="too long"):
        check_file(long, "--json")


# ---- arguments: one line, bounded -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    "module, argv, names",
    [
        ("microbench.trace.cli", [str(SLICE), "--bogus"], "unrecognized"),
        ("microbench.compare.cli", [], "required"),
        ("microbench.inspect.cli", ["--bogus"], "unrecognized"),
        ("microbench.roofline.cli", ["--device", "tpu"], "--device"),
        ("devtools.compiles", ["--sms", "0"], "--sms"),
        ("microbench.trace.cli", [str(SLICE), "--top", "0"], "--top"),
        ("microbench.comm.cli", ["collectives", "--timeout", "1e300"], "--timeout"),
        ("microbench.comm.cli", ["collectives", "--timeout", "1e-9"], "--timeout"),
        ("microbench.comm.cli", ["collectives", "--nproc", "100000"], "--nproc"),
        ("microbench.comm.cli", ["scale", "--gradient-bytes", "1" + "0" * 40], "--gradient-bytes"),
        ("microbench.decompose.cli", ["--model", "resnet9", "--batch", "1e12"], "--batch"),
        ("microbench.decompose.cli", ["--model", "resnet9", "--steps", "1000000000000"], "--steps"),
        ("microbench.tta.cli", ["run", "--model", "digits", "--seeds", "100000000000000000000"], "--seeds"),
    ],
)
def test_argument_errors_are_one_line_and_name_the_argument(module, argv, names, capsys):
    with pytest.raises(SystemExit) as e:
        importlib.import_module(module).main(argv)
    assert e.value.code == 2
    line = one_line(capsys)
    assert line.startswith("error:") and names in line


@pytest.mark.parametrize(
    "argv, key", [(["--sizes", "99999999999999999999"], "--sizes"), (["--sizes", "2**40"], "--sizes")]
)
def test_comm_sizes_are_bounded(argv, key, tmp_path, capsys):
    assert comm_cmd.main(["collectives", "--out", str(tmp_path / "o"), *argv]) == 2
    assert key in one_line(capsys)


def test_comm_scale_workers_are_bounded(capsys):
    assert comm_cmd.main(["scale", "--step-ms", "10", "--gradient-bytes", "1000", "--workers", "1" + "0" * 30]) == 2
    assert "--workers" in one_line(capsys)


# ---- readers check each field ---------------------------------------------------------------------------------
def _nsys_copy(tmp_path, *sql):
    path = tmp_path / "t.sqlite"
    shutil.copy(NSYS, path)
    os.chmod(path, 0o644)
    con = sqlite3.connect(path)
    for s in sql:
        con.execute(s)
    con.commit()
    con.close()
    return path


K = "CUPTI_ACTIVITY_KIND_KERNEL"
FIRST = f"rowid = (SELECT min(rowid) FROM {K})"


@needs_nsight
@pytest.mark.parametrize(
    "sql, words",
    [
        (f"UPDATE {K} SET start = 'abc' WHERE {FIRST}", "start = 'abc'"),
        (f"UPDATE {K} SET end = start - 1000 WHERE {FIRST}", "ends before it starts"),
        (f"UPDATE {K} SET end = 9e300 WHERE {FIRST}", "end = 9e+300"),
        (f"UPDATE {K} SET deviceId = 9223372036854775807 WHERE {FIRST}", "deviceId"),
        (f"UPDATE {K} SET streamId = 1.5e30 WHERE {FIRST}", "streamId"),
        ("UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET correlationId = 'x'", "correlationId = 'x'"),
        ("UPDATE NVTX_EVENTS SET globalTid = 1e300 WHERE end IS NOT NULL", "globalTid"),
        ("UPDATE TARGET_INFO_GPU SET smCount = 'many'", "smCount = 'many'"),
    ],
)
def test_nsys_reader_checks_every_number(tmp_path, sql, words, capsys):
    assert trace_cmd.main([str(_nsys_copy(tmp_path, sql))]) == 2
    assert words in one_line(capsys)


def _ncu_copy(tmp_path, column, value, metric=None):
    rows = list(csv.reader(io.StringIO(NCU.read_text())))
    h = rows[0]
    for r in rows[1:]:
        if metric is None or r[h.index("Metric Name")] == metric:
            r[h.index(column)] = value
    out = io.StringIO()
    csv.writer(out, quoting=csv.QUOTE_ALL, lineterminator="\n").writerows(rows)
    path = tmp_path / "k.ncu.csv"
    path.write_text(out.getvalue())
    return path


@needs_nsight
@pytest.mark.parametrize(
    "column, value, metric, words",
    [
        ("CC", "abc", None, "CC = 'abc'"),
        ("CC", "9", None, "CC = '9'"),
        ("Device", "99999999999999999999", None, "Device"),
        ("Device", "-3", None, "Device = '-3'"),
        ("Metric Value", "inf", "Duration", "Duration = 'inf'"),
        ("Metric Value", "1e400", "Duration", "Duration"),
        ("Metric Value", "-5", "Duration", "duration -5"),
    ],
)
def test_ncu_reader_checks_every_field(tmp_path, column, value, metric, words, capsys):
    assert trace_cmd.main([str(_ncu_copy(tmp_path, column, value, metric))]) == 2
    assert words in one_line(capsys)


@pytest.mark.parametrize("key, value", [("correlation", 1e30), ("device", 1e30), ("stream", 7.5)])
def test_kineto_refuses_an_id_written_as_a_float(tmp_path, key, value, capsys):
    doc = json.loads(SLICE.read_text())
    next(e for e in doc["traceEvents"] if e.get("cat") == "kernel")["args"][key] = value
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc))
    assert trace_cmd.main([str(path)]) == 2
    assert f"args.{key}={value!r}: expected an integer id" in one_line(capsys)


def _mllog(key, t, value=None, **meta):
    return ":::MLLOG " + json.dumps(
        {
            "namespace": "",
            "time_ms": t,
            "event_type": "POINT_IN_TIME",
            "key": key,
            "value": value,
            "metadata": {"file": "x.py", "lineno": 1, **meta},
        }
    )


GOOD_LOG = [
    _mllog("submission_benchmark", 0, "resnet"),
    _mllog("submission_org", 0, "org"),
    _mllog("run_start", 1000),
    _mllog("eval_accuracy", 5000, 0.76, epoch_num=3),
    _mllog("run_stop", 9000, status="success"),
]


@pytest.mark.parametrize(
    "lines, words",
    [
        (GOOD_LOG[:3] + [_mllog("eval_accuracy", 5000, float("nan"), epoch_num=3)] + GOOD_LOG[4:], "not a finite"),
        ([_mllog("submission_org", 0, "x" * 100_000)] + GOOD_LOG, "bytes: beyond"),
        (
            GOOD_LOG[:4]
            + [
                GOOD_LOG[4].replace(
                    '"metadata": {"file": "x.py", "lineno": 1, "status": "success"}', '"metadata": [1, 2]'
                )
            ],
            "metadata is list",
        ),
        ([_mllog("submission_benchmark", 0, ["resnet"])] + GOOD_LOG[1:], "is not a string"),
        (GOOD_LOG + [GOOD_LOG[2].replace('"key": "run_start"', '"key": 5')], "key 5 is not a string"),
        (GOOD_LOG[:3] + [_mllog("eval_accuracy", 5000, 0.7, epoch_num={"a": 1})] + GOOD_LOG[4:], "epoch_num"),
    ],
)
def test_mlperf_logs_with_bad_fields_are_listed_with_the_reason(tmp_path, lines, words):
    from microbench.tta.leaderboard import build

    d = tmp_path / "results" / "sys" / "resnet"
    d.mkdir(parents=True)
    (d / "result_0.txt").write_text("\n".join(lines) + "\n")
    board = build([tmp_path], check=False)
    assert len(board.unreadable) == 1 and words in board.unreadable[0]["reason"], board.unreadable


@pytest.mark.parametrize(
    "tsv, words",
    [
        ("1\tnan\t95", "'nan'"),
        ("1\tinf\t95", "'inf'"),
        ("1\t0.1\t" + "9" * 200_000, "not a TSV"),
        ("1\t1e308\t95", "1e308"),
    ],
)
def test_dawnbench_tsvs_with_bad_fields_are_listed_with_the_reason(tmp_path, tsv, words):
    from microbench.tta.leaderboard import build

    d = tmp_path / "CIFAR10" / "train"
    d.mkdir(parents=True)
    (d / "x.tsv").write_text(f"epoch\thours\ttop1Accuracy\n{tsv}\n")
    (d / "fifo.tsv").parent.mkdir(exist_ok=True)
    os.mkfifo(d / "fifo.tsv")  # inside a folder: listed, never opened for reading
    board = build([tmp_path])
    reasons = {os.path.basename(u["file"]): u["reason"] for u in board.unreadable}
    assert words in reasons["x.tsv"] and "FIFO" in reasons["fifo.tsv"], reasons


def test_dawnbench_metadata_of_the_wrong_type_is_a_note(tmp_path):
    from microbench.tta.leaderboard import build

    d = tmp_path / "CIFAR10" / "train"
    d.mkdir(parents=True)
    (d / "x.tsv").write_text("epoch\thours\ttop1Accuracy\n1\t0.1\t95\n")
    (d / "x.json").write_text('{"hardware": {"a": [1, 2]}, "costPerHour": NaN}')
    (e,) = build([tmp_path]).entries
    assert e.hardware is None and e.cost_usd is None and any("costPerHour" in n for n in e.notes)


@pytest.mark.parametrize(
    "row, key",
    [
        ({"time_ms": {"median": None}}, "time_ms.median"),
        ({"bytes": "12"}, "bytes"),
        ({"nranks": "two"}, "nranks"),
        ({"busbw_gbps": -3.0}, "busbw_gbps"),
        ({"time_ms": None}, "time_ms"),
    ],
)
def test_a_fabric_from_results_checks_its_fields(tmp_path, row, key, capsys):
    good = {"op": "allreduce", "bytes": 1 << 20, "nranks": 2, "time_ms": {"median": 0.5}, "busbw_gbps": 2.0}
    path = tmp_path / "results.json"
    path.write_text(json.dumps({"results": [{**good, **row}]}))
    assert comm_cmd.main(["scale", "--fabric", str(path), "--step-ms", "10", "--gradient-bytes", "1000000"]) == 2
    assert f"results[0].{key}" in one_line(capsys)


# ---- faults -----------------------------------------------------------------------------------------------------
def test_run_command_endings():
    def fails(exc):
        def body():
            raise exc

        return body

    assert run_command(fails(InputError("f", "bad"))) == 2
    assert run_command(fails(KeyboardInterrupt())) == 130
    assert run_command(fails(OSError(28, "No space left on device", "out/results.json"))) == 1
    assert run_command(fails(KeyboardInterrupt()), on_interrupt=lambda: "kept") == 130


def test_sigterm_while_the_reports_are_written_keeps_the_rows(tmp_path, capsys):
    out = tmp_path / "out"
    with pytest.raises(KeyboardInterrupt):
        with OutputDir(out, owns=("results.json",)) as od:
            od.file("results.json").write_text(json.dumps({"results": [{"op": "gemm"}]}))
            os.kill(os.getpid(), signal.SIGTERM)  # as the report is drawn
    (kept,) = [p for p in out.iterdir() if p.name.startswith("incomplete-")]
    assert json.loads((kept / "results.json").read_text())["results"] == [{"op": "gemm"}]
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def test_no_rows_no_incomplete_folder(tmp_path):
    out = tmp_path / "out"
    with pytest.raises(KeyboardInterrupt):
        with OutputDir(out, owns=("results.json",)) as od:
            od.file("results.json").write_text(json.dumps({"results": []}))
            raise KeyboardInterrupt
    assert sorted(p.name for p in out.iterdir()) == [LOCK_NAME]


def test_a_killed_runs_folder_is_reported_and_its_rows_moved(tmp_path, capsys):
    out = tmp_path / "out"
    stale = out / ".run-999999-abcdef01"
    stale.mkdir(parents=True)
    (stale / "results.json").write_text(json.dumps({"results": [{"op": "gemm"}]}))
    (out / ".run-999998-abcdef02").mkdir()  # nothing measured: removed
    with OutputDir(out, owns=("results.json",)) as od:
        od.commit()
    err = capsys.readouterr().err
    assert ".run-999999-abcdef01" in err and "incomplete-" in err
    assert not list(out.glob(".run-*"))
    (kept,) = out.glob("incomplete-*")
    assert json.loads((kept / "results.json").read_text())["results"] == [{"op": "gemm"}]


def test_a_lock_held_for_a_dead_process_is_taken_over(tmp_path, capsys):
    """The holder died; a process it started kept the inherited lock (here: a child that names a dead pid)."""
    out = tmp_path / "out"
    out.mkdir()
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            (
                "import fcntl, os, sys; fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT); fcntl.flock(fd, fcntl.LOCK_EX); "
                "os.write(fd, b'999999999\\n'); print('locked', flush=True); sys.stdin.read()"
            ),
            str(out / LOCK_NAME),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout.readline().strip() == "locked"
        with OutputDir(out) as od:
            od.commit()
        assert "999999999, which no longer runs, taken over" in capsys.readouterr().err
    finally:
        child.communicate("")


def test_a_failing_plot_backend_is_one_line_and_keeps_the_rows(tmp_path, monkeypatch, capsys):
    import matplotlib

    from microbench.core.errors import PlotError
    from microbench.report.figures import pyplot

    def broken(*a, **k):  # what a bad MPLBACKEND or a broken install raises
        raise ValueError("Key backend: 'no-such-backend' is not a valid value for backend")

    monkeypatch.setattr(matplotlib, "use", broken)
    out = tmp_path / "out"

    def body():
        with OutputDir(out, owns=("results.json",)) as od:
            od.file("results.json").write_text(json.dumps({"results": [{"op": "gemm"}]}))
            pyplot()
        return 0

    assert run_command(body) == 1
    err = capsys.readouterr().err
    assert "cannot draw the plot" in err and "Traceback" not in err
    (kept,) = out.glob("incomplete-*")
    assert not list(out.rglob("*.tmp"))
    with pytest.raises(PlotError):
        pyplot()


def test_compare_gives_each_input_its_own_label():
    from microbench.report.compare import unique_labels

    assert unique_labels(["A", "A", "A #1"]) == ["A #2", "A #3", "A #1"]
    assert unique_labels(["X", "X #2", "X"]) == ["X #1", "X #2", "X #3"]
    assert unique_labels(["A", "B"]) == ["A", "B"]
