"""What every command's argument parsing shares: the parser whose errors are one line, and the checked number
types (a bad value is that one line, naming the option, exit 2)."""

from __future__ import annotations

import argparse
import math
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from microbench.core.errors import shown

# Flags renamed for one meaning per flag name across the eight commands (docs/ARCHITECTURE.md, "Glossary"):
# per command (its parser's prog after PROG_PREFIX; a subcommand as "comm ranks"), old spelling -> new. The 0.1
# aliases are gone (never released): an old spelling is refused in one line that names the new one.
RENAMED_FLAGS: dict[str, dict[str, str]] = {
    "trace": {"--steps": "--step-range", "--workers": "--readers"},  # a range name; reader processes
    "comm ranks": {"--steps": "--step-range", "--workers": "--readers"},  # (`--steps N`, `--workers N,..` are counts)
    "tta run": {"--profile": "--epoch-breakdown", "--target": "--target-accuracy"},  # the profiler; an accuracy
    "tta thresholds": {"--plot": "--png"},  # a PNG path (`--plot` / `--no-plot` elsewhere: draw or not)
}
PROG_PREFIX = "dawnscope "


def renamed_flags(prog: str | None) -> dict[str, str]:
    """The old -> new flags of the command whose parser has this prog."""
    return RENAMED_FLAGS.get((prog or "").removeprefix(PROG_PREFIX), {})


class Parser(argparse.ArgumentParser):
    """Bad options end in ONE line on stderr and exit 2 (argparse's default prints the usage block too); its
    subcommands' parsers are of this class as well (argparse makes them of the parent's class). An old spelling
    of a renamed flag (RENAMED_FLAGS) is refused with the new one named."""

    def error(self, message: str):
        self.exit(2, f"error: {shown(message)}\n")

    def parse_known_args(self, args=None, namespace=None):
        renamed = renamed_flags(self.prog)
        for a in sys.argv[1:] if args is None else list(args):
            if a == "--":
                break
            flag = a.partition("=")[0]
            if flag in renamed:
                self.error(f"{flag} is now {renamed[flag]}")
        return super().parse_known_args(args, namespace)


def number(cast: Callable, low: float, high: float = math.inf, low_open: bool = False) -> Callable:
    """An argparse `type=`: a finite number of `cast` (int or float) in [low, high] ((low, high] with low_open).
    Integers are written as integers: `1e12` is refused where a count is expected."""
    if cast is int:
        where = f"an integer from {int(low) + low_open:,}" + (f" to {int(high):,}" if high != math.inf else " up")
    else:
        where = "finite and " + (
            f"{'>' if low_open else '>='} {low:g}"
            if high == math.inf
            else f"in {'(' if low_open else '['}{low:g}, {high:g}]"
        )

    def check(text: str):
        try:
            v = cast(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{shown(text)!r} is not {'an integer' if cast is int else 'a number'}"
            ) from None
        if not math.isfinite(v) or v < low or v > high or (low_open and v == low):
            raise argparse.ArgumentTypeError(f"{shown(text)!r} must be {where}")
        return v

    return check


def digits(text: str) -> bool:
    """Only the ASCII digits 0-9. `str.isdigit` also accepts superscripts ('4²') and other scripts' digits, which
    int() refuses (a traceback) or reads as numbers nobody typed on purpose: every digit test goes through here."""
    return text.isascii() and text.isdigit()


# Counts a command takes (batch, steps, seeds, repeats, top-N): beyond a million, a typo or an attack, never
# a run that ends (the machine would allocate or loop for hours before failing).
MAX_COUNT = 10**6
positive_int = number(int, 1, MAX_COUNT)
_non_negative = number(int, 0, MAX_COUNT)


def non_negative_int(text: str) -> int:
    return _non_negative(text)


# A timeout in seconds: positive and finite, at most a week (beyond it C++ timeouts overflow).
positive_seconds = number(float, 0, 7 * 86400, low_open=True)


class Heartbeat:
    """Progress for a pipe or a log file, where a spinner prints nothing: each new stage as one line on stderr,
    and while the work lasts, a line at least every `every_s` seconds (long work is never silent). On a terminal
    it prints nothing (the command's own progress display shows there). A context manager; `update(msg)` names
    the stage."""

    def __init__(self, what: str, every_s: float = 10.0, stream=None, force: bool = False):
        self.stream = stream or sys.stderr
        self.on = force or not self.stream.isatty()
        self.msg, self.every_s, self._time = what, every_s, time.monotonic
        self.t0 = self.last = self._time()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, daemon=True)
        self._lock = threading.Lock()

    def _emit(self, text: str) -> None:
        with self._lock:
            self.last = self._time()
            print(f"[{self.last - self.t0:6.1f} s] {text}", file=self.stream, flush=True)

    def _beat(self) -> None:
        while not self._stop.wait(min(1.0, self.every_s)):
            if self._time() - self.last >= self.every_s:
                self._emit(f"{self.msg} (still working)")

    def update(self, msg: str) -> None:
        self.msg = msg
        if self.on:
            self._emit(msg)

    def __enter__(self) -> Heartbeat:
        if self.on:  # nothing printed yet: bad input found at once stays one line
            self._thread.start()
        return self

    def __exit__(self, *exc) -> bool:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        return False


def add_job_arguments(p) -> None:
    """The options of a job's rank traces, for the commands that read a job (`comm ranks`, `trace`)."""
    p.add_argument(
        "--out",
        type=Path,
        default=None,
        metavar="DIR",
        help="also write the rank x step heat map (heatmap.png) and the HTML report (job.html) here",
    )

    p.add_argument(
        "--readers",
        dest="workers",
        type=non_negative_int,
        default=None,
        metavar="N",
        help="local processes reading the ranks; default: the CPUs; 0: in this process",
    )
    p.add_argument(
        "--scheduler",
        default=None,
        metavar="ADDRESS",
        help="a Dask distributed scheduler (tcp://host:8786) whose workers read the ranks instead of "
        "local processes; default: $DASK_SCHEDULER_ADDRESS where set. The workers must see the "
        "trace paths",
    )
    p.add_argument(
        "--timeout",
        type=positive_seconds,
        default=60.0,
        metavar="S",
        help="seconds to wait for the Dask scheduler; default: %(default)s",
    )
