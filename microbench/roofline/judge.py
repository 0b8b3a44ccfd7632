"""The one judge: every timed number of every row kind (a kernel case, a model layer, a pytest-benchmark case,
a collective, a time-to-accuracy run) passes through here before it is printed or stored. Its verdicts and
their words are in core.verdict:

- repeats that disagree are flagged `noisy` and draw no verdict against a roof;
- a throughput above the datasheet (GPU) or estimated (CPU) compute peak, even at the row's slower repeats,
  cannot be right: flagged `impossible` with the reason, and kept out of ratios and summaries;
- a throughput above the measured roof beyond both spreads is flagged, never celebrated;
- a percentage of a ceiling measured on a busy machine says so (`busy ceiling`) and draws no verdict."""

from __future__ import annotations

from microbench.core import thresholds
from microbench.core.conditions import fitted_threads
from microbench.core.ops.work import Work
from microbench.core.results import ResultRow
from microbench.core.stats import Timing
from microbench.core.verdict import BUSY_CEILING, BUSY_THREADS, IMPOSSIBLE, NOISY, is_noisy  # noqa: F401
from microbench.roofline.ceilings import COMPUTE, Ceiling, Ceilings


def judge_timing(row: ResultRow, timing: Timing) -> ResultRow:
    """The part of the judgement every timed row gets, with or without a roofline: its time and spread, and
    `noisy` with the reasons when its repeats disagree (collectives, time-to-accuracy runs)."""
    row.time_ms = timing.as_dict()
    if timing.noise and not any(f.startswith(NOISY) for f in row.flags):
        row.flags.append(NOISY + "; ".join(timing.noise))
    if (fit := fitted_threads()) is not None and not any(f.startswith(BUSY_THREADS) for f in row.flags):
        row.flags.append(
            f"{BUSY_THREADS}timed on {fit['threads']} of {fit['was']} CPU threads (the other work "
            "left no more cores free): not comparable with a quiet run's times"
        )
    return row


def judge(row: ResultRow, work: Work, timing: Timing, ceilings: Ceilings) -> ResultRow:
    """Fill a timed row's throughput and its standing against the ceilings (the harness derives
    throughput from the work the case states; no provider computes its own). An unstable row is flagged
    `noisy` and gets no verdict against the roof."""
    seconds = timing.median_ms * 1e-3
    judge_timing(row, timing)
    row.tflops = work.flops / seconds / 1e12
    row.gbps = work.bytes_moved / seconds / 1e9
    row.intensity = work.intensity
    dt = row.dtype
    roof, bound = ceilings.roof(dt, work.intensity, sources=("measured",))
    roof_src = "measured"
    if roof is None:
        roof, bound = ceilings.roof(dt, work.intensity, sources=("datasheet", "estimate"))
        roof_src = "datasheet/estimate"
    if roof is not None:
        row.ceiling = f"{roof_src} {dt} roofline ({bound})"
        row.ceiling_tflops = roof
        row.pct_of_ceiling = 100.0 * row.tflops / roof
        row.bound = bound
        if roof_src == "measured":
            c = ceilings.compute(dt) if bound == COMPUTE else ceilings.memory()
            if c is not None and c.busy:
                _busy_ceiling(row, c)
            elif not timing.noise:
                _above_roof(row, work, timing, ceilings, roof, bound)
    if (m := ceilings.compute(dt, ("measured",))) is not None:
        row.pct_of_measured = 100.0 * row.tflops / m.value
        if m.busy:
            _busy_ceiling(row, m)
    if (d := ceilings.compute(dt, ("datasheet", "estimate"))) is not None:
        row.pct_of_datasheet = 100.0 * row.tflops / d.value
        row.datasheet_source = d.source
        _above_peak(row, work, timing, d)
    return row


def _busy_ceiling(row: ResultRow, c: Ceiling) -> None:
    """A ceiling measured on a busy machine may be far too low: a percentage of it says so, once."""
    if any(f.startswith(BUSY_CEILING) for f in row.flags):
        return
    row.flags.append(
        f"{BUSY_CEILING}the {c.name} ceiling ({c.value:.4g} {c.unit}) was measured on a busy machine "
        f"({c.busy[0]}): percentages of it may be far too high, no verdict drawn"
    )


def _above_peak(row: ResultRow, work: Work, timing: Timing, peak: Ceiling) -> None:
    """Faster than the chip's compute peak even at the row's slower repeats (its p80 time): noise only ever
    slows a repeat down, so no spread explains it. The time missed part of the work (attributed elsewhere,
    asynchronous), the work is over-counted, or (CPU) the estimate's FLOPs per cycle are too low."""
    if not work.flops or timing.p80_ms <= 0:
        return
    row_low = work.flops / (timing.p80_ms * 1e-3) / 1e12
    if row_low <= peak.value * (1 + thresholds.value("above_ceiling_slack")):
        return
    pct = 100.0 * row.tflops / peak.value
    why = "the time misses part of the work (attributed elsewhere, or not waited for), the work is over-counted" + (
        ", or the estimate's FLOPs per cycle are too low for this CPU" if peak.source == "estimate" else ""
    )
    row.flags.append(
        f"{IMPOSSIBLE}{pct:.0f} % of the {peak.source} {row.dtype} peak ({peak.value:.4g} TFLOP/s), "
        f"{row_low / peak.value:.2f}x even at its slower repeats: {why}"
    )


def _above_roof(row: ResultRow, work: Work, timing: Timing, ceilings: Ceilings, roof: float, bound: str) -> None:
    """Flag a row above its measured roof beyond noise: even at its slowest usual repeat (p80 time) it beats
    the roof at the ceiling's fastest usual repeat (p20 time), by more than `above_ceiling_slack`
    (microbench/data/thresholds.toml). A noisy ceiling gives no verdict, but a row above it is flagged as above an
    unsteady roof (the ceilings table and a note say it is noisy)."""
    c = ceilings.compute(row.dtype) if bound == COMPUTE else ceilings.memory()
    if c is None:
        return
    row_low = work.flops / (timing.p80_ms * 1e-3) / 1e12
    roof_high = roof * c.high / c.value
    if row_low <= roof_high * (1 + thresholds.value("above_ceiling_slack")):
        return
    pct = 100.0 * row.tflops / roof
    if c.noise:  # no verdict from a roof whose own repeats disagree, but a row above it is never shown as ok
        row.flags.append(
            f"above the measured {bound} roof ({pct:.0f} %), whose own repeats disagree ({c.noise[0]}): the roof is "
            "too unsteady to judge by; measure the ceilings again on a quiet machine"
        )
        return
    if row.is_baseline and row.flat().get("op") == "gemm":
        why = (
            "the ceiling comes from the same library's GEMM: the search did not time this shape (budget), "
            "or its timing of it was slowed"
        )
    else:
        why = "the ceiling's GEMM is not the library's fastest path for this op, the data stayed in cache, or a bug"
    row.flags.append(
        f"above the measured {bound} roof ({pct:.0f} %, {row_low / roof_high:.2f}x beyond both spreads): {why}"
    )
