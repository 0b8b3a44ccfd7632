"""Where a command's files go, and how a run never loses or corrupts them.

One place for every command that writes:
- `check_dir` / `check_file`: the output paths are checked before any work (one InputError line, exit 2).
- `OutputDir`: a run writes into its own staging folder inside --out (`.run-<pid>-<random>`, so two runs
  never share a file name) and `commit()` moves its files into --out with os.replace at the end. Until
  then the earlier run's files are untouched: a crash, a Ctrl-C before the first row, or a second run that
  fails leaves them as they were. Files the command owns but this run did not write (an old plot after
  --no-plot) are removed at commit, so --out never mixes two runs. An interrupted run that commits its
  partial rows first moves the earlier run's files into --out/previous/.
- A lock (fcntl.flock on --out/.dawnscope.lock) lets one run at a time write into a folder; a second one
  gets one line and exit code 2 instead of splicing its rows into the first one's. A lock whose holder (the pid
  in the file) no longer runs, kept only by a descendant that inherited it, is taken over with a note.
- Measured rows are never deleted: a run that ends without committing (an error, or an interrupt while the
  reports are written) leaves the rows of its results.json in --out/incomplete-DATE-PID/; a `.run-*` folder
  left by a killed run is reported by the next run into that folder, its rows moved the same way.
- SIGTERM is treated as Ctrl-C (KeyboardInterrupt) while the folder is open (core.errors, the same handler as
  the command runner's); `exit_code()` then says 143 (128 + SIGTERM) instead of 130, the shell's convention.
"""

from __future__ import annotations

import datetime as _dt
import fcntl
import json
import os
import secrets
import shutil
import sys
from pathlib import Path

from microbench.core.args import digits
from microbench.core.errors import InputError, Interrupts, interrupts_as_keyboard_interrupt, shown
from microbench.core.files import check_output
from microbench.core.jsonio import dumps

LOCK_NAME = ".dawnscope.lock"
STAGING_PREFIX = ".run-"
PREVIOUS = "previous"


def _exists(path: Path, what: str) -> bool:
    try:
        os.lstat(path)
        return True
    except FileNotFoundError:
        return False
    except OSError as e:  # a name too long, a loop of links, a component that is a file
        raise InputError(path, f"cannot use it: {e.strerror or e}", key=what) from None


def _first_existing(path: Path, what: str) -> Path:
    p = path
    while not _exists(p, what) and p != p.parent:
        p = p.parent
    return p


def _check_parent(path: Path, what: str) -> None:
    """The nearest existing ancestor of `path` must be a folder we may create things in."""
    anc = _first_existing(path.parent if path.parent != path else path, what)
    if not anc.is_dir():
        raise InputError(path, f"cannot create it: {anc} is a file, not a folder", key=what)
    if not os.access(anc, os.W_OK | os.X_OK):
        raise InputError(path, f"cannot create it: the folder {anc} is not writable", key=what)


def check_dir(path: str | Path, what: str = "--out") -> Path:
    """An output folder: absent (it will be created) or a writable folder."""
    path = Path(path)
    if _exists(path, what):
        if not path.is_dir():
            raise InputError(path, "exists and is not a folder", key=what)
        if not os.access(path, os.W_OK | os.X_OK):
            raise InputError(path, "the folder is not writable", key=what)
        return path
    _check_parent(path, what)
    return path


def check_file(path: str | Path, what: str = "--json", inputs=()) -> Path:
    """An output file: absent or a writable file, in a folder that exists or can be created, and none of the
    command's `inputs` (writing the report over the trace it read would lose the trace)."""
    path = Path(path)
    exists = check_output(path, what) is not None
    if exists and any(_same(path, i) for i in inputs):
        raise InputError(path, "is also an input of this command: the report would overwrite it", key=what)
    if exists and not os.access(path, os.W_OK):
        raise InputError(path, "the file is not writable", key=what)
    _check_parent(path, what)
    return path


def _same(a: Path, b) -> bool:
    try:
        return os.path.samefile(a, b)
    except (OSError, TypeError, ValueError):
        return False


def write_file(path: str | Path, text: str, what: str = "--json") -> Path:
    """Write one output file whole or not at all: a unique temporary name beside it, then os.replace."""
    path = Path(path)
    check_output(path, what)  # again: what was a file when the command started may be a device now
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name[:200]}.{os.getpid()}-{secrets.token_hex(4)}.tmp")
        try:
            tmp.write_text(text, encoding="utf-8")
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
    except OSError as e:
        raise InputError(path, f"cannot write: {e.strerror or e}", key=what) from None
    return path


def print_written(paths: list[Path]) -> None:
    """The `wrote FILE` lines of files already written (commands write their files before the terminal report, so
    that a reader that goes away, `| head`, cannot cost them)."""
    for p in paths:
        print(f"wrote {shown(p)}", file=sys.stderr)


class OutputDir:
    """with OutputDir(out, owns=("results.json", ...)) as od: write into od.staging, then od.commit()."""

    def __init__(self, path: str | Path, owns: tuple[str, ...] = (), what: str = "--out", on_interrupt: str = "keep"):
        """on_interrupt: what an interrupt (Ctrl-C, SIGTERM) that leaves the with-block does with measured rows:
        "keep" them in incomplete-... (as any run that did not finish), or "commit" them (commit_partial: for a
        command whose rows are complete one by one, e.g. tta's finished seeds)."""
        self.path = check_dir(path, what)
        self.owns = tuple(owns)
        self.what = what
        self.on_interrupt = on_interrupt
        self.partial_committed = False
        self.staging: Path | None = None
        self.committed = False
        self._lock_fd: int | None = None
        self._signals = None

    # ---- the lock and the staging folder ---------------------------------------------------------------
    def __enter__(self) -> OutputDir:
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            self._lock()
            self._recover_stale()
            self.staging = self.path / f"{STAGING_PREFIX}{os.getpid()}-{secrets.token_hex(4)}"
            self.staging.mkdir()
        except OSError as e:
            self._unlock()
            raise InputError(self.path, f"cannot write here: {e.strerror or e}", key=self.what) from None
        self._signals = interrupts_as_keyboard_interrupt()
        self._signals.__enter__()
        return self

    def _lock(self, retake: bool = True) -> None:
        fd = os.open(self.path / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 64).decode(errors="replace").strip() or "?"
            os.close(fd)
            if retake and digits(holder) and not _alive(int(holder)):
                # The holder died; a process it started (a rank, a compile worker) keeps the inherited lock.
                # A new lock file is the lock from now on; that descendant writes nowhere we read.
                (self.path / LOCK_NAME).unlink(missing_ok=True)
                print(
                    f"note: {shown(self.path)}: the lock of pid {holder}, which no longer runs, taken over",
                    file=sys.stderr,
                )
                return self._lock(retake=False)
            raise InputError(
                self.path,
                f"another run (pid {holder}) is writing into this folder; wait for it or give another {self.what}",
                key=self.what,
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._lock_fd = fd

    def _recover_stale(self) -> None:
        """With the lock held, every `.run-*` folder is a killed run's: its rows go to incomplete-..., said."""
        for stale in sorted(self.path.glob(f"{STAGING_PREFIX}*")):
            if not stale.is_dir() or stale.is_symlink():
                continue
            pid = stale.name[len(STAGING_PREFIX) :].split("-")[0]
            kept = _keep_rows(stale, self.path, pid)
            print(
                f"note: {shown(stale)} was left by a run that was killed (pid {shown(pid)})"
                + (f"; its measured rows are in {shown(kept)}" if kept else "; it held no rows: removed"),
                file=sys.stderr,
            )

    def _unlock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # closing the descriptor releases the flock
            self._lock_fd = None

    def __exit__(self, exc_type, exc, tb) -> bool:
        try:
            interrupted = exc_type is not None and issubclass(exc_type, KeyboardInterrupt)
            if (
                not self.committed
                and self.staging is not None
                and self.staging.exists()
                and interrupted
                and self.on_interrupt == "commit"
            ):
                self.partial_committed = self.commit_partial()
            if not self.committed and self.staging is not None and self.staging.exists():
                kept = _keep_rows(self.staging, self.path, str(os.getpid()))
                if kept:  # no commit: the earlier run's files stay, this run's rows beside them
                    print(f"the run did not finish; the rows it measured are in {shown(kept)}", file=sys.stderr)
        finally:
            if self._signals is not None:
                self._signals.__exit__(None, None, None)
                self._signals = None
            self._unlock()
        return False

    # ---- what a command calls --------------------------------------------------------------------------
    def file(self, name: str) -> Path:
        """Where to write `name` now (inside the staging folder)."""
        return self.staging / name

    def final(self, name: str) -> Path:
        """Where `name` will be after commit()."""
        return self.path / name

    def commit(self, keep_previous: bool = False) -> list[Path]:
        """Move this run's files into the folder; with keep_previous (an interrupted run), the earlier run's
        into previous/, unless that one was interrupted too: previous/ keeps the last complete run."""
        written = sorted(p.name for p in self.staging.iterdir() if p.is_file())
        stale = [n for n in self.owns if n not in written and (self.path / n).is_file()]
        if keep_previous and not self._earlier_interrupted():
            prev = self.path / PREVIOUS
            earlier = [n for n in {*self.owns, *written} if (self.path / n).is_file()]
            if earlier:
                shutil.rmtree(prev, ignore_errors=True)
                prev.mkdir()
                for n in earlier:
                    os.replace(self.path / n, prev / n)
        for n in stale:
            (self.path / n).unlink(missing_ok=True)
        for n in written:
            os.replace(self.staging / n, self.path / n)
        shutil.rmtree(self.staging, ignore_errors=True)
        self.committed = True
        return [self.path / n for n in written]

    def _earlier_interrupted(self) -> bool:
        try:
            doc = json.loads((self.path / "results.json").read_text())
        except (OSError, ValueError):
            return False
        return isinstance(doc, dict) and doc.get("interrupted") is True

    def commit_partial(self) -> bool:
        """After an interrupt, for a command that wrote results.json row by row: commit it (marked
        `interrupted`) with whatever else the run wrote, the earlier run's files moving to previous/, if it
        holds rows; else leave the folder as it was. True when something was committed."""
        path = self.file("results.json")
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError):
            return False
        if not isinstance(doc, dict) or not doc.get("results"):
            return False
        doc["interrupted"] = True
        path.write_text(dumps(doc))
        self.commit(keep_previous=True)
        return True

    def exit_code(self) -> int:
        """The exit code of an interrupted run: 143 after SIGTERM, 130 after Ctrl-C."""
        return Interrupts.exit_code()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):
        return True  # someone else's process (or not a pid we can ask about): assume it runs
    return True


def _has_rows(folder: Path) -> bool:
    """A results.json that may hold rows: anything but one read back with an empty `results` list (when in
    doubt, keep it)."""
    path = folder / "results.json"
    if not path.is_file():
        return False
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return True
    return not (isinstance(doc, dict) and doc.get("results") == [])


def _keep_rows(staging: Path, out: Path, pid: str) -> Path | None:
    """A staging folder that will not be committed: moved to out/incomplete-DATE-PID if its results.json holds
    rows (returned), else removed (None)."""
    if not _has_rows(staging):
        shutil.rmtree(staging, ignore_errors=True)
        return None
    kept = out / f"incomplete-{_dt.datetime.now().strftime('%Y%m%d-%H%M%S')}-{pid}"
    while kept.exists():
        kept = kept.with_name(kept.name + "-" + secrets.token_hex(2))
    os.replace(staging, kept)
    return kept
