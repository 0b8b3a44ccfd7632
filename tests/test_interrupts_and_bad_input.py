"""Case by case: a run never loses or corrupts results; every bad input is one line and exit 2.

Each case the issue lists has a test here (the fuzz suite, tests/test_fuzz.py, covers the rest at random).
"""

from __future__ import annotations

import importlib
import json
import os
import signal
import subprocess
import sys

import numpy as np
import pytest

from microbench.core.config import MAX_TIMING_MS, load_config
from microbench.core.errors import ConfigError, InputError
from microbench.core.jsonio import dumps
from microbench.core.outdir import LOCK_NAME, OutputDir, check_dir, check_file
from microbench.roofline import registry
from microbench.roofline.registry import provider
from tests.conftest import REPO, SLICE

# The command modules (the package exports functions of the same names).
compare_cmd = importlib.import_module("microbench.compare.cli")
decompose_cmd = importlib.import_module("microbench.decompose.cli")
inspect_cmd = importlib.import_module("microbench.inspect.cli")
roofline = importlib.import_module("microbench.roofline.cli")
trace_cmd = importlib.import_module("microbench.trace.cli")

DOC_RESULTS = REPO / "docs" / "cpu-roofline" / "results.json"


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    return lines[0]


def roofline_args(config, out, *extra):
    return ["--profile", "tiny", "--config", str(config), "--out", str(out), "--device", "cpu", "--no-plot", *extra]


def earlier_run(out):
    """The files an earlier run left in `out`."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text('{"earlier": true}')
    (out / "results.csv").write_text("earlier\n")
    (out / "roofline.png").write_bytes(b"earlier plot")


# ---- 1. re-runs, races, interrupts ------------------------------------------------------------------------
def test_commit_replaces_the_earlier_run_and_drops_its_stale_files(tmp_path):
    out = tmp_path / "out"
    earlier_run(out)
    with OutputDir(out, owns=("results.json", "results.csv", "roofline.png")) as od:
        od.file("results.json").write_text("{}")
        od.file("results.csv").write_text("new\n")
        assert (out / "results.json").read_text() == '{"earlier": true}'  # untouched until commit
        od.commit()
    assert (out / "results.json").read_text() == "{}"
    assert not (out / "roofline.png").exists()  # the earlier run's plot does not sit beside new results
    assert sorted(p.name for p in out.iterdir()) == [LOCK_NAME, "results.csv", "results.json"]


def test_a_failed_run_leaves_the_earlier_run_and_keeps_its_own_rows(tmp_path, capsys):
    out = tmp_path / "out"
    earlier_run(out)
    with pytest.raises(RuntimeError):
        with OutputDir(out, owns=("results.json",)) as od:
            od.file("results.json").write_text('{"rows": 1}')
            raise RuntimeError("crash")
    assert (out / "results.json").read_text() == '{"earlier": true}'
    kept = [p for p in out.iterdir() if p.name.startswith("incomplete-")]
    assert len(kept) == 1 and (kept[0] / "results.json").read_text() == '{"rows": 1}'
    assert str(kept[0]) in capsys.readouterr().err


def test_a_second_run_into_the_same_out_is_refused(tiny_config, tmp_path, capsys):
    out = tmp_path / "out"
    earlier_run(out)
    with OutputDir(out, owns=roofline.OWNS):
        assert roofline.main(roofline_args(tiny_config, out)) == 2
    line = one_error_line(capsys)
    assert "another run" in line and f"pid {os.getpid()}" in line and str(out) in line
    assert (out / "results.json").read_text() == '{"earlier": true}'


def _child(code: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", code],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_a_run_in_another_process_holds_the_lock(tiny_config, tmp_path, capsys):
    out = tmp_path / "out"
    holder = _child(
        f"from microbench.core.outdir import OutputDir\nimport sys\n"
        f"with OutputDir({str(out)!r}):\n    print('locked', flush=True)\n    sys.stdin.read()\n"
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        assert roofline.main(roofline_args(tiny_config, out)) == 2
        assert f"another run (pid {holder.pid})" in one_error_line(capsys)
    finally:
        holder.communicate("")
    assert holder.returncode == 0


@pytest.mark.slow
def test_sigterm_from_outside(tiny_config, tmp_path):
    """A real SIGTERM from another process, as `timeout` or a batch scheduler sends it."""
    tiny_config.write_text(tiny_config.read_text().replace('"cupy_blas"', '"t_wait"'))
    out = tmp_path / "out"
    child = _child(f"""
import importlib, sys, time
from microbench.roofline.registry import provider

@provider("gemm", "t_wait")
def wait(a, b, *, allow_tf32=False):
    if a.shape[-2] == 7:  # the second GEMM shape: tell the parent, then wait for its SIGTERM
        print("measuring", file=sys.stderr, flush=True)
        time.sleep(300)
    return a @ b

sys.exit(importlib.import_module("microbench.roofline.cli").main({roofline_args(tiny_config, out)!r}))
""")
    try:
        for line in child.stderr:
            if line.strip() == "measuring":
                break
        child.send_signal(signal.SIGTERM)
        _, err = child.communicate(timeout=120)
    finally:
        child.kill()
    assert child.returncode == 143, err
    assert "Traceback" not in err and "interrupted: kept 5 measured rows" in err
    doc = json.loads((out / "results.json").read_text())
    assert doc["interrupted"] is True and len(doc["results"]) == 5 and (out / "report.html").is_file()


def _interrupting_provider(sig):
    @provider("gemm", "t_interrupt")
    def interrupt(a, b, *, allow_tf32=False):
        if a.shape[-2] == 7:  # the tiny profile's second GEMM: the interrupt comes after rows were measured
            if sig is None:
                raise KeyboardInterrupt
            os.kill(os.getpid(), sig)
        return a @ b


@pytest.mark.parametrize("sig,code", [(None, 130), (signal.SIGTERM, 143)])
def test_interrupt_keeps_rows_writes_the_report_and_keeps_the_earlier_run(tiny_config, tmp_path, sig, code):
    tiny_config.write_text(tiny_config.read_text().replace('"cupy_blas"', '"t_interrupt"'))
    out = tmp_path / "out"
    earlier_run(out)
    with registry.scoped():
        _interrupting_provider(sig)
        assert roofline.main(roofline_args(tiny_config, out)) == code
    doc = json.loads((out / "results.json").read_text())
    # shape 1 in fp32 and bf16 through both providers, then shape 2 in fp32 through torch: 5 rows
    assert doc["interrupted"] is True and len(doc["results"]) == 5
    assert "(interrupted)" in (out / "report.html").read_text()
    assert (out / "previous" / "results.json").read_text() == '{"earlier": true}'
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # the handler is ours only while writing


def test_previous_keeps_the_last_complete_run(tmp_path):
    out = tmp_path / "out"
    earlier_run(out)  # complete: no "interrupted" key
    for n in (1, 2):  # two interrupted runs in a row
        with OutputDir(out, owns=("results.json",)) as od:
            od.file("results.json").write_text(json.dumps({"interrupted": True, "n": n}))
            od.commit(keep_previous=True)
    assert json.loads((out / "results.json").read_text())["n"] == 2
    assert (out / "previous" / "results.json").read_text() == '{"earlier": true}'


def test_interrupt_before_the_first_row_leaves_out_as_it_was(tiny_config, tmp_path, monkeypatch):
    out = tmp_path / "out"
    earlier_run(out)

    def ctrl_c(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr("microbench.roofline.ceilings.build_ceilings", ctrl_c)
    assert roofline.main(roofline_args(tiny_config, out)) == 130
    assert sorted(p.name for p in out.iterdir()) == [LOCK_NAME, "results.csv", "results.json", "roofline.png"]
    assert (out / "results.json").read_text() == '{"earlier": true}'


@pytest.mark.parametrize("command", ["trace", "compare"])
def test_ctrl_c_in_trace_and_compare(command, monkeypatch, capsys):
    def ctrl_c(*a, **k):
        raise KeyboardInterrupt

    if command == "trace":
        monkeypatch.setattr(trace_cmd, "read_trace", ctrl_c)  # Ctrl-C while the trace is read
        code = trace_cmd.main([str(SLICE)])
    else:
        monkeypatch.setattr(compare_cmd, "comparison", ctrl_c)
        code = compare_cmd.main([str(DOC_RESULTS)])
    assert code == 130
    assert one_error_line(capsys) == "interrupted"


# ---- 2. output paths, checked before any work ------------------------------------------------------------
def _bad_paths(tmp_path):
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    a_dir = tmp_path / "a_dir"
    a_dir.mkdir()
    return a_file, a_dir


@pytest.mark.parametrize(
    "case",
    [
        "roofline --out FILE",
        "roofline --out FILE/sub",
        "decompose --out FILE",
        "trace --json DIR",
        "compare --json DIR",
        "compare --html DIR",
        "inspect --json DIR",
        "inspect --json FILE/x.json",
    ],
)
def test_bad_output_paths(case, tmp_path, tiny_config, monkeypatch, capsys):
    a_file, a_dir = _bad_paths(tmp_path)
    target = {"FILE": a_file, "FILE/sub": a_file / "sub", "DIR": a_dir, "FILE/x.json": a_file / "x.json"}[
        case.split()[-1]
    ]

    def no_work(*a, **k):
        raise AssertionError("the output path must be checked before any work")

    command, opt = case.split()[:2]
    if command == "roofline":
        monkeypatch.setattr(roofline, "load_config", no_work)
        code = roofline.main(roofline_args(tiny_config, target))
    elif command == "decompose":
        monkeypatch.setattr(decompose_cmd, "decompose_step", no_work)
        code = decompose_cmd.main(["--model", "resnet9", "--out", str(target)])
    elif command == "trace":
        monkeypatch.setattr(trace_cmd.TraceAnalysis, "open", no_work)
        code = trace_cmd.main([str(SLICE), opt, str(target)])
    elif command == "compare":
        monkeypatch.setattr(compare_cmd, "comparison", no_work)
        code = compare_cmd.main([str(DOC_RESULTS), opt, str(target)])
    else:
        monkeypatch.setattr(inspect_cmd, "records", no_work)
        code = inspect_cmd.main([opt, str(target)])
    assert code == 2
    line = one_error_line(capsys)
    assert line.startswith("error: ") and str(target) in line and opt in line


def test_read_only_folder(tmp_path, monkeypatch):
    # Tests may run as root, for whom every folder is writable: ask os.access the way a normal user would.
    ro = tmp_path / "ro"
    ro.mkdir()
    real = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: False if str(p) == str(ro) else real(p, mode))
    for check, path in ((check_dir, ro), (check_dir, ro / "new"), (check_file, ro / "x.json")):
        with pytest.raises(InputError) as e:
            check(path)
        assert "not writable" in e.value.line() and str(ro) in e.value.line()


def test_inspect_kernel_matching_nothing(monkeypatch, capsys):
    seen = {}

    def run(targets, kernel_filter, **kw):  # the real one compiles every kernel for a minute before filtering
        seen["filter"] = kernel_filter
        return inspect_cmd.Inspection()

    monkeypatch.setattr(inspect_cmd, "run", run)
    assert inspect_cmd.main(["--kernel", "no_such_kernel_name"]) == 2
    assert not seen  # refused from the kernels' names, before compiling anything
    assert one_error_line(capsys).startswith(
        "error: --kernel = 'no_such_kernel_name': no kernel of ours has this in its name (ours: "
    )


# ---- 3. numbers in their domain ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    "section,key,value,problem",
    [
        ("tolerance", "fp32", "nan", "expected a finite number"),
        ("tolerance", "fp32", "inf", "expected a finite number"),
        ("tolerance", "bf16", "2.0", "larger than the largest accepted value, 1"),
        ("timing", "warmup_ms", "nan", "expected a finite number"),
        ("timing", "rep_ms", "inf", "expected a finite number"),
        ("timing", "warmup_ms", "1e12", "larger than the largest accepted value, 60000"),
        ("timing", "max_reps", "9223372036854775807", "larger than the largest accepted value, 1e+06"),
    ],
)
def test_config_numbers_out_of_their_domain(tiny_config, section, key, value, problem):
    lines = [line for line in tiny_config.read_text().splitlines() if not line.startswith(f"{key} =")]
    lines.insert(lines.index(f"[{section}]") + 1, f"{key} = {value}")
    tiny_config.write_text("\n".join(lines) + "\n")
    with pytest.raises(ConfigError) as e:
        load_config(tiny_config)
    shown = {"nan": "nan", "inf": "inf"}.get(value, value if value.isdigit() else repr(float(value)))
    assert e.value.line() == f"{tiny_config}: {section}.{key} = {shown}: {problem}"


def test_timing_maximum_is_documented():
    assert f"at most {MAX_TIMING_MS:g}" in (REPO / "docs" / "failures.md").read_text()


def test_non_utf8_config(tmp_path, capsys):
    p = tmp_path / "bench.toml"
    p.write_bytes(b'[profiles.x]\ndescription = "caf\xe9"\n')
    assert roofline.main(["--config", str(p), "--out", str(tmp_path / "out")]) == 2
    assert one_error_line(capsys) == f"error: {p}: not UTF-8 text (TOML files are UTF-8): byte 31 is 0xe9"


def _results_doc():
    return json.loads(DOC_RESULTS.read_text())


@pytest.mark.parametrize(
    "mutate,key,value",
    [
        (lambda d: d["results"][0].update(flags=5), "results[0].flags", "5"),
        (lambda d: d["config"].update(profile=5), "config.profile", "5"),
        (lambda d: d["software"].update(torch=[2, 13]), "software.torch", "[2, 13]"),
        (lambda d: d["results"][8]["time_ms"].update(median=float("nan")), "results[8].time_ms.median", "nan"),
        (lambda d: d["results"][8].update(tflops=float("inf")), "results[8].tflops", "inf"),
        (lambda d: d["results"][8]["time_ms"].update(median=-1.0), "results[8].time_ms.median", "-1.0"),
        (lambda d: d["results"][0].update(status=["ok"]), "results[0].status", "['ok']"),
    ],
)
def test_results_fields_of_the_wrong_type(tmp_path, capsys, mutate, key, value):
    doc = _results_doc()
    mutate(doc)
    p = tmp_path / "results.json"
    p.write_text(json.dumps(doc))  # Python writes nan/inf as NaN/Infinity, which json.loads reads back
    assert compare_cmd.main([str(DOC_RESULTS), str(p)]) == 2
    line = one_error_line(capsys)
    assert line.startswith(f"error: {p}: {key} = {value}")


@pytest.mark.parametrize(
    "mutate,key,value",
    [
        (lambda d: d["summary"].update(kernel_time_us=float("inf")), "summary.kernel_time_us", "inf"),
        (lambda d: d["summary"].update(time_by_class_us=[1]), "summary.time_by_class_us", "'list'"),
        (lambda d: d.update(ops=[{"op": 5}]), "ops[0].op", "5"),
    ],
)
def test_trace_reports_with_wrong_fields_in_compare(tmp_path, capsys, mutate, key, value):
    report = tmp_path / "report.json"
    assert trace_cmd.main([str(SLICE), "--json", str(report)]) == 0
    doc = json.loads(report.read_text())
    mutate(doc)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    capsys.readouterr()
    assert compare_cmd.main([str(report), str(bad)]) == 2
    assert one_error_line(capsys).startswith(f"error: {bad}: {key} = {value}")


def test_json_writer_never_writes_nan_or_inf():
    doc = {
        "a": float("nan"),
        "b": [float("inf"), -float("inf")],
        "c": (np.float32("nan"), np.float64(1.5)),
        "d": {"e": np.int64(3)},
    }
    assert json.loads(dumps(doc)) == {"a": None, "b": [None, None], "c": [None, 1.5], "d": {"e": 3}}

    class Sneaky(float):  # a float subclass that claims to be finite still cannot reach the file as NaN
        pass

    assert "NaN" not in dumps({"x": Sneaky("nan")})
    with pytest.raises((TypeError, ValueError)):  # what clean() cannot see, the writer refuses
        dumps({"x": _Opaque()})


class _Opaque:
    pass


@pytest.mark.parametrize(
    "field,literal,expected",
    [
        ("dur", "NaN", "not valid JSON"),  # not JSON at all, though Python's own reader accepts it
        ("ts", "Infinity", "not valid JSON"),
        ("dur", "1e999", "].dur: Number out of range"),
        ("dur", "1e308", "dur=1e+308: expected finite microseconds"),
        ("ts", "-1e308", "ts=-1e+308, dur=3.136: expected finite microseconds"),
        (
            "args.correlation",
            "100000000000000000000",
            "has args.correlation=100000000000000000000: too large for an id",
        ),
        ("args.device", str(2**40), f"has args.device={2**40}: too large for an id"),
        ("args.External id", "-100000000000000000000", "has args.External id=-100000000000000000000: too large"),
    ],
)
def test_trace_events_out_of_their_domain(tmp_path, capsys, field, literal, expected):
    doc = json.loads(SLICE.read_text())
    i, ev = next((i, e) for i, e in enumerate(doc["traceEvents"]) if e.get("cat") == "kernel")
    target = ev["args"] if field.startswith("args.") else ev
    target[field.removeprefix("args.")] = "@@"
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(doc).replace('"@@"', literal))
    assert trace_cmd.main([str(path)]) == 2
    line = one_error_line(capsys)
    assert line.startswith(f"error: {path}: ") and expected in line
    if "JSON" not in expected:
        assert f"traceEvents[{i}]" in line


@pytest.mark.parametrize(
    "value,expected",
    [
        ("1e308", "has args.smsp__sass_thread_inst_executed_op_ffma_pred_on.sum=1e+308: expected a count"),
        ("-5", "=-5: expected a count"),
        ("1e999", "Number out of range"),
    ],
)
def test_trace_counters_out_of_their_domain(tmp_path, capsys, value, expected):
    doc = json.loads(SLICE.read_text())
    doc["traceEvents"].append(
        {
            "ph": "X",
            "cat": "cuda_profiler_range",
            "name": "gemm_kernel",
            "pid": 0,
            "tid": 7,
            "ts": 1419247333800.0,
            "dur": 5.0,
            "args": {"smsp__sass_thread_inst_executed_op_ffma_pred_on.sum": "@@"},
        }
    )
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(doc).replace('"@@"', value))
    assert trace_cmd.main([str(path)]) == 2
    line = one_error_line(capsys)
    assert line.startswith(f"error: {path}: traceEvents[{len(doc['traceEvents']) - 1}]") and expected in line


# ---- 4. --model: anything the user's module does is one line ---------------------------------------------
@pytest.mark.parametrize(
    "module,source,expected",
    [
        ("fm_syntax", "def make(:\n", "importing 'fm_syntax' failed: SyntaxError: invalid syntax"),
        ("fm_raise", "raise RuntimeError('no GPU here')\n", "importing 'fm_raise' raised RuntimeError: no GPU here"),
        ("fm_exit", "import sys\nsys.exit(3)\n", "importing 'fm_exit' exited (SystemExit with code 3)"),
        (
            "fm_factory_exit",
            "import sys\ndef make():\n    sys.exit(3)\n",
            "the factory exited (SystemExit with code 3)",
        ),
        ("builtins", None, "the factory exited (SystemExit with code None)"),
    ],
)
def test_model_modules_that_fail(tmp_path, monkeypatch, capsys, module, source, expected):
    if source is not None:
        (tmp_path / f"{module}.py").write_text(source)
        monkeypatch.syspath_prepend(str(tmp_path))
    spec = f"{module}:make" if source is not None else "builtins:exit"
    code = decompose_cmd.main(
        ["--model", spec, "--out", str(tmp_path / "out"), "--no-replay", "--no-measure-ceilings", "--device", "cpu"]
    )
    assert code == 2
    line = one_error_line(capsys)
    assert line.startswith(f"error: --model = {spec!r}: ") and expected in line
    assert not (tmp_path / "out" / "results.json").exists()


# ---- 5. paths inside a config ------------------------------------------------------------------------------
GEMM_FROM = """
[tolerance]
fp32 = 1e-5
tf32 = 5e-3
fp16 = 5e-3
bf16 = 3e-2
fp8_e4m3 = 0.15
[profiles.p]
providers = ["torch"]
[[profiles.p.gemm]]
dtypes = ["fp32"]
from = "{spec}"
"""


@pytest.mark.parametrize(
    "spec,problem",
    [
        ("../../../../etc/passwd:x", "climbs out of the config's folder"),
        ("/etc/passwd:x", "not an absolute one"),
        ("nowhere.toml:x", "no such file"),
    ],
)
def test_config_paths_stay_in_the_config_folder(tmp_path, spec, problem):
    cfg = tmp_path / "bench.toml"
    cfg.write_text(GEMM_FROM.format(spec=spec))
    with pytest.raises(ConfigError) as e:
        load_config(cfg)
    assert e.value.line().startswith(f"{cfg}: profiles.p.gemm[0].from = {spec!r}: ") and problem in e.value.line()


def test_config_paths_resolve_against_the_config_folder(tmp_path, monkeypatch):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "mine.toml").write_text("[gemm]\nsizes = [[3, 5, 7, false, true]]\n")
    cfg = tmp_path / "bench.toml"
    cfg.write_text(GEMM_FROM.format(spec="sub/mine.toml:gemm.sizes"))
    monkeypatch.chdir(REPO)  # not the config's folder
    (case,) = load_config(cfg).case_set("p").cases
    assert (case.shape.m, case.shape.n, case.shape.k, case.shape.trans_a, case.shape.trans_b) == (3, 5, 7, False, True)
    # and the project's own data files are still found by name
    assert len(load_config().case_set("full").cases) > len(load_config().case_set("default").cases)


def test_a_reader_that_goes_away_costs_no_file_and_no_traceback(tmp_path):
    """`trace FILE --json J --html H | head`: the files are written before the terminal report, so a closed pipe
    (the read end closed before the command starts: every write to stdout fails) leaves both whole; the command
    ends quietly with 141, as a process killed by SIGPIPE would, and no traceback."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    out_json, out_html = tmp_path / "t.json", tmp_path / "t.html"
    try:
        p = subprocess.run(
            [
                sys.executable,
                "-m",
                "microbench.trace",
                str(REPO / "tests/data/traces/h100_bert_small.json.gz"),
                "--json",
                str(out_json),
                "--html",
                str(out_html),
            ],
            cwd=REPO,
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=600,
        )
    finally:
        os.close(write_end)
    assert p.returncode == 141, p.stderr
    assert "Traceback" not in p.stderr and "Exception ignored" not in p.stderr
    assert json.loads(out_json.read_text())["findings"][0]["id"] == "launch_bound"
    assert out_html.read_text().rstrip().endswith("</html>")
