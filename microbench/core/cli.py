"""Argument types shared by the commands: a bad value is argparse's one-line error, exit 2."""
from __future__ import annotations

import argparse


def positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if v <= 0:
        raise argparse.ArgumentTypeError(f"{v} must be positive")
    return v


def non_negative_int(text: str) -> int:
    return 0 if text.strip() == "0" else positive_int(text)


def positive_seconds(text: str) -> float:
    """A finite number of seconds > 0 (a timeout)."""
    import math

    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(v) or v <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be finite and > 0 (seconds)")
    return v
