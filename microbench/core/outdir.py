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
  gets one line and exit code 2 instead of splicing its rows into the first one's.
- SIGTERM is treated as Ctrl-C (KeyboardInterrupt) while the folder is open; `exit_code()` then says 143
  (128 + SIGTERM) instead of 130, the shell's convention.
"""
from __future__ import annotations

import datetime as _dt
import fcntl
import os
import secrets
import shutil
import signal
import sys
import threading
from pathlib import Path

from microbench.core.errors import InputError

LOCK_NAME = ".dawnscope.lock"
STAGING_PREFIX = ".run-"
PREVIOUS = "previous"


def _first_existing(path: Path) -> Path:
    p = path
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def _check_parent(path: Path, what: str) -> None:
    """The nearest existing ancestor of `path` must be a folder we may create things in."""
    anc = _first_existing(path.parent if path.parent != path else path)
    if not anc.is_dir():
        raise InputError(path, f"cannot create it: {anc} is a file, not a folder", key=what)
    if not os.access(anc, os.W_OK | os.X_OK):
        raise InputError(path, f"cannot create it: the folder {anc} is not writable", key=what)


def check_dir(path: str | Path, what: str = "--out") -> Path:
    """An output folder: absent (it will be created) or a writable folder."""
    path = Path(path)
    if path.exists() or path.is_symlink():
        if not path.is_dir():
            raise InputError(path, "exists and is not a folder", key=what)
        if not os.access(path, os.W_OK | os.X_OK):
            raise InputError(path, "the folder is not writable", key=what)
        return path
    _check_parent(path, what)
    return path


def check_file(path: str | Path, what: str = "--json") -> Path:
    """An output file: absent or a writable file, in a folder that exists or can be created."""
    path = Path(path)
    if path.is_dir():
        raise InputError(path, "is a folder; give a file name", key=what)
    if path.exists() and not os.access(path, os.W_OK):
        raise InputError(path, "the file is not writable", key=what)
    _check_parent(path, what)
    return path


def write_file(path: str | Path, text: str, what: str = "--json") -> Path:
    """Write one output file whole or not at all: a unique temporary name beside it, then os.replace."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}-{secrets.token_hex(4)}.tmp")
        try:
            tmp.write_text(text, encoding="utf-8")
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
    except OSError as e:
        raise InputError(path, f"cannot write: {e.strerror or e}", key=what) from None
    return path


class _Terminated(KeyboardInterrupt):
    """SIGTERM, delivered the way Ctrl-C is so the same code keeps the rows and writes the report."""


class OutputDir:
    """with OutputDir(out, owns=("results.json", ...)) as od: write into od.staging, then od.commit()."""

    def __init__(self, path: str | Path, owns: tuple[str, ...] = (), what: str = "--out"):
        self.path = check_dir(path, what)
        self.owns = tuple(owns)
        self.what = what
        self.staging: Path | None = None
        self.committed = False
        self.signal: int | None = None
        self._lock_fd: int | None = None
        self._old_term = None

    # ---- the lock and the staging folder ---------------------------------------------------------------
    def __enter__(self) -> "OutputDir":
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            self._lock()
            self.staging = self.path / f"{STAGING_PREFIX}{os.getpid()}-{secrets.token_hex(4)}"
            self.staging.mkdir()
        except OSError as e:
            self._unlock()
            raise InputError(self.path, f"cannot write here: {e.strerror or e}", key=self.what) from None
        self._catch_sigterm()
        return self

    def _lock(self) -> None:
        fd = os.open(self.path / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 64).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise InputError(self.path, f"another run (pid {holder}) is writing into this folder; wait for it "
                                        f"or give another {self.what}", key=self.what) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._lock_fd = fd

    def _unlock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # closing the descriptor releases the flock
            self._lock_fd = None

    def _catch_sigterm(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return  # signal handlers can only be set from the main thread (library use in a worker)

        def on_term(signum, frame):
            self.signal = signum
            raise _Terminated()

        self._old_term = signal.signal(signal.SIGTERM, on_term)

    def __exit__(self, exc_type, exc, tb) -> bool:
        try:
            if self._old_term is not None:
                signal.signal(signal.SIGTERM, self._old_term)
            if not self.committed and self.staging is not None and self.staging.exists():
                self._abandon(exc_type)
        finally:
            self._unlock()
        return False

    def _abandon(self, exc_type) -> None:
        """No commit: the earlier run's files stay. Measured rows of this run are kept beside them."""
        if (self.staging / "results.json").exists() and exc_type is not None \
                and not issubclass(exc_type, KeyboardInterrupt):
            kept = self.path / f"incomplete-{_dt.datetime.now().strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
            os.replace(self.staging, kept)
            print(f"the run failed; the rows it measured are in {kept}", file=sys.stderr)
        else:
            shutil.rmtree(self.staging, ignore_errors=True)

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
        import json

        try:
            doc = json.loads((self.path / "results.json").read_text())
        except (OSError, ValueError):
            return False
        return isinstance(doc, dict) and doc.get("interrupted") is True

    def commit_partial(self) -> bool:
        """After an interrupt, for a command that wrote results.json row by row: commit it (marked
        `interrupted`) with whatever else the run wrote, the earlier run's files moving to previous/, if it
        holds rows; else leave the folder as it was. True when something was committed."""
        import json

        from microbench.core.jsonio import dumps

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
        return 128 + self.signal if self.signal else 130
