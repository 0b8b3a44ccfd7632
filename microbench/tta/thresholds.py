"""How much the threshold decides: time-to-accuracy over a range of thresholds, for every entry with a
per-epoch (or per-evaluation) accuracy curve: DAWNBench training TSVs, MLPerf result logs (their
`eval_accuracy` events) and our own runs (`tta.json` of `dawnscope tta run`, one entry per seed).

The rule at each threshold is the one of the entry's leaderboard: the first row (evaluation) whose accuracy
reaches it; an MLPerf submission is scored over its runs by the MLPerf rule (mlperf.olympic_score), a run that
never reaches the threshold counting as an aborted one. Everything is in percent here (SQuAD's F1 and the
fractions of MLPerf and of our runs are scaled by 100), so one range means the same on every task.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from microbench.core.errors import InputError

from . import dawnbench, mlperf
from .dawnbench import read_text
from .entry import Unreadable
from .leaderboard import input_files
from .rules import mlperf_drop_each_side, mlperf_ruleset, mlperf_target, threshold_grid_defaults

# Accuracies are compared with the thresholds after a scaling by 100: 0.759 * 100 is 75.89999999999999.
EPS_PCT = 1e-9
OURS_SCHEMA = "dawnscope.tta/1"
OURS_RECIPES_SCHEMA = "dawnscope.tta-recipes/1"


@dataclass
class Curve:
    """One entry: one or more runs, each a list of (seconds, accuracy in percent) in file order."""

    source: str  # dawnbench, mlperf or ours
    task: str
    file: str
    label: str
    official_pct: float | None  # the task's own threshold, in percent
    runs: list[list[tuple[float, float]]]
    drop_each_side: int = 0  # MLPerf's rule; 0 for a single run

    def tta_s(self, threshold_pct: float) -> float | None:
        times = [first_reaching(run, threshold_pct) for run in self.runs]
        if len(times) == 1:
            return times[0]
        reached = [t for t in times if t is not None]
        minutes = mlperf.olympic_score([t / 60 for t in reached], len(times) - len(reached), self.drop_each_side)
        return None if minutes is None else minutes * 60

    @property
    def max_pct(self) -> float:
        return max(a for run in self.runs for _, a in run)


def first_reaching(run: list[tuple[float, float]], threshold_pct: float) -> float | None:
    return next((t for t, a in run if a >= threshold_pct - EPS_PCT), None)


@dataclass
class Study:
    rows: list[dict] = field(default_factory=list)  # one per entry and threshold
    entries: list[dict] = field(default_factory=list)  # one per entry
    tasks: list[dict] = field(default_factory=list)  # one per (source, task)
    unreadable: list[dict] = field(default_factory=list)  # {file, reason}
    skipped: int = 0

    def as_dict(self) -> dict:
        return {
            "rows": self.rows,
            "entries": self.entries,
            "tasks": self.tasks,
            "unreadable": self.unreadable,
            "skipped": self.skipped,
        }


# ---- reading the curves -------------------------------------------------------------------------------------
def dawn_curve(tsv: Path) -> Curve:
    task = dawnbench.task_of(tsv)
    rows = dawnbench.read_tsv(tsv, task.metric)
    run = [(r["hours"] * 3600, r["accuracy"] * task.to_percent) for r in rows]
    return Curve("dawnbench", task.name, str(tsv), tsv.stem, task.threshold * task.to_percent, [run])


def mlperf_curve(folder: Path, files: list[Path], unreadable: list[dict]) -> Curve | None:
    ruleset = mlperf_ruleset(folder)
    runs, benchmark = [], None
    for f in sorted(files):
        try:
            runs.append([(t, a * 100) for t, a in mlperf.eval_curve(f, ruleset)])
            benchmark = benchmark or mlperf.read_run(f, ruleset, check=False)["submission_benchmark"]
        except Unreadable as e:
            unreadable.append({"file": str(f), "reason": str(e)})
    if not runs:
        return None
    benchmark = benchmark or folder.name
    target = mlperf_target(ruleset, benchmark)
    return Curve(
        "mlperf",
        benchmark,
        str(folder),
        folder.parent.name,
        None if target is None else target * 100,
        runs,
        mlperf_drop_each_side(benchmark),
    )


def our_curves(path: Path) -> list[Curve]:
    """Every seed of one of our runs (tta.json) as an entry of the task `ours:MODEL/DATASET`."""
    try:
        doc = json.loads(read_text(path))  # a regular file, bounded (a FIFO named tta.json is listed, not read)
    except (json.JSONDecodeError, RecursionError) as e:
        raise Unreadable(f"not a readable tta.json: {str(e)[:120]}") from None
    if isinstance(doc, dict) and doc.get("schema") == OURS_RECIPES_SCHEMA and isinstance(doc.get("recipes"), list):
        docs = doc["recipes"]
    elif isinstance(doc, dict) and doc.get("schema") == OURS_SCHEMA:
        docs = [doc]
    else:
        raise Unreadable(f"not a tta.json of ours (schema {OURS_SCHEMA!r} or {OURS_RECIPES_SCHEMA!r})")
    out = [c for d in docs if isinstance(d, dict) for c in _run_curves(path, d)]
    if not out:
        raise Unreadable("no run with a per-epoch accuracy")
    return out


def _run_curves(path: Path, doc: dict) -> list[Curve]:
    out = []
    target = doc.get("target")
    if not _finite(target):
        raise Unreadable(f"target = {target!r} is not a number")
    for r in doc.get("runs") or []:
        run = [
            (float(e["elapsed_s"]), float(e["accuracy"]) * 100)
            for e in r.get("epochs") or []
            if _finite(e.get("elapsed_s")) and _finite(e.get("accuracy"))
        ]
        if run:
            recipe = doc.get("recipe")
            label = f"seed {r.get('seed')}" + (f" ({recipe})" if recipe else "")
            out.append(Curve("ours", f"ours:{doc.get('model')}", str(path), label, float(target) * 100, [run]))
    return out


def _finite(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def read_curves(roots: list[str | Path], study: Study) -> list[Curve]:
    curves: list[Curve] = []
    found = input_files(roots)
    study.skipped = found.skipped
    for tsv in found.tsvs:
        _guarded(study, tsv, lambda tsv=tsv: curves.append(dawn_curve(tsv)))
    for folder, files in sorted(found.mllogs.items()):
        c = mlperf_curve(folder, files, study.unreadable)
        curves += [c] if c else []
    for doc in found.ours:
        _guarded(study, doc, lambda doc=doc: curves.extend(our_curves(doc)))
    return curves


def _guarded(study: Study, path: Path, read) -> None:
    try:
        read()
    except Unreadable as e:
        study.unreadable.append({"file": str(path), "reason": str(e)})


# ---- the thresholds -----------------------------------------------------------------------------------------
def check_range(lo: float | None, hi: float | None, step: float | None) -> tuple[float, float, float] | None:
    """The user's range in percent, checked; None when none was given (then each task's default)."""
    if lo is None and hi is None and step is None:
        return None
    for key, v in (("--from", lo), ("--to", hi), ("--step", step)):
        if v is None:
            raise InputError(key, "a range needs all three of --from, --to and --step")
        if not math.isfinite(v):
            raise InputError(key, f"{v!r} is not a finite number")
    for key, v in (("--from", lo), ("--to", hi)):
        if not 0 <= v <= 100:
            raise InputError(key, f"{v:g} is not a threshold in percent (0-100)")
    if hi < lo:
        raise InputError("--to", f"{hi:g} is below --from {lo:g}")
    if step <= 0:
        raise InputError("--step", f"{step:g}: a range needs a positive step")
    limit = int(threshold_grid_defaults()["max_points"])
    if (hi - lo) / step + 1 > limit:
        raise InputError("--step", f"{step:g} makes {int((hi - lo) / step) + 1} thresholds (at most {limit})")
    return lo, hi, step


def grid(lo: float, hi: float, step: float) -> list[float]:
    n = int(math.floor((hi - lo) / step + 1e-9)) + 1
    return [round(lo + i * step, 6) for i in range(n)]


def default_grid(official_pct: float | None, curves: list[Curve]) -> list[float]:
    d = threshold_grid_defaults()
    centre = official_pct if official_pct is not None else max(c.max_pct for c in curves)
    return grid(max(0.0, centre - d["below"]), min(100.0, centre + d["above"]), d["step"])


def ranks(times: list[float | None]) -> list[int | None]:
    """1 for the fastest; ties share a rank (1 + how many are strictly faster); None for never reached."""
    return [None if t is None else 1 + sum(1 for o in times if o is not None and o < t) for t in times]


def study(
    roots: list[str | Path], task: str | None = None, user_range: tuple[float, float, float] | None = None
) -> Study:
    """Every curve under `roots` (only `task`'s, matched ignoring case, when given), at every threshold of
    `user_range` (percent: from, to, step) or of each task's default range around its own threshold."""
    out = Study()
    curves = read_curves(roots, out)
    if task is not None:
        curves = [c for c in curves if c.task.lower() == task.lower()]
        if not curves:
            raise InputError(
                "--task",
                f"{task!r}: no entry of that task (tasks here: "
                f"{', '.join(sorted({c.task for c in read_curves(roots, Study())})) or 'none'})",
            )
    groups: dict[tuple[str, str], list[Curve]] = defaultdict(list)
    for c in curves:
        groups[(c.source, c.task)].append(c)
    for (source, name), group in sorted(groups.items()):
        official = group[0].official_pct
        thresholds = grid(*user_range) if user_range else default_grid(official, group)
        _study_task(out, source, name, official, group, thresholds)
    return out


def _study_task(
    out: Study, source: str, task: str, official: float | None, group: list[Curve], thresholds: list[float]
) -> None:
    at_official = ranks([c.tta_s(official) for c in group]) if official is not None else [None] * len(group)
    table = {t: [c.tta_s(t) for c in group] for t in thresholds}
    rank_table = {t: ranks(times) for t, times in table.items()}
    for i, c in enumerate(group):
        for t in thresholds:
            out.rows.append(
                {
                    "source": source,
                    "task": task,
                    "file": c.file,
                    "entry": c.label,
                    "threshold": t,
                    "tta_seconds": table[t][i],
                    "rank": rank_table[t][i],
                }
            )
        stops = next((t for t in thresholds if table[t][i] is None), None)
        seen = [rank_table[t][i] for t in thresholds if rank_table[t][i] is not None]
        out.entries.append(
            {
                "source": source,
                "task": task,
                "file": c.file,
                "entry": c.label,
                "runs": len(c.runs),
                "official_threshold": official,
                "tta_seconds_at_official": c.tta_s(official) if official is not None else None,
                "rank_at_official": at_official[i],
                "best_rank": min(seen, default=None),
                "worst_rank": max(seen, default=None),
                "max_accuracy": c.max_pct,
                "stops_reaching_at": stops,
            }
        )
    out.tasks.append(
        {
            "source": source,
            "task": task,
            "official_threshold": official,
            "entries": len(group),
            "thresholds": thresholds,
            "reaching": [sum(x is not None for x in table[t]) for t in thresholds],
            "rank_changes": [_changed(rank_table[t], at_official) for t in thresholds],
        }
    )


def _changed(now: list[int | None], official: list[int | None]) -> int | None:
    """How many entries hold another rank (or reach / miss) than at the task's own threshold."""
    if all(r is None for r in official):
        return None
    return sum(1 for a, b in zip(now, official) if a != b)
