"""DAWNBench v1 training submissions: a TSV (one row per epoch) and a JSON (who, what hardware, what cost).

Time-to-accuracy is the `hours` of the first row whose accuracy reaches the task's threshold (the rule of
dawn-bench-entries; thresholds in microbench/data/tta.toml). The real files are untidy: a UTF-8 byte-order
mark, CR LF line ends, columns in any order and any case, padded values. All of that is read; anything
else is an Unreadable with the line and the value.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

from microbench.core.errors import InputError
from microbench.core.files import exists, read_input

from .entry import Entry, Unreadable
from .rules import DawnTask, dawn_tasks

# A submission's TSV or JSON: a few kilobytes; beyond these the file is no submission (or a device).
MAX_FILE_BYTES = 16 << 20
MAX_VALUE = 1e9  # any epoch, hours or accuracy: beyond it (or nan, inf) a broken file


def read_text(path: Path) -> str:
    try:
        raw = read_input(path, max_bytes=MAX_FILE_BYTES)  # a regular file only, bounded
    except InputError as e:
        raise Unreadable(e.problem) from None
    try:
        return raw.decode("utf-8-sig")  # drops a byte-order mark
    except UnicodeDecodeError as e:
        raise Unreadable(f"not UTF-8 text (byte {e.start})") from None


def task_of(path: Path) -> DawnTask:
    """The task is the folder on the path named like one of tta.toml's tasks (CIFAR10/train/x.tsv)."""
    tasks = {k.lower(): t for k, t in dawn_tasks().items()}
    for part in reversed(path.parent.parts):
        if part.lower() in tasks:
            return tasks[part.lower()]
    raise Unreadable(f"no task folder on its path (one of {', '.join(dawn_tasks())})")


def read_tsv(path: Path, metric: str) -> list[dict]:
    """Rows of (epoch, hours, accuracy) in file order."""
    lines = [ln for ln in read_text(path).splitlines() if ln.strip()]
    if not lines:
        raise Unreadable("empty file")
    try:
        rows = list(csv.reader(lines, delimiter="\t"))
    except csv.Error as e:  # a field beyond the csv module's limit (131072 characters)
        raise Unreadable(f"not a TSV of epochs: {e}") from None
    header = [h.strip().lstrip("\ufeff").lower() for h in rows[0]]
    cols = {}
    for want in ("epoch", "hours", metric.lower()):
        if want not in header:
            raise Unreadable(f"no column {want!r} (columns: {', '.join(rows[0])})")
        cols[want] = header.index(want)
    out = []
    for lineno, r in enumerate(rows[1:], start=2):
        rec = {}
        for name, i in cols.items():
            v = r[i].strip() if i < len(r) else ""
            try:
                rec[name] = float(v)
            except ValueError:
                rec[name] = math.nan
            if not 0 <= rec[name] <= MAX_VALUE:  # also false for nan
                raise Unreadable(f"line {lineno}: column {name!r} = {v[:40]!r} is not a number from 0 to {MAX_VALUE:g}")
        out.append({"epoch": rec["epoch"], "hours": rec["hours"], "accuracy": rec[metric.lower()]})
    if not out:
        raise Unreadable("a header and no rows")
    return out


def read_meta(tsv: Path, notes: list[str]) -> dict:
    """The submission's JSON beside the TSV; without it (or unreadable) the entry has no hardware or cost."""
    path = tsv.with_suffix(".json")
    if not exists(path):
        notes.append("no JSON beside the TSV: hardware and cost unknown")
        return {}
    try:
        doc = json.loads(read_text(path))
    except (Unreadable, json.JSONDecodeError) as e:
        notes.append(f"{path.name} unreadable ({str(e)[:120]}): hardware and cost unknown")
        return {}
    except RecursionError:
        notes.append(f"{path.name} unreadable (JSON nested too deeply): hardware and cost unknown")
        return {}
    if not isinstance(doc, dict):
        notes.append(f"{path.name} is a JSON {type(doc).__name__}, not an object: hardware and cost unknown")
        return {}
    return doc


def _cost_per_hour(meta: dict, notes: list[str]) -> float | None:
    v = meta.get("costPerHour")
    if v is None:
        return None
    try:
        rate = float(v)
    except (TypeError, ValueError, OverflowError):
        rate = math.nan
    if not 0 <= rate <= MAX_VALUE:  # also false for nan
        notes.append(f"costPerHour = {str(v)[:40]!r} is not a number from 0 to {MAX_VALUE:g}: cost unknown")
        return None
    return rate


def read_submission(tsv: Path) -> Entry:
    task = task_of(tsv)
    rows = read_tsv(tsv, task.metric)
    notes: list[str] = []
    meta = read_meta(tsv, notes)
    hit = next((r for r in rows if r["accuracy"] >= task.threshold), None)
    if any(b["hours"] < a["hours"] for a, b in zip(rows, rows[1:])):
        notes.append("hours decrease somewhere: rows read in file order, as the leaderboard did")
    rate = _cost_per_hour(meta, notes)
    e = Entry(
        source="dawnbench",
        task=task.name,
        file=str(tsv),
        tta_seconds=hit["hours"] * 3600 if hit else None,
        epoch=hit["epoch"] if hit else None,
        accuracy=hit["accuracy"] if hit else None,
        metric=task.metric,
        threshold=task.threshold,
        cost_usd=hit["hours"] * rate if hit and rate is not None else None,
        hardware=_s(meta.get("hardware")),
        framework=_s(meta.get("framework")),
        model=_s(meta.get("model")),
        author=_s(meta.get("author")),
        notes=notes,
    )
    if hit is None:
        e.notes.append(f"never reaches {task.metric} >= {task.threshold:g} (best {max(r['accuracy'] for r in rows):g})")
    return e


def _s(v) -> str | None:
    """A text field of the JSON: a string (cut to 200 characters) or nothing; another type is not shown."""
    return v[:200] if isinstance(v, str) else None
