"""One function per finding (data/findings.toml says what each needs, its fix and its reason): each reads the
facts and returns the finding with its saving {low, expected, high}, a reason it could not be checked, or None.
Savings come from the one prediction estimate on the same chip (microbench/predict/estimate.py) or from the trace's
own intervals, never from a fixed percentage."""

from __future__ import annotations

import re

import numpy as np

from microbench.core.documents import Finding, Saving
from microbench.findings.facts import (
    ALTERNATIVES,
    NEEDS_WHY,
    NO_CHIP,
    CpuFacts,
    Facts,
    floor_of,
    longest_per_step,
    saving,
    threshold,
    top_kernels,
)
from microbench.predict.estimate import (
    Variant,
    placement,
    unshaped_rows,
)
from microbench.predict.kernels import MATRIX
from microbench.trace import gpu_time
from microbench.trace.timeline import KERNEL, MEMCPY, TC_VALUES


def _cpu_matrix_evidence(f: CpuFacts, rows: np.ndarray) -> dict:
    layers = [f.rows[r][0] for r in rows]
    top = sorted(((f.work.names[r], float(f.work.dur_us[r])) for r in rows), key=lambda kv: -kv[1])[:3]
    tc = [layer.get("tensor_cores") for layer in layers]
    return {
        "layer": "oneDNN primitive records (the implementation: avx512_core is fp32 FMA, *_bf16 / amx the "
        "matrix units) + recorded operator shapes",
        "kernels": [{"kernel": k, "time_us": t} for k, t in top],
        "ops": [],
        "impls": sorted({e for layer in layers for e in [layer.get("tensor_core_evidence", "")] if e})[:3],
        "tensor_cores": {v: tc.count(v) for v in sorted(set(tc))},
    }


def _finding(rid: str, rule: dict, time_us: float, f: Facts, what: str, evidence: dict, save: Saving, **fmt) -> Finding:
    return {
        "id": rid,
        "what": what,
        "time_us": time_us,
        "share": time_us / f.step_us if f.step_us else None,
        "evidence": evidence,
        "fix": rule["fix"].format(**fmt),
        "saving_us": save,
        "per": f.per,
        "reason": rule["reason"].format(**fmt),
    }


# --- the dtype findings: the prediction model, same chip, Scenario(dtype) against Scenario() ---------------------


def _rows_time_us(f: Facts, rows: np.ndarray) -> float:
    """The time per step (or trace) of the activities `rows`."""
    return f.per_step(np.where(np.isin(np.arange(len(f.work.dur_us)), rows), f.work.dur_us, 0.0))


def _fp32_matrix_rows(f: Facts) -> np.ndarray:
    """Matrix kernels (GEMM / convolution / attention) whose operator ran in fp32 (or TF32)."""
    w = f.work
    return np.flatnonzero(np.isin(w.group, MATRIX) & np.array([p in ("fp32", "tf32") for p in w.precision], dtype=bool))


def dtype_saving(f: Facts, dtype: str) -> dict[str, float]:
    """The busy time per step the prediction saves by moving fp32 matrix work to `dtype` on the same chip: the
    base assumptions give `expected`; each alternative assumption (ALTERNATIVES) moves it, and low / high add up
    the moves down and up (the prediction's own range rule, predict/document.py). On a CPU (CpuFacts.saved)
    the base scales the working matrix operators' slack and holds the other operators; halving those with their
    bytes is one more alternative."""

    def one(v: Variant, **kw) -> float:
        return f.per_step(f.saved(dtype, v, **kw)) * f.overlap

    expected = one(Variant())
    moves = [one(v) - expected for v in ALTERNATIVES.values()]
    moves += [one(Variant(), **kw) - expected for kw in f.extra_alternatives]
    return saving(expected + sum(min(m, 0.0) for m in moves), expected, expected + sum(max(m, 0.0) for m in moves))


def _matrix_evidence(f: Facts, rows: np.ndarray) -> dict:
    if isinstance(f, CpuFacts):
        return _cpu_matrix_evidence(f, rows)
    tl = f.ta.evidence
    tc = [TC_VALUES[v] for v in tl.activities.tensor_cores[rows]]
    ops = [
        {"op": e["op"], "reason": e["reason"], "time_us": e["time_us"] / max(len(f.steps), 1)}
        for e in (f.ta.eligibility.get("findings") or [])[:3]
    ]
    counted = any(p.get("evidence") == "counters" for p in (k["params"] for k in f.ta.kernels))
    shaped = not unshaped_rows(f.work)[rows].all()
    return {
        "layer": ("hardware counters" if counted else "kernel-name rule")
        + (" + recorded operator shapes" if shaped else " (no operator shapes: fp32 by the kernel names)"),
        "kernels": top_kernels(f, rows),
        "ops": ops,
        "tensor_cores": {v: tc.count(v) for v in sorted(set(tc))},
    }


def _unmoved(f: Facts, rows: np.ndarray) -> str:
    """What of those kernels the model moves without FLOPs (no operator with shapes launched them: fp32 by their
    names, a share of their time taken as math) and what it cannot move, said in the finding."""
    out = ""
    unshaped = rows[unshaped_rows(f.work)[rows]]
    if len(unshaped):
        share, where = f.unshaped_share
        which = (
            "none of them has a"
            if len(unshaped) == len(rows)
            else f"{_rows_time_us(f, unshaped):,.0f} us of them have no"
        )
        out = (
            f"; {which} FLOP count (their operators' shapes give none): {share:.0%} of their time above the "
            f"floor taken as math at their precision's rate (their operator's dtype, else fp32 by their names; "
            f"{where}; none to all of it in the range)"
        )
    why = placement(f.work, None, unshaped=True)[rows]
    left = rows[why != ""]
    if not len(left):
        return out
    us = _rows_time_us(f, left)
    return out + f"; {us:,.0f} us of them have no FLOP count ({why[why != ''][0]}): kept as they are, not in the saving"


def _amp_dtype(f: Facts) -> str:
    return "bf16" if f.chip.rate("bf16", True) else "fp16"


def rule_amp(f: Facts, rule: dict) -> dict | str | None:
    cpu = isinstance(f, CpuFacts)
    if cpu and not f.native_bf16:
        return rule["cpu_no_bf16"]
    if f.chip is None:
        return NO_CHIP
    rows = _fp32_matrix_rows(f)
    if not len(rows):
        return not_checked_amp(f) if "shapes" in f.missing else None
    dtype = _amp_dtype(f)
    time_us = _rows_time_us(f, rows)
    tf32 = "" if cpu else _on_tf32(f, rows)
    what = (
        f"{time_us:,.0f} us per {f.per} ({time_us / f.step_us:.1%} of it) in fp32 {'/ TF32 ' if tf32 else ''}GEMM / "
        f"convolution {'operators' if cpu else 'kernels'}{tf32}: {dtype} autocast moves them to the {dtype} "
        + (
            "matrix-instruction (oneDNN bf16) rate; the operators around them are held (from cache, computed in "
            "fp32 after a conversion: half the bytes is not half the time on a CPU)"
            if cpu
            else "Tensor Core rate and halves the activation bytes of the kernels around them"
        )
    ) + _unmoved(f, rows)
    save = dtype_saving(f, dtype)
    return _acting(f, rows, dtype) | _finding(
        "amp",
        rule,
        time_us,
        f,
        what + _saving_split(f, rows, dtype, save["expected"]),
        _matrix_evidence(f, rows),
        save,
        dtype={"bf16": "bfloat16", "fp16": "float16"}[dtype],
        device="cpu" if cpu else "cuda",
    )


def _acting(f: Facts, rows: np.ndarray, dtype: str) -> dict:
    """`acts_on_us`: the time per step (or trace) of every activity the dtype saving comes from, the matrix
    kernels `rows` and those whose fp32 activations the new dtype halves: what the saving is bounded by
    (findings/engine.py bounded), more than the matrix time the finding quotes."""
    saved = f.saved(dtype, Variant())
    acting = np.isin(np.arange(len(saved)), rows) | (saved > 0)
    return {"acts_on_us": f.per_step(np.where(acting, f.work.dur_us, 0.0))}


def _on_tf32(f: Facts, rows: np.ndarray) -> str:
    """The part of those matrix kernels that already runs as TF32 on Tensor Cores (the trace's own precision), said
    so the line does not read as all of them on the CUDA cores."""
    tf = rows[np.array([f.work.precision[r] == "tf32" for r in rows], dtype=bool)]
    if not len(tf):
        return ""
    us = _rows_time_us(f, tf)
    return f" ({us:,.0f} us of them already TF32 on Tensor Cores)"


def _saving_split(f: Facts, rows: np.ndarray, dtype: str, expected_us: float) -> str:
    """Where the expected saving is, said in the finding: on the matrix kernels it names, and on the kernels around
    them whose fp32 activations autocast halves (predict/estimate.py autocast_halves); the second is why a saving
    can exceed the matrix time the line quotes. Nothing where all of it is on the matrix kernels."""
    saved = f.saved(dtype, Variant())
    mine = np.isin(np.arange(len(saved)), rows)
    on_rows = f.per_step(np.where(mine, saved, 0.0)) * f.overlap
    around = expected_us - on_rows
    if around < 0.01 * max(expected_us, 1.0):
        return ""
    n = f.per_step(np.where(~mine & (saved > 0), 1.0, 0.0))  # per step, as the times are
    return (
        f"; of the {expected_us:,.0f} us it saves, {on_rows:,.0f} us are on those kernels and {around:,.0f} us on "
        f"{n:,.0f} other kernels per {f.per}, whose fp32 activations it halves"
    )


def rule_tf32(f: Facts, rule: dict) -> dict | str | None:
    if f.chip is None:
        return NO_CHIP
    if not f.chip.peak_tflops.get("tf32"):
        return None  # no TF32 on this chip: AMP is the finding
    w = f.work
    rows = np.flatnonzero(np.isin(w.group, MATRIX) & np.array([p == "fp32" for p in w.precision], dtype=bool))
    if not len(rows):
        return not_checked_amp(f) if "shapes" in f.missing else None
    time_us = _rows_time_us(f, rows)
    what = (
        f"{time_us:,.0f} us per {f.per} ({time_us / f.step_us:.1%} of it) in fp32 GEMM / convolution kernels on "
        "CUDA cores, on a chip with TF32 Tensor Cores"
    ) + _unmoved(f, rows)
    found = _finding("tf32", rule, time_us, f, what, _matrix_evidence(f, rows), dtype_saving(f, "tf32"))
    return _acting(f, rows, "tf32") | found


# --- the host-side findings: the per-step breakdown's idle split (timeline/gpu_time.host_breakdown) -------------


def _idle(st: dict, *kinds: str) -> float:
    return sum(st["idle_by_host_us"][k] for k in kinds)


def _busy(st: dict) -> float:
    b = st["breakdown_us"]
    return b["kernel"] + b["memcpy"] + b["memset"]


def _host_evidence(f: Facts, kinds: tuple[str, ...]) -> dict:
    per = {k: f.mean(lambda st, k=k: st["idle_by_host_us"][k]) for k in gpu_time.HOST_CATEGORIES}
    return {
        "layer": "host ranges: runtime calls, CPU operators, enumerate(DataLoader), synchronize (per-step "
        "breakdown_us / idle_by_host_us)",
        "idle_by_host_us": per,
        "kinds": list(kinds),
        "one_off_setup_us": per["setup"],
        "idle_in_ranges_us": {
            n: f.mean(lambda st, n=n: (st.get("idle_in_ranges_us") or {}).get(n, 0.0))
            for n in {n for st in f.steps for n in (st.get("idle_in_ranges_us") or {})}
        },
        "kernels_per_step": f.mean(lambda st: st["kernel_count"]),
        "launches_per_step": f.host_launches,
        "graph_kernel_share": f.graph_kernel_share,
    }


def _host_waits(f: Facts) -> tuple[float, float, float] | None:
    """(idle share of the step, host-side idle us, that idle per launch the host issues: a graph launch is one) where
    the GPU waits on the host between launches (not on data loading or a synchronize) for launch_bound_idle_share
    of the step or more, else None."""
    idle_share = f.mean(lambda st: 1 - _busy(st) / st["breakdown_span_us"] if st["breakdown_span_us"] else 0.0)
    host = f.mean(lambda st: _idle(st, "runtime", "cpu_ops", "other"))
    if idle_share < threshold("launch_bound_idle_share") or host < f.mean(lambda st: _idle(st, "dataloader", "sync")):
        return None
    return idle_share, host, host / max(f.host_launches, 1.0)


def _graphed(f: Facts) -> bool:
    """The step's kernels already replay from CUDA / HIP graphs (graph_launched_share of them or more): what the
    host does between the replays is its own work, which capturing does not remove."""
    return f.graph_kernel_share >= threshold("graph_launched_share")


# Where the host-side findings' figures are in the report: the step breakdown table (its 'step us' window; a trace
# without steps: its 'whole trace' row)
_IN_BREAKDOWN = " (the step breakdown below: all but its kernel, memcpy and memset)"


def _host_parts(f: Facts) -> str:
    """The host-side idle by what the host did, traced back to the breakdown's columns: runtime and cpu_exec there
    include the time in a synchronize, which is the sync finding's and is left out here."""
    parts = ", ".join(
        f"{label} {f.mean(lambda st, k=k: _idle(st, k)):,.0f}"
        for k, label in (
            ("runtime", "runtime calls"),
            ("cpu_ops", "CPU operators"),
            ("other", "nothing traced (Python, waits)"),
        )
    )
    sync = f.mean(lambda st: _idle(st, "sync"))
    setup = f.mean(lambda st: _idle(st, "setup"))
    once = (
        f"; {setup:,.0f} us more is one-off set-up (JIT compilation, module loading, MPI_Init: the data/findings.toml "
        "[host] setup names), not counted here: profile after warm-up"
        if setup
        else ""
    )
    less = (
        f": the breakdown's runtime and cpu_exec less their {sync:,.0f} us in a synchronize, and its other"
        if sync
        else ""
    )
    return f" ({parts} us{less}{once}){_holding_range(f)}"


def _holding_range(f: Facts) -> str:
    """The user range (NVTX, record_function) that holds the most GPU idle time per step, where one holds a
    quarter of the step's idle or more: it names the host work to look at first."""
    totals: dict[str, float] = {}
    for st in f.steps:
        for name, us in (st.get("idle_in_ranges_us") or {}).items():
            totals[name] = totals.get(name, 0.0) + us / len(f.steps)
    idle = f.mean(lambda st: st["idle_us"]) if f.steps else 0.0
    if not totals or not idle:
        return ""
    name, us = max(totals.items(), key=lambda kv: kv[1])
    if us < 0.25 * idle:
        return ""
    return f"; {us:,.0f} us of it inside the range {name[:80]!r}"


def rule_host_bound(f: Facts, rule: dict) -> dict | None:
    waits = _host_waits(f)
    if waits is None or (waits[2] <= threshold("launch_gap_per_kernel_us") and not _graphed(f)):
        return None  # short gaps per launch, launched one by one: launch_bound's
    idle_share, host, per_launch = waits
    in_span = f.mean(lambda st: min(st["idle_us"], _idle(st, "runtime", "cpu_ops", "other")))
    why = (
        f"{f.graph_kernel_share:.0%} of its kernels already replay from CUDA / HIP graphs"
        if _graphed(f)
        else "far more than a launch takes"
    )
    what = (
        f"the GPU is idle {idle_share:.1%} of the {f.step_us:,.0f} us {f.per}{_IN_BREAKDOWN}; {host:,.0f} us of "
        f"it while the host works between launches{_host_parts(f)}, {per_launch:,.0f} us per launch ({why})"
    )
    # moved off the step, the host's work leaves the GPU's own span idle-free at best (expected), all the step's
    # host-side idle at most; at least nothing, where the work cannot move
    found = _finding(
        "host_bound",
        rule,
        host,
        f,
        what,
        _host_evidence(f, ("runtime", "cpu_ops", "other")),
        saving(0.0, in_span, host),
    )
    if not _has_pytorch_ops(f):  # an MPI or CUDA C program: no DataLoader, no torch.profiler to point to
        found["fix"] = rule["fix_without_pytorch"]
    return found


def _has_pytorch_ops(f: Facts) -> bool:
    """Whether the trace records PyTorch operators (aten:: / torch CPU operators): the PyTorch fixes apply."""
    tl = f.ta.tl
    ops = tl.cpu_ops
    return bool(len(ops)) and any(isinstance(n, str) and n.startswith(("aten::", "torch")) for n in tl.names.strings)


def rule_launch_bound(f: Facts, rule: dict) -> dict | None:
    waits = _host_waits(f)
    if waits is None or waits[2] > threshold("launch_gap_per_kernel_us") or _graphed(f):
        return None  # long gaps per launch, or the kernels replay from graphs already: host_bound's
    idle_share, host, _ = waits
    # a graph replay runs the kernels back to back: the gap left is at most the chip's launch floor per kernel
    in_span = f.mean(lambda st: min(st["idle_us"], _idle(st, "runtime", "cpu_ops", "other")))
    gaps = f.mean(lambda st: st["kernel_count"]) * f.floor_us
    what = (
        f"the GPU is idle {idle_share:.1%} of the {f.step_us:,.0f} us {f.per}{_IN_BREAKDOWN}; {host:,.0f} us of "
        f"it while the host is between launches{_host_parts(f)}"
    )
    return _finding(
        "launch_bound",
        rule,
        host,
        f,
        what,
        _host_evidence(f, ("runtime", "cpu_ops", "other")),
        saving(in_span - gaps, in_span, host),
    )


def rule_dataloader(f: Facts, rule: dict) -> dict | str | None:
    cpu = isinstance(f, CpuFacts)
    if cpu and not f.mean(lambda st: st["breakdown_us"]["dataloader"]):
        return "a CPU run: " + rule["cpu_no_loader"]
    wait = f.mean(lambda st: _idle(st, "dataloader"))
    if wait < threshold("dataloader_idle_share") * f.step_us:
        return None
    if cpu:
        return _cpu_dataloader(f, rule, wait)
    # workers load the next batch while this step runs: all of the wait goes where the host has cores to spare for
    # them (expected, high); the trace records no host core count, and where the workers take the main process's
    # cores the loading stays on the step's path: low 0 (findings.toml [rules.dataloader] low_reason)
    low = 0.0
    what = (
        f"the GPU waits {wait:,.0f} us per {f.per} ({wait / f.step_us:.1%}) while the host is in enumerate(DataLoader)"
    )
    return _finding("dataloader", rule, wait, f, what, _host_evidence(f, ("dataloader",)), saving(low, wait, wait))


_FREE_HANDOFF = {"median": 0.0, "p20": 0.0, "p80": 0.0}


def _cpu_loader_times(f: CpuFacts, wait: float) -> tuple[float, float, dict, tuple[float, float]]:
    """(step, loading, hand-off, (slow, fast)) in us for the CPU dataloader rule. Where decompose probed the loader
    (summary.loader_ms): the unprofiled step and loading, one worker's hand-off per batch (median, p20, p80, ms), and
    how far the rest may shift, the timed steps' p80 and p20 over their median (once the loading leaves the process
    its caches and allocator are no longer shared: the rest ran 4 % faster at the digits pair's batch 256, 4 % slower
    at 64). Unprobed (a loader that is not a torch DataLoader): the trace's step and loading, the hand-off taken as
    free and no shift, which the low of 0 allows for."""
    summary = f.doc["summary"]
    probe = summary.get("loader_ms")
    if not probe:
        return f.step_us, wait, _FREE_HANDOFF, (1.0, 1.0)
    spread = summary.get("step_time_spread") or {}
    median = spread.get("median") or 0.0
    shift = (spread["p80"] / median, spread["p20"] / median) if median else (1.0, 1.0)
    return summary["step_time_ms"] * 1e3, probe["in_process"]["median"] * 1e3, probe["one_worker"], shift


def _cpu_dataloader(f: CpuFacts, rule: dict, wait: float) -> dict | None:
    """On a CPU the step's operators and a DataLoader worker share the cores: the fix is one worker with a core of its
    own (the step's threads one fewer where they had them all), and its saving is the loading removed from the step
    less what the rest of the step loses with that core and the worker's hand-off of each batch (findings.toml
    [rules.dataloader] cpu_model)."""
    cores, threads = f.cores, f.torch_threads
    step, wait, h, (slow, fast) = _cpu_loader_times(f, wait)
    rest = step - wait
    if cores < 2 or rest <= 0:
        return None  # one core: a worker has none of its own (the loading only moves)
    busy = (f.doc["summary"].get("step_time_spread") or {}).get("cpu_busy_cores")
    # the cores the rest of the step keeps busy, the loading taken as one core's work (its per-sample operators run
    # on the main thread); unmeasured, as many as it has threads
    used = min(max((busy * step - wait) / rest, 1.0), threads) if busy else float(threads)
    left = min(threads, cores - 1)

    def saved(u: float, q: str, shift: float = 1.0) -> float:  # the rest on `left` threads, the loading beside it
        return step - max(rest * shift * u / min(u, left), wait) - h[q] * 1e3

    probed = h is not _FREE_HANDOFF
    # probed, the share is of the step timed without the profiler, which the line says: the header's step is the
    # profiled one, and the profiler's cost falls mostly on the loader's many small operators
    of = f" of the {step:,.0f} us step timed without the profiler" if probed else ""
    what = (
        f"the step spends {wait:,.0f} us ({wait / step:.1%}{of}) in enumerate(DataLoader) on its own cores; the "
        f"rest of it keeps {used:.1f} of the {cores} cores busy"
        + (f" ({threads} thread{'s' if threads > 1 else ''})" if threads != cores else "")
    )
    if probed:
        what += f"; one worker would hand each batch over in {h['median'] * 1e3:,.0f} us (timed the same way)"
        # the probe's timings as the one judge saw them (core.stats.noise_reasons): unstable, the line says so
        noisy = sorted({r for t in f.doc["summary"]["loader_ms"].values() for r in t.get("noise") or ()})
        if noisy:
            what += "; noisy: " + "; ".join(noisy)
    ev = {
        "layer": "the profiled steps' enumerate(DataLoader) ranges"
        + (" and decompose's loader probe (summary.loader_ms)" if probed else ""),
        "dataloader_us": wait,
        "cores": cores,
        "torch_threads": threads,
        "cpu_busy_cores": busy,
        "rest_busy_cores": used,
        "loader_ms": f.doc["summary"].get("loader_ms"),
    }
    workers = int(rule["cpu_workers"])
    fix = rule["cpu_fix"].format(workers=workers) + (f"; torch.set_num_threads({left})" if threads > left else "")
    expected = saved(used, "median")
    # unprobed, low is 0 (the loading may stay on the step's path), or the expected where that is a loss already
    low = saved(used, "p80", slow) if probed else min(0.0, expected)
    out = _finding(
        "dataloader",
        rule | {"fix": fix},
        wait,
        f,
        what,
        ev,
        # the worker can cost more than the loading it removes (its hand-off, the core it takes): the model's
        # figures are kept below zero (findings.toml [rules.dataloader] may_slow_on)
        saving(low, expected, saved(1.0, "p20", fast), floor=floor_of("dataloader", "cpu")),
    )
    # share: of the step it was timed in (unprofiled where probed); fix_setting: the fix as settings, so that verify
    # applies this fix and not another (the threads only where it changes them)
    setting = {"workers": workers, "threads": left if threads > left else None}
    return out | {"share": wait / step, "fix_setting": setting}


def rule_sync(f: Facts, rule: dict) -> dict | None:
    wait = f.mean(lambda st: _idle(st, "sync"))
    if wait < threshold("sync_idle_share") * f.step_us:
        return None
    what = (
        f"the GPU is idle {wait:,.0f} us per {f.per} ({wait / f.step_us:.1%}) while the host is in a synchronize "
        "or .item()"
    )
    return _finding("sync", rule, wait, f, what, _host_evidence(f, ("sync",)), saving(wait, wait, wait))


# --- the GPU-side findings: intervals of the trace ------------------------------------------------------------


def _gpu_time(f: Facts, key: str) -> float:
    """A figure of the one GPU time breakdown per step (the steps' mean), else of the whole trace."""
    return f.mean(lambda st: st[key]) if f.steps else float(f.ta.summary["gpu_time"][key])


def rule_exposed_comm(f: Facts, rule: dict) -> dict | None:
    exposed, span = _gpu_time(f, "exposed_comm_us"), _gpu_time(f, "gpu_span_us")
    if not span or exposed < threshold("exposed_comm_share") * span:
        return None
    # it can hide under the computation not already hiding communication; the last bucket's all-reduce, after the
    # backward, cannot
    expected = (
        f.mean(lambda st: min(st["exposed_comm_us"], max(st["computation_us"] - st["overlapped_comm_us"], 0.0)))
        if f.steps
        else min(exposed, max(_gpu_time(f, "computation_us") - _gpu_time(f, "overlapped_comm_us"), 0.0))
    )
    hideable = f.comm_hideable()
    if isinstance(hideable, str):
        return hideable
    free = max(_gpu_time(f, "computation_us") - _gpu_time(f, "overlapped_comm_us"), 0.0)
    what = (
        f"{exposed:,.0f} us per {f.per} ({exposed / f.step_us:.1%}) of communication runs with no computation "
        f"under it; {free:,.0f} us of computation runs with none under it, which is what could hide it"
    )
    kernels = f.comm_evidence()
    ev = {
        "layer": f.comm_layer,
        "kernels": kernels,
        "unit": f.comm_unit,
        "exposed_comm_us": exposed,
        "overlapped_comm_us": _gpu_time(f, "overlapped_comm_us"),
    }
    fix = _comm_fix(rule, kernels[0]["kernel"] if kernels else "")
    if hideable is True:  # a GPU: the collectives run on their own stream, beside the computation
        save = saving(expected - f.longest_comm_us(), expected, exposed)
    else:  # a CPU: only the cores the ranks' threads leave idle take the collectives' work (findings.toml cpu_model)
        what += "; " + f.host_phrase(hideable)
        ev["host"] = f.host
        save = saving(0.0, expected * hideable, exposed)
    out = _finding("exposed_comm", rule | {"fix": fix}, exposed, f, what, ev, save)
    if hideable is not True and hideable < 1:  # said beside the range wherever it is shown: 0 us next to a large
        # exposed share reads right
        out["expected_why"] = (
            f"the ranks' threads leave {hideable:.2g} of a core per rank idle for the collectives' work"
        )
    return out


def _comm_fix(rule: dict, kernel: str) -> str:
    """The fix for the collective that takes the most time (findings.toml [[rules.exposed_comm.by_collective]]):
    DDP's buckets for an all-reduce, the pipeline for an embedding all-to-all, FSDP's prefetch for all-gathers."""
    for c in rule.get("by_collective", []):
        if re.search(c["pattern"], kernel):
            return c["fix"]
    return rule["fix"]


def _kernels_matching(f: Facts, rule: dict, category: int) -> np.ndarray:
    return f.name_mask(rule["pattern"]) & (f.ta.tl.activities.category == category)


def rule_pageable_copy(f: Facts, rule: dict) -> dict | None:
    mask = _kernels_matching(f, rule, MEMCPY)
    dur = f.ta.tl.activities.dur_us
    t = f.per_step(np.where(mask, dur, 0.0))
    if t < threshold("pageable_copy_share") * f.step_us:
        return None
    compute = f.mean(lambda st: st["computation_us"])
    # pinned and non_blocking, the copy runs on a copy engine under the step's computation (as far as there is
    # computation to hide it under); with nothing to overlap it stays where it is
    what = f"{t:,.0f} us per {f.per} ({t / f.step_us:.1%}) in copies from pageable host memory"
    ev = {"layer": "memcpy kernel names (Pageable)", "kernels": top_kernels(f, np.flatnonzero(mask))}
    return _finding("pageable_copy", rule, t, f, what, ev, saving(0.0, min(t, compute), t))


def rule_channels_last(f: Facts, rule: dict) -> dict | None:
    mask = _kernels_matching(f, rule, KERNEL)
    dur = f.ta.tl.activities.dur_us
    t = f.per_step(np.where(mask, dur, 0.0))
    kernel_us = f.per_step(np.where(f.ta.tl.activities.category == KERNEL, dur, 0.0))
    if not kernel_us or t < threshold("layout_transpose_share") * kernel_us:
        return None
    what = f"{t:,.0f} us per {f.per} ({t / f.step_us:.1%}) in NCHW <-> NHWC transpose kernels"
    ev = {"layer": "kernel names (layout transposes)", "kernels": top_kernels(f, np.flatnonzero(mask))}
    # channels_last removes them, except the input batch's own conversion (at most the longest one per step)
    low = t - (longest_per_step(f, mask) if f.steps else float(dur[mask].max()))
    return _finding("channels_last", rule, t, f, what, ev, saving(low * f.overlap, t * f.overlap, t * f.overlap))


def rule_allocator(f: Facts, rule: dict) -> dict | str | None:
    """A CPU step that re-faults the memory it freed: its saving measured by decompose's allocator probe, the same
    step timed again with glibc malloc's thresholds fixed (summary.allocator_ms, decompose/allocator.py; findings.toml
    [rules.allocator])."""
    summary = f.doc["summary"]
    if (summary.get("step_time_spread") or {}).get("sys_ms_per_call") is None:
        return (
            "a CPU run without its unprofiled steps' system time (--timed-steps 0, or no getrusage / "
            "/proc schedstat here)"
        )
    probe = summary.get("allocator_ms")
    if not probe:
        return None  # the step does not spend os_time_share of itself in the OS page-faulting (decompose/pipeline.py)
    if "not_run" in probe:
        return "a CPU run: " + probe["not_run"]
    before, after = probe["default"], probe["fixed"]
    step = before["median"] * 1e3
    # the probe's own "before" where it has one (the child processes'), else the decomposition's unprofiled steps
    sys_us = before.get("sys_ms_per_call", summary["step_time_spread"]["sys_ms_per_call"]) * 1e3
    faults = before.get("minor_faults_per_call", summary["step_time_spread"].get("minor_faults_per_call") or 0.0)
    k = probe.get("processes") or 0
    timed = f"timed in {k} fresh processes" if k else "timed without the profiler"
    what = (
        f"{sys_us:,.0f} us of the {step:,.0f} us step {timed} ({sys_us / step:.1%}) is in the "
        f"operating system, {faults:,.0f} page faults a step: the buffers each step frees "
        f"go back to the OS and are faulted in again; with glibc's thresholds fixed the step took "
        f"{after['median'] * 1e3:,.0f} us ({after.get('minor_faults_per_call', 0):,.0f} faults)"
    )
    what += (
        f" in {k} more"
        if k
        else " (in the same process, after the defaults: a step that drifts over a run credits the fix with the drift)"
    )
    noisy = sorted(set(before.get("noise") or ()) | set(after.get("noise") or ()))
    if noisy:
        what += "; noisy: " + "; ".join(noisy)
    ev = {
        "layer": "decompose's unprofiled steps (system time and page faults, getrusage) and the same steps with "
        "glibc's malloc thresholds fixed (summary.allocator_ms)"
        + (f", each in {k} separate processes" if k else ", in one process"),
        "allocator_ms": probe,
    }
    out = _finding(
        "allocator",
        rule,
        sys_us,
        f,
        what,
        ev,
        saving(
            (before["p20"] - after["p80"]) * 1e3,
            (before["median"] - after["median"]) * 1e3,
            (before["p80"] - after["p20"]) * 1e3,
        ),
        env=probe["env"],
    )
    return out | {"share": sys_us / step}  # of the unprofiled step the probe timed


def not_checked_amp(f: Facts) -> str:
    """Why AMP could not be checked, with what the kernel names alone say (never a number the model did not make)."""
    s = f.ta.summary
    gemm = (s["share_by_class"] or {}).get("gemm") or 0.0
    return (
        (
            f"{NEEDS_WHY['shapes']}; the kernel-name rule alone puts {gemm:.1%} of kernel time in GEMM / convolution "
            "kernels without Tensor Cores, but without FLOPs the saving cannot be predicted"
        )
        if gemm >= 0.001
        else NEEDS_WHY["shapes"]
    )


RULES = {
    "amp": rule_amp,
    "tf32": rule_tf32,
    "launch_bound": rule_launch_bound,
    "host_bound": rule_host_bound,
    "dataloader": rule_dataloader,
    "sync": rule_sync,
    "exposed_comm": rule_exposed_comm,
    "pageable_copy": rule_pageable_copy,
    "channels_last": rule_channels_last,
    "allocator": rule_allocator,
}
