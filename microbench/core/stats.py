"""Summary statistics of repeated measurements: one Timing per row (median, p20, p80, mean, spread)."""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Sequence


@dataclass(frozen=True)
class Timing:
    median_ms: float
    p20_ms: float
    p80_ms: float
    mean_ms: float
    cov: float  # standard deviation / mean over the repeats
    reps: int

    def as_dict(self) -> dict:
        return {"median": self.median_ms, "p20": self.p20_ms, "p80": self.p80_ms, "cov": self.cov,
                "reps": self.reps}


def summarize(samples_ms: Sequence[float]) -> Timing:
    s = sorted(samples_ms)
    if len(s) == 1:
        return Timing(s[0], s[0], s[0], s[0], 0.0, 1)
    q = statistics.quantiles(s, n=10, method="inclusive")  # deciles: q[1] = p20, q[7] = p80
    mean = statistics.fmean(s)
    return Timing(statistics.median(s), q[1], q[7], mean, statistics.pstdev(s) / mean if mean > 0 else 0.0, len(s))
