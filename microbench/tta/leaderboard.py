"""The time-to-accuracy leaderboard over folders of DAWNBench submissions and MLPerf result logs."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from microbench.core.errors import InputError
from microbench.core.files import check_input, exists, is_folder, open_input

from . import dawnbench, mlperf
from .entry import Entry, Unreadable

MLLOG_TOKEN = b":::MLLOG"


@dataclass
class Leaderboard:
    entries: list[Entry] = field(default_factory=list)
    unreadable: list[dict] = field(default_factory=list)  # {file, reason}
    skipped: int = 0  # files that are neither (inference entries, notes, ...)

    def by_task(self) -> dict[tuple[str, str], list[Entry]]:
        """(source, task) -> entries, fastest first; entries that never reached the target last."""
        out: dict[tuple[str, str], list[Entry]] = defaultdict(list)
        for e in self.entries:
            out[(e.source, e.task)].append(e)
        for v in out.values():
            v.sort(key=lambda e: (e.tta_seconds is None, e.tta_seconds or 0.0, e.file))
        return dict(sorted(out.items()))

    def as_list(self) -> list[dict]:
        """The --json document: every entry, then every unreadable file (task null, with its `error`)."""
        rows = [e.as_dict() for es in self.by_task().values() for e in es]
        rows += [
            {
                "source": None,
                "task": None,
                "file": u["file"],
                "tta_seconds": None,
                "epoch": None,
                "cost_usd": None,
                "error": u["reason"],
            }
            for u in self.unreadable
        ]
        return rows


def _is_mllog(path: Path) -> bool:
    try:
        with open_input(path) as f:  # a FIFO or a device is not read (it would hang): the reader lists it
            return MLLOG_TOKEN in f.read(1 << 16)
    except (InputError, OSError):
        return True  # let the reader say why it cannot be opened


def _files(roots: list[str | Path]) -> list[Path]:
    out = []
    for root in roots:
        p = Path(root)
        if is_folder(p):  # every entry but folders: a FIFO or a device inside is listed as unreadable
            out += sorted(f for f in p.rglob("*") if not f.is_dir())
        elif exists(p):
            out.append(check_input(p))  # a FIFO or a device named on the command line: one line, exit 2
        else:
            raise InputError(p, "no such file or folder")
    return out


@dataclass
class Inputs:
    """The files under the roots, by kind: DAWNBench training TSVs, MLPerf result logs by folder (one folder is
    one submission), our own runs' tta.json, and how many other files there were."""

    tsvs: list[Path] = field(default_factory=list)
    mllogs: dict[Path, list[Path]] = field(default_factory=lambda: defaultdict(list))
    ours: list[Path] = field(default_factory=list)
    skipped: int = 0


def input_files(roots: list[str | Path]) -> Inputs:
    found = Inputs()
    for f in _files(roots):
        parts = {p.lower() for p in f.parent.parts}
        if f.suffix.lower() == ".tsv" and "inference" not in parts:
            found.tsvs.append(f)
        elif f.suffix.lower() in (".txt", ".log") and _is_mllog(f):
            found.mllogs[f.parent].append(f)
        elif f.name == "tta.json":
            found.ours.append(f)
        else:
            found.skipped += 1
    return found


def build(roots: list[str | Path], check: bool = True) -> Leaderboard:
    """Every DAWNBench training TSV and every MLPerf result log under `roots`. A file that cannot be read is
    listed in `unreadable` with its reason; the others go on."""
    board = Leaderboard()
    found = input_files(roots)
    board.skipped = found.skipped + len(found.ours)  # our own runs are not leaderboard entries
    for f in found.tsvs:
        try:
            board.entries.append(dawnbench.read_submission(f))
        except Unreadable as e:
            board.unreadable.append({"file": str(f), "reason": str(e)})
    for folder, files in sorted(found.mllogs.items()):
        e = mlperf.read_submission(folder, files, board.unreadable, check)
        if e is not None:
            board.entries.append(e)
    return board
