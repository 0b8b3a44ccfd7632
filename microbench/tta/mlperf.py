"""MLPerf Training result logs (`:::MLLOG {json}` lines), parsed and checked with MLCommons' own
mlperf-logging package, scored by the MLPerf rule (microbench/data/tta.toml).

A folder of result_*.txt files is one submission of one benchmark; each file is one run. A run's time is
run_stop - run_start (the first of each, as mlperf-logging's result_summarizer reads them). mlperf-logging's
parser already takes the untidy lines: rank prefixes before `:::MLLOG`, CR LF, a byte-order mark.
"""

from __future__ import annotations

import logging
import math
import statistics
from pathlib import Path

from microbench.core.errors import InputError
from microbench.core.files import read_input

from .entry import Entry, Unreadable
from .rules import mlperf_drop_each_side, mlperf_ruleset, mlperf_runs_required, mlperf_usage


def olympic_score(minutes: list[float], aborted: int, drop_each_side: int) -> float | None:
    """The mean after dropping the `drop_each_side` fastest and slowest runs; each aborted run is one of the
    slowest dropped (result_summarizer's _compute_olympic_average). None: too many aborted runs, or none left."""
    if aborted > drop_each_side:
        return None
    s = sorted(minutes)
    kept = s[drop_each_side : len(s) - (drop_each_side - aborted)]
    return statistics.fmean(kept) if kept else None


def _compliance(path: Path, ruleset: str) -> str:
    """`ok`, or the checker's first message: recorded per run, it does not change the score here."""
    from mlperf_logging.compliance_checker import mlp_compliance

    usage = mlperf_usage()
    checker = mlp_compliance.make_checker(usage, ruleset, True, False)
    logging.disable(logging.WARNING)  # the checker logs its messages through the root logger
    try:
        valid = checker.check_file(str(path), f"{usage}_{ruleset}/common.yaml")
    except Exception as e:  # noqa: BLE001 - a checker failure is a finding about this run, not a crash
        return f"not checked: {type(e).__name__}: {e}"
    finally:
        logging.disable(logging.NOTSET)
    if valid:
        return "ok"
    msgs = [*checker.overwritable.values(), *checker.not_overwritable]
    return "failed: " + (str(msgs[0]).strip().splitlines()[0] if msgs else "?")


# A result log's size and line length: beyond them the file is no log (mlperf-logging's parser would take
# minutes over one 5 MB line, or read a device forever).
MAX_LOG_BYTES = 256 << 20
MAX_LINE_BYTES = 64 << 10
MAX_TIME_MS = 1e15  # a timestamp in ms since the epoch: 31,000 years
TEXT_KEYS = ("submission_benchmark", "submission_org", "submission_platform", "submission_division")


def _parse(path: Path, ruleset: str) -> tuple[list, list]:
    """mlperf-logging's parse of one result file, its lines checked: (log lines, unparsable lines)."""
    from mlperf_logging.compliance_checker.mlp_parser import parse_file

    try:
        data = read_input(path, max_bytes=MAX_LOG_BYTES)  # a regular file, bounded
    except InputError as e:
        raise Unreadable(e.problem) from None
    for n, line in enumerate(data.split(b"\n"), start=1):
        if len(line) > MAX_LINE_BYTES:
            raise Unreadable(f"line {n} is {len(line):,} bytes: beyond {MAX_LINE_BYTES:,}, not a log line")
    try:
        loglines, errors = parse_file(str(path), ruleset=ruleset)
    except OSError as e:
        raise Unreadable(f"cannot open: {e.strerror or e}") from None
    except Exception as e:  # noqa: BLE001 - the package's parser on an unexpected ruleset or file
        raise Unreadable(f"mlperf-logging could not parse it: {type(e).__name__}: {str(e)[:200]}") from None
    for ll in loglines:
        _check_line(ll)
    return loglines, errors


def _check_line(ll) -> None:
    """One parsed line, checked where it is read: a string key, a finite time, metadata an object, the values
    the leaderboard reads of the right type (an Unreadable naming the line otherwise)."""
    meta, value = ll.value.get("metadata"), ll.value.get("value")
    problem = None
    if not isinstance(ll.key, str):
        problem = f"key {ll.key!r} is not a string"
    elif not (isinstance(ll.timestamp, float) and math.isfinite(ll.timestamp) and abs(ll.timestamp) <= MAX_TIME_MS):
        problem = f"time_ms {ll.timestamp!r} is not a finite time within {MAX_TIME_MS:g} ms"
    elif meta is not None and not isinstance(meta, dict):
        problem = f"{ll.key}: metadata is {type(meta).__name__}, not an object"
    elif ll.key in TEXT_KEYS and value is not None and not isinstance(value, str):
        problem = f"{ll.key}: value {str(value)[:60]!r} is not a string"
    elif ll.key in ("eval_accuracy", "global_batch_size") and value is not None and not _finite(value):
        problem = f"{ll.key}: value {str(value)[:60]!r} is not a finite number"
    elif ll.key == "eval_accuracy" and not _finite((meta or {}).get("epoch_num", 0)):
        problem = f"eval_accuracy: metadata.epoch_num {str(meta['epoch_num'])[:60]!r} is not a finite number"
    if problem:
        raise Unreadable(f"line {ll.lineno}: {problem}")


def _finite(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def eval_curve(path: Path, ruleset: str) -> list[tuple[float, float]]:
    """One run's accuracy curve: (seconds since run_start, eval_accuracy as logged) per evaluation, in log
    order. The time is the evaluation's own timestamp: MLPerf's official time stops at run_stop, which follows
    the evaluation that reached the target by the few seconds the run takes to stop."""
    loglines, _ = _parse(path, ruleset)
    start = next((ll.timestamp for ll in loglines if ll.key == "run_start"), None)
    if start is None:
        raise Unreadable("no run_start: no clock to read the evaluations against")
    curve = [((ll.timestamp - start) / 1e3, ll.value.get("value")) for ll in loglines if ll.key == "eval_accuracy"]
    curve = [(t, float(v)) for t, v in curve if isinstance(v, (int, float)) and not isinstance(v, bool)]
    if not curve:
        raise Unreadable("no eval_accuracy events with a number: no per-evaluation accuracy to read")
    return curve


def read_run(path: Path, ruleset: str, check: bool = True) -> dict:
    """One result file -> {seconds, status, epoch, accuracy, header keys, compliance}."""
    loglines, errors = _parse(path, ruleset)
    first: dict = {}
    evals = []
    for ll in loglines:
        first.setdefault(ll.key, ll)
        if ll.key == "eval_accuracy":
            evals.append(ll)
    if "run_start" not in first:
        raise Unreadable(
            f"no run_start among {len(loglines)} :::MLLOG lines" + (f" ({len(errors)} unparsable)" if errors else "")
        )
    stop = first.get("run_stop")
    status = str((stop.value.get("metadata") or {}).get("status", "?")) if stop else "no run_stop"
    last = evals[-1] if evals else None
    run = {
        "file": str(path),
        "seconds": (stop.timestamp - first["run_start"].timestamp) / 1e3 if stop else None,
        "status": status,
        "epoch": (last.value.get("metadata") or {}).get("epoch_num") if last else None,
        "accuracy": last.value.get("value") if last else None,
        "parse_errors": len(errors),
        "compliance": _compliance(path, ruleset) if check else "not checked",
    }
    for k in (
        "submission_benchmark",
        "submission_org",
        "submission_platform",
        "submission_division",
        "global_batch_size",
    ):
        run[k] = first[k].value.get("value") if k in first else None
    return run


def read_submission(folder: Path, files: list[Path], unreadable: list[dict], check: bool = True) -> Entry | None:
    """The result files of one folder -> one Entry scored by the rule; unreadable files go to `unreadable`."""
    ruleset = mlperf_ruleset(folder)
    runs = []
    for f in sorted(files):
        try:
            runs.append(read_run(f, ruleset, check))
        except Unreadable as e:
            unreadable.append({"file": str(f), "reason": str(e)})
    if not runs:
        return None
    benchmark = next((r["submission_benchmark"] for r in runs if r["submission_benchmark"]), folder.name)
    ok = [r for r in runs if r["status"] == "success" and r["seconds"] is not None]
    aborted = len(runs) - len(ok)
    drop = mlperf_drop_each_side(benchmark)
    score = olympic_score([r["seconds"] / 60 for r in ok], aborted, drop)
    need = mlperf_runs_required(ruleset, benchmark)
    notes = [
        f"ruleset {ruleset}; score = mean after dropping the {drop} fastest and {drop} slowest "
        f"(aborted runs count among the slowest)"
    ]
    if need is None:
        notes.append(f"tta.toml gives no required number of runs for {benchmark} in {ruleset}")
    elif len(runs) != need:
        notes.append(f"{len(runs)} runs, the rule asks for {need}")
    if aborted:
        notes.append(f"{aborted} run(s) aborted or without run_stop")
    if score is None:
        notes.append("no score: more aborted runs than the rule drops")
    bad = [r for r in runs if r["compliance"] not in ("ok", "not checked")]
    if bad:
        notes.append(f"{len(bad)} run(s) fail mlperf-logging's compliance check, e.g. {bad[0]['compliance']}")
    times = [r["seconds"] for r in ok]
    epochs = [r["epoch"] for r in ok if isinstance(r["epoch"], (int, float))]
    accs = [r["accuracy"] for r in ok if isinstance(r["accuracy"], (int, float))]
    return Entry(
        source="mlperf",
        task=benchmark,
        file=str(folder),
        tta_seconds=score * 60 if score is not None else None,
        epoch=statistics.median(epochs) if epochs else None,
        accuracy=statistics.fmean(accs) if accs else None,
        metric="eval_accuracy (mean of the runs' last)",
        threshold=None,
        hardware=runs[0]["submission_platform"],
        author=runs[0]["submission_org"],
        model=benchmark,
        runs=runs,
        score_minutes=score,
        runs_required=need,
        spread_cov=statistics.pstdev(times) / statistics.fmean(times) if len(times) > 1 else None,
        notes=notes,
    )
