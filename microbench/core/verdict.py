"""The words of the one judge (microbench.roofline.judge): the flag prefixes it writes on a row and what each
means for the numbers that follow from the row. Here, in the core, so that reports and compare (which may not
import the harness) read the same verdicts the judge wrote.

- noisy: the row's repeats disagree (core.stats.noise_reasons): its time is shown, no verdict is drawn from it;
- impossible: the number cannot be right (faster than the chip's peak, a negative overhead, ...): shown with
  its reason, kept out of every ratio and summary;
- busy ceiling: the row's percentage is against a ceiling measured on a busy machine (it may be too low);
- above the measured roof: faster than the best the vendor library reached here, beyond both spreads;
- busy machine: timed on fewer threads because other work held the cores;
- fallback path: the kernel ran at another precision's rate.

A row is trusted for ratios and summaries when it is neither noisy nor impossible.
"""

from __future__ import annotations

NOISY = "noisy: "
IMPOSSIBLE = "impossible: "
BUSY_CEILING = "busy ceiling: "
ABOVE_ROOF = "above the measured"
BUSY_THREADS = "busy machine: "
# A row whose kernel ran on the matrix units at another precision's rate (Evidence.fallback): its % of the dtype's
# ceilings measures the fallback, not the kernel (written by roofline.runner).
FALLBACK = "fallback path: "


def _flags(row) -> list[str]:
    flags = row.get("flags") if isinstance(row, dict) else getattr(row, "flags", None)
    return [f for f in flags or [] if isinstance(f, str)]


def is_noisy(row) -> bool:
    """A row (typed or a results file's dict) whose repeats disagree."""
    return any(f.startswith(NOISY) for f in _flags(row))


def is_impossible(row) -> bool:
    """A row whose number cannot be right."""
    return any(f.startswith(IMPOSSIBLE) for f in _flags(row))


def is_above_roof(row) -> bool:
    return any(f.startswith(ABOVE_ROOF) for f in _flags(row))


def trusted(row) -> bool:
    """Fit to enter a ratio or a summary: neither noisy nor impossible (other flags are caveats, shown)."""
    return not (is_noisy(row) or is_impossible(row))


def untrusted_word(row) -> str | None:
    """What a ratio column shows instead of a number for an untrusted row (None: the row is trusted)."""
    if is_impossible(row):
        return "flagged"
    if is_noisy(row):
        return "noise"
    return None
