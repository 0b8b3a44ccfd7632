"""Summary statistics of repeated measurements: one Timing per row (median, p20, p80, mean, spread), and the
judgement whether the repeats are stable enough to draw a conclusion from (`noise_reasons`).

A number is trusted only when its repeats agree. Three ways they fail to, each seen on our 2-core machines:
- a wide spread (p20-p80 or the coefficient of variation): the run was disturbed;
- two clusters (bimodal): some repeats ran alone, others shared the cores;
- samples on multiples of the scheduler tick (about 4 or 8 ms): a 2-thread op waited for its sibling thread
  to be scheduled, so the time measures the scheduler, not the op, often with a deceptively small spread.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class NoiseSettings:
    """Thresholds of the stability judgement ([noise] in bench.toml; the reasons for each value are there)."""

    max_spread: float = 0.25  # (p80 - p20) / median
    max_cov: float = 0.30  # standard deviation / mean
    bimodal_ratio: float = 1.3  # upper cluster's median / lower cluster's median
    min_cluster_share: float = 0.15  # a cluster holds at least this share of the repeats (else: outliers)
    tick_ms: tuple[float, ...] = (4.0,)  # scheduler tick(s) to test for (CONFIG_HZ=250: 4 ms)
    tick_tolerance: float = 0.06  # a sample within this fraction of a tick of a multiple is "on" it
    tick_share: float = 0.6  # this share of the repeats on multiples of a tick is quantisation
    tick_max_multiple: float = 12.0  # above this many ticks a tick is a small part of the time: not judged
    min_reps: int = 3  # fewer repeats cannot show a spread
    max_cpu_wait: float = 0.10  # CPU: share of our threads' runnable time spent waiting for a CPU while timed
    max_busy_error_cores: float = 0.25  # CPU: the busy-cores figure's error bound (threads x tick / window) at most


@dataclass(frozen=True)
class Timing:
    median_ms: float
    p20_ms: float
    p80_ms: float
    mean_ms: float
    cov: float  # standard deviation / mean over the repeats
    reps: int
    noise: tuple[str, ...] = field(default=())  # why the repeats are not stable; empty: stable (or not judged)
    cpu_wait: float | None = None  # CPU: share of our threads' runnable time spent waiting for a CPU
    # CPU: our threads' time on a CPU over the timed wall time, i.e. how many cores the calls kept busy on average
    # (the DataLoader finding on a CPU reads it: a worker process needs a core the step does not use)
    cpu_busy_cores: float | None = None
    # CPU: the process's time in the operating system per timed call (getrusage system time), and its minor page
    # faults per call: a step whose freed buffers go back to the OS faults them in again on the next one
    # (glibc malloc's dynamic mmap threshold; docs/measurement.md)
    sys_ms_per_call: float | None = None
    minor_faults_per_call: float | None = None

    @property
    def noisy(self) -> bool:
        return bool(self.noise)

    def as_dict(self) -> dict:
        return {
            "median": self.median_ms,
            "p20": self.p20_ms,
            "p80": self.p80_ms,
            "cov": self.cov,
            "reps": self.reps,
            "noise": list(self.noise),
            **({"cpu_wait": self.cpu_wait} if self.cpu_wait is not None else {}),
            **({"cpu_busy_cores": self.cpu_busy_cores} if self.cpu_busy_cores is not None else {}),
            **(
                {"sys_ms_per_call": self.sys_ms_per_call, "minor_faults_per_call": self.minor_faults_per_call}
                if self.sys_ms_per_call is not None
                else {}
            ),
        }


def _quantiles(s: list[float]) -> tuple[float, float]:
    q = statistics.quantiles(s, n=10, method="inclusive")  # deciles: q[1] = p20, q[7] = p80
    return q[1], q[7]


def summarize(samples_ms: Sequence[float], noise: NoiseSettings | None = None) -> Timing:
    """Median, p20, p80, mean and CoV of the samples; with `noise`, also the stability judgement."""
    s = sorted(samples_ms)
    reasons = tuple(noise_reasons(s, noise)) if noise is not None else ()
    if len(s) == 1:
        return Timing(s[0], s[0], s[0], s[0], 0.0, 1, reasons)
    p20, p80 = _quantiles(s)
    mean = statistics.fmean(s)
    return Timing(
        statistics.median(s), p20, p80, mean, statistics.pstdev(s) / mean if mean > 0 else 0.0, len(s), reasons
    )


def bimodal(sorted_ms: Sequence[float], st: NoiseSettings) -> tuple[int, float, int, float] | None:
    """Two clusters: split at the widest gap that leaves each side at least min_cluster_share of the repeats;
    bimodal when the clusters' medians differ by bimodal_ratio and the gap is at least half that distance
    (a wide unimodal spread has many small gaps, not one large one). Returns (n_low, median_low, n_high,
    median_high) or None."""
    x = list(sorted_ms)
    n = len(x)
    least = max(2, math.ceil(st.min_cluster_share * n))
    if n < 2 * least:
        return None
    i = max(range(least, n - least + 1), key=lambda j: x[j] - x[j - 1])
    lo, hi = statistics.median(x[:i]), statistics.median(x[i:])
    if lo > 0 and hi / lo >= st.bimodal_ratio and x[i] - x[i - 1] >= 0.5 * (hi - lo):
        return i, lo, n - i, hi
    return None


def tick_quantised(sorted_ms: Sequence[float], st: NoiseSettings) -> tuple[float, float] | None:
    """(tick_ms, share on its multiples) when the repeats sit on multiples of a scheduler tick and either
    sit on two or more different multiples or the fastest repeat is under half the median (the op itself
    is fast, the rest is waiting). Ops longer than tick_max_multiple ticks are not judged: a tick is then a
    small part of their time, and long ops naturally span several multiples. A steady op that happens to last k ticks, on one multiple and with no
    fast repeat, cannot be told apart from the repeats alone and is not flagged here."""
    x = list(sorted_ms)
    med = statistics.median(x)
    for tick in st.tick_ms:
        if med > st.tick_max_multiple * tick:
            continue
        multiples = [round(v / tick) for v in x]
        on = [m for v, m in zip(x, multiples) if m >= 1 and abs(v / tick - m) <= st.tick_tolerance]
        share = len(on) / len(x)
        if share >= st.tick_share and (len(set(on)) >= 2 or x[0] < 0.5 * med):
            return tick, share
    return None


def noise_reasons(samples_ms: Sequence[float], st: NoiseSettings) -> list[str]:
    """Why these repeats are not stable enough to draw a ratio, a ceiling or a verdict from; [] if they are."""
    x = sorted(samples_ms)
    if len(x) < st.min_reps:
        return [f"only {len(x)} repeat(s): no spread to judge (need {st.min_reps})"]
    out = []
    med = statistics.median(x)
    p20, p80 = _quantiles(x)
    spread = (p80 - p20) / med if med > 0 else 0.0
    if spread > st.max_spread:
        out.append(f"p20-p80 spread {spread:.0%} of the median > {st.max_spread:.0%}")
    mean = statistics.fmean(x)
    cov = statistics.pstdev(x) / mean if mean > 0 else 0.0
    if cov > st.max_cov:
        out.append(f"coefficient of variation {cov:.0%} > {st.max_cov:.0%}")
    if (b := bimodal(x, st)) is not None:
        out.append(f"bimodal: {b[0]} repeats near {b[1]:.3g} ms, {b[2]} near {b[3]:.3g} ms")
    if (q := tick_quantised(x, st)) is not None:
        out.append(f"{q[1]:.0%} of repeats on multiples of a {q[0]:g} ms scheduler tick: the op waited for a CPU")
    return out


def wait_reason(cpu_wait: float | None, st: NoiseSettings) -> str | None:
    """The timed repeats' threads spent this share of their runnable time waiting for a CPU: the times
    measure the scheduler (often with a small spread: every repeat waited alike)."""
    if cpu_wait is None or cpu_wait <= st.max_cpu_wait:
        return None
    return (
        f"its threads waited for a CPU {cpu_wait:.0%} of the time they were runnable "
        f"(> {st.max_cpu_wait:.0%}; /proc schedstat): the time is the scheduler's"
    )


def spreads_overlap(a: dict, b: dict) -> bool:
    """Two time_ms blocks ({p20, p80}) whose p20-p80 intervals overlap: the same within noise."""
    return a["p20"] <= b["p80"] and b["p20"] <= a["p80"]
