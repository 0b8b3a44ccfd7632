"""Errors that end a command with exit code 2 and one line naming the file, key and value."""

from __future__ import annotations

import errno
import os
import re
import signal
import sys
import threading
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

import tomllib

from microbench.core.resources import data_file

# Control characters (C0, DEL, C1) in a file name or value would break the one-line rule (a newline) or drive the
# terminal (an escape sequence): shown as escapes instead.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def shown(text) -> str:
    """`text` as one printable line: control characters escaped (\\n, \\x1b)."""
    return _CONTROL.sub(lambda m: repr(m.group())[1:-1], str(text))


class InputError(Exception):
    """Bad user input (config, trace or results file). Printed as one line; exit code 2."""

    exit_code = 2

    def __init__(self, path: str | Path | None, problem: str, key: str | None = None, value=None):
        self.path = str(path) if path is not None else None
        self.key = key
        self.value = value
        self.problem = problem
        super().__init__(self.line())

    def line(self) -> str:
        where = shown(self.path) if self.path else "<input>"
        if self.key is not None:
            where += f": {shown(self.key)}"
            if self.value is not None:
                where += f" = {shown(_short(self.value))}"
        return f"{where}: {shown(self.problem)}"


def _short(value, limit: int = 200) -> str:
    """A value's repr, cut: a 5 MB field is named, not printed."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text):,} characters)"


class ConfigError(InputError):
    pass


class Terminated(KeyboardInterrupt):
    """SIGTERM, delivered the way Ctrl-C is, so the same code keeps the rows and writes what it can."""


class Interrupts:
    """Which signal ended the command (SIGINT for Ctrl-C, SIGTERM from `timeout` or a scheduler)."""

    signum: int | None = None
    depth = 0

    @classmethod
    def exit_code(cls) -> int:
        """128 + the signal: 130 after Ctrl-C, 143 after SIGTERM (the shell's convention)."""
        return 128 + (cls.signum or signal.SIGINT)


def _on_term(signum, frame):
    Interrupts.signum = signum
    raise Terminated()


def _on_int(signum, frame):
    Interrupts.signum = signum
    raise KeyboardInterrupt()


@contextmanager
def interrupts_as_keyboard_interrupt():
    """While inside: SIGTERM (and Ctrl-C) raise KeyboardInterrupt and record the signal. Nested uses share the
    outermost handlers; outside the main thread (a library in a worker) nothing is installed."""
    if threading.current_thread() is not threading.main_thread():
        yield Interrupts
        return
    if Interrupts.depth == 0:
        Interrupts.signum = None
        # A signal the caller ignores (a background job's SIGINT, nohup) stays ignored.
        old = tuple(signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT))
        if old[0] is not signal.SIG_IGN:
            signal.signal(signal.SIGTERM, _on_term)
        if old[1] is not signal.SIG_IGN:
            signal.signal(signal.SIGINT, _on_int)
    Interrupts.depth += 1
    try:
        yield Interrupts
    finally:
        Interrupts.depth -= 1
        if Interrupts.depth == 0:
            for sig, handler in zip((signal.SIGTERM, signal.SIGINT), old):
                if handler is not None:  # None: a handler not set from Python, which was never replaced
                    signal.signal(sig, handler)


# An OSError that says the path given is wrong (bad input, exit 2), not that the machine failed (exit 1).
BAD_PATH_ERRNOS = {
    errno.ENOENT,
    errno.ENOTDIR,
    errno.EISDIR,
    errno.ENAMETOOLONG,
    errno.ELOOP,
    errno.EACCES,
    errno.EPERM,
    errno.ENXIO,
    errno.ENODEV,
}


def error_line(e: InputError) -> str:
    return e.line() if e.path else e.line().replace("<input>: ", "", 1)  # an option, not a file


def missing_extra(e: ModuleNotFoundError) -> str | None:
    """The line for an optional package that is not installed (data/extras.toml: which extra brings it), None for
    any other missing module (a bug: its traceback is shown)."""
    name = (e.name or "").split(".")[0]
    extra = tomllib.loads(data_file("extras.toml").read_text())["modules"].get(name)
    if extra is None:
        return None
    torch_first = " (your PyTorch build first: CUDA, ROCm or CPU)" if extra == "bench" else ""
    return f"this needs {name}, which the `{extra}` extra installs: pip install 'dawnscope[{extra}]'{torch_first}"


def run_command(body: Callable[[], int], on_interrupt: Callable[[], str | None] | None = None) -> int:
    """The one runner of every command, with its one-line endings (docs/failures.md):
    - bad input (InputError): `error: LINE`, exit 2;
    - Ctrl-C or SIGTERM, from the first line of the body on: `interrupted`, exit 130 / 143. A command that
      commits partial output gives `on_interrupt`, called first (its returned line replaces `interrupted`);
    - stdout's reader going away (`| head`): no line, exit 141 (the files come before the report);
    - an optional package the command needs and that is not installed: `error: ...`, naming the extra, exit 2;
    - the machine failing the command (a full disk, an I/O error: OSError) or a failing plot backend
      (`PlotError`): `error: LINE`, exit 1 (exit 2 where the OSError says the path given is wrong). A run that measured rows keeps them (core.outdir moves them to
      `incomplete-...`); nothing else is caught, so a bug still shows its traceback."""
    with interrupts_as_keyboard_interrupt() as caught:
        try:
            try:
                return body()
            except KeyboardInterrupt:
                line = on_interrupt() if on_interrupt else None
                print(shown(line or "interrupted"), file=sys.stderr)
                return caught.exit_code()
        except InputError as e:
            print(f"error: {error_line(e)}", file=sys.stderr)
            return e.exit_code
        except KeyboardInterrupt:  # a second one, while on_interrupt committed
            print("interrupted", file=sys.stderr)
            return caught.exit_code()
        except BrokenPipeError:
            return _reader_gone()
        except ModuleNotFoundError as e:  # an optional package the command needs (data/extras.toml)
            line = missing_extra(e)
            if line is None:
                raise
            print(f"error: {line}", file=sys.stderr)
            return 2
        except (OSError, PlotError) as e:
            where = f"{shown(e.filename)}: " if getattr(e, "filename", None) else ""
            print(f"error: {where}{shown(getattr(e, 'strerror', None) or e)}", file=sys.stderr)
            return 2 if getattr(e, "errno", None) in BAD_PATH_ERRNOS else 1


def _reader_gone() -> int:
    """stdout's reader went away (`| head`): the command's files are already written (they come before the
    terminal report), so it ends quietly, as a command killed by SIGPIPE would (128 + 13); stdout is pointed at
    /dev/null so that the interpreter's last flush finds no broken pipe either."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # no real stdout (a test's capture): nothing to flush
        pass
    return 128 + signal.SIGPIPE


class PlotError(Exception):
    """The plotting backend failed (a bad MPLBACKEND, a broken font cache): the rows stay, the plot does not."""
