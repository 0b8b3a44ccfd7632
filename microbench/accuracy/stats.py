"""Statistics of repeated time-to-accuracy runs, as the DAWNBench analysis reported them (mean time,
coefficient of variation, fraction of runs that reach the target) and as CIFAR-10 speed-run records are now
judged (a one-sided one-sample t-test that the mean accuracy exceeds the target)."""
from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class TTest:
    n: int
    mean: float
    std: float  # sample standard deviation (n - 1)
    t: float | None
    p_value: float | None  # P(T >= t) under H0: mean accuracy = target; None with fewer than 2 runs

    def as_dict(self) -> dict:
        return asdict(self)


def one_sided_ttest(values: list[float], target: float) -> TTest:
    """H1: the mean of `values` is greater than `target` (Student's t, n - 1 degrees of freedom).
    With zero spread the answer is certain: p = 0 above the target, 1 at or below it."""
    from scipy.stats import t as student_t

    n = len(values)
    mean = statistics.fmean(values) if values else math.nan
    if n < 2:
        return TTest(n, mean, math.nan, None, None)
    sd = statistics.stdev(values)
    if sd == 0:
        return TTest(n, mean, 0.0, None, 0.0 if mean > target else 1.0)
    t = (mean - target) / (sd / math.sqrt(n))
    return TTest(n, mean, sd, t, float(student_t.sf(t, n - 1)))


def coefficient_of_variation(values: list[float]) -> float | None:
    """std / mean (population standard deviation) of the runs' times; None for fewer than two values."""
    if len(values) < 2:
        return None
    m = statistics.fmean(values)
    return statistics.pstdev(values) / m if m else None


@dataclass(frozen=True)
class TtaSummary:
    runs: int
    reached: int
    fraction_reached: float
    mean_tta_s: float | None  # over the runs that reached the target
    median_tta_s: float | None
    cov_tta: float | None
    mean_epochs_to_target: float | None
    accuracy: TTest  # final accuracies of all runs against the target

    def as_dict(self) -> dict:
        d = asdict(self)
        d["accuracy"] = self.accuracy.as_dict()
        return d


def summarize_runs(tta_s: list[float | None], epochs: list[float | None], final_acc: list[float],
                   target: float) -> TtaSummary:
    hit = [t for t in tta_s if t is not None]
    ep = [e for e in epochs if e is not None]
    return TtaSummary(runs=len(tta_s), reached=len(hit), fraction_reached=len(hit) / len(tta_s) if tta_s else 0.0,
                      mean_tta_s=statistics.fmean(hit) if hit else None,
                      median_tta_s=statistics.median(hit) if hit else None, cov_tta=coefficient_of_variation(hit),
                      mean_epochs_to_target=statistics.fmean(ep) if ep else None,
                      accuracy=one_sided_ttest(final_acc, target))
