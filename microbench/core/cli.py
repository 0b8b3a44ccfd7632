"""What every command's argument parsing shares: the parser whose errors are one line, and the checked number
types (a bad value is that one line, naming the option, exit 2)."""
from __future__ import annotations

import argparse
import math
from typing import Callable

from microbench.core.errors import shown


class Parser(argparse.ArgumentParser):
    """Bad options end in ONE line on stderr and exit 2 (argparse's default prints the usage block too); its
    subcommands' parsers are of this class as well (argparse makes them of the parent's class)."""

    def error(self, message: str):
        self.exit(2, f"error: {shown(message)}\n")


def number(cast: Callable, low: float, high: float = math.inf, low_open: bool = False) -> Callable:
    """An argparse `type=`: a finite number of `cast` (int or float) in [low, high] ((low, high] with low_open).
    Integers are written as integers: `1e12` is refused where a count is expected."""
    if cast is int:
        where = f"an integer from {int(low) + low_open:,}" + (f" to {int(high):,}" if high != math.inf else " up")
    else:
        where = "finite and " + (f"{'>' if low_open else '>='} {low:g}" if high == math.inf
                                 else f"in {'(' if low_open else '['}{low:g}, {high:g}]")

    def check(text: str):
        try:
            v = cast(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{shown(text)!r} is not {'an integer' if cast is int else 'a number'}")
        if not math.isfinite(v) or v < low or v > high or (low_open and v == low):
            raise argparse.ArgumentTypeError(f"{shown(text)!r} must be {where}")
        return v

    return check


# Counts a command takes (batch, steps, seeds, repeats, top-N): beyond a million, a typo or an attack, never
# a run that ends (the machine would allocate or loop for hours before failing).
MAX_COUNT = 10**6
positive_int = number(int, 1, MAX_COUNT)
_non_negative = number(int, 0, MAX_COUNT)


def non_negative_int(text: str) -> int:
    return _non_negative(text)


# A timeout in seconds: positive and finite, at most a week (beyond it C++ timeouts overflow).
positive_seconds = number(float, 0, 7 * 86400, low_open=True)
