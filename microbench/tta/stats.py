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


def summarize_runs(
    tta_s: list[float | None], epochs: list[float | None], final_acc: list[float], target: float
) -> TtaSummary:
    hit = [t for t in tta_s if t is not None]
    ep = [e for e in epochs if e is not None]
    return TtaSummary(
        runs=len(tta_s),
        reached=len(hit),
        fraction_reached=len(hit) / len(tta_s) if tta_s else 0.0,
        mean_tta_s=statistics.fmean(hit) if hit else None,
        median_tta_s=statistics.median(hit) if hit else None,
        cov_tta=coefficient_of_variation(hit),
        mean_epochs_to_target=statistics.fmean(ep) if ep else None,
        accuracy=one_sided_ttest(final_acc, target),
    )


def mean_ci95(values: list[float]) -> tuple[float, float | None, float | None]:
    """The mean and its 95 % confidence interval (Student's t, n - 1 degrees of freedom); no interval for
    fewer than two values."""
    from scipy.stats import t as student_t

    n = len(values)
    mean = statistics.fmean(values) if values else math.nan
    if n < 2:
        return mean, None, None
    half = float(student_t.ppf(0.975, n - 1)) * statistics.stdev(values) / math.sqrt(n)
    return mean, mean - half, mean + half


@dataclass(frozen=True)
class Generalization:
    """One recipe's runs on the usual test set and on a second test set drawn anew (accuracies 0..1)."""

    runs: int
    test_accuracy: float
    new_test_accuracy: float
    drop: float  # mean over seeds of test - new test accuracy
    drop_ci95: tuple[float | None, float | None]

    def as_dict(self) -> dict:
        return asdict(self)


def generalization(runs) -> Generalization:
    """Over the seeds of one recipe (runs with `final_accuracy` and `new_test_accuracy`)."""
    pairs = [(r.final_accuracy, r.new_test_accuracy) for r in runs if r.new_test_accuracy is not None]
    drop, lo, hi = mean_ci95([a - b for a, b in pairs])
    return Generalization(
        len(pairs), statistics.fmean(a for a, _ in pairs), statistics.fmean(b for _, b in pairs), drop, (lo, hi)
    )


@dataclass(frozen=True)
class DropComparison:
    """Does the tuned recipe lose more on the new test set than the standard one? Welch's one-sided t-test."""

    tuned_drop: float
    standard_drop: float
    difference: float  # tuned - standard, accuracy points as a fraction
    t: float | None
    p_value: float | None  # P(a difference at least this large | equal mean drops); None with < 2 runs a side

    def as_dict(self) -> dict:
        return asdict(self)


def compare_drops(tuned_runs: list[dict], standard_runs: list[dict]) -> DropComparison:
    from scipy.stats import ttest_ind

    a, b = (
        [r["test_accuracy"] - r["new_test_accuracy"] for r in runs if r["new_test_accuracy"] is not None]
        for runs in (tuned_runs, standard_runs)
    )
    ma, mb = statistics.fmean(a), statistics.fmean(b)
    if len(a) < 2 or len(b) < 2 or (statistics.pstdev(a) == 0 and statistics.pstdev(b) == 0):
        return DropComparison(ma, mb, ma - mb, None, None)
    res = ttest_ind(a, b, equal_var=False, alternative="greater")
    return DropComparison(ma, mb, ma - mb, float(res.statistic), float(res.pvalue))
