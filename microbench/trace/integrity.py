"""What a trace lacks, said before any figure: per trace, each thing missing (launches, shapes, steps,
GPU-side step annotations, device properties, events the reader skipped, device work in categories no reader
knows) and which figures it makes unreliable; and whether the FLOPs behind MFU, achieved TFLOP/s and the per-op
totals cover enough of the matrix-kernel time to show them (`flop_coverage_min`, microbench/data/thresholds.toml).
Figures below that share are withheld, never guessed (docs/traces.md, "Integrity")."""

from __future__ import annotations

import re

import numpy as np

from microbench.core import thresholds
from microbench.trace import processes
from microbench.trace.classify import name_cap_chars
from microbench.trace.timeline import EPS_US, GPU_RANGE, Timeline

# The figures an entry can name (the report's words for the document's keys).
STEPS, ANNOTATIONS, OPS, MFU, ELIGIBILITY, PEAKS, ALL = (
    "per-step values",
    "annotations",
    "per-op totals",
    "MFU",
    "Tensor Core eligibility",
    "% of peak",
    "every figure",
)


def _entry(what: str, detail: str, unreliable: list[str]) -> dict:
    return {"what": what, "detail": detail, "unreliable": unreliable}


def _launches(tl: Timeline, s: dict, outside: dict, has_steps: bool) -> list[dict]:
    """GPU activities (kernels, copies) whose runtime call is not in the trace."""
    n = int(np.isnan(tl.launch_time()[0]).sum())
    if not n:
        return []
    what = f"{s['unattributed_kernels']} of {s['kernel_count']} kernels" + (
        f" and {n - s['unattributed_kernels']} memcpy / memset" if n > s["unattributed_kernels"] else ""
    )
    placed = outside.get("placed_by_gpu_annotation", 0)
    where = (
        f"; {placed} placed by the GPU-side step annotations, {outside.get('unlaunched_outside_steps', 0)} "
        "outside the steps"
        if has_steps
        else ""
    )
    # placed by the step's GPU-side annotation, an activity is in the right step; outside them, in none
    steps_hurt = has_steps and outside.get("unlaunched_outside_steps", 0) > 0
    return [
        _entry(
            "launches",
            f"{what} have no launching runtime call in the trace{where}",
            ([STEPS] if steps_hurt else []) + [ANNOTATIONS, OPS, ELIGIBILITY],
        )
    ]


def _operators(tl: Timeline) -> list[dict]:
    if not len(tl.cpu_ops):
        return [_entry("operators", "no CPU operators in the trace", [OPS, MFU, ELIGIBILITY])]
    if (tl.cpu_ops.input_dims == -1).all():
        return [
            _entry(
                "shapes", "no operator has Input Dims (recorded without record_shapes=True)", [OPS, MFU, ELIGIBILITY]
            )
        ]
    return []


def _steps(tl: Timeline, windows, s: dict) -> list[dict]:
    if not len(windows):
        return [
            _entry(
                "steps",
                "no ProfilerStep#N (or --step-range) ranges: whole-trace figures only; MFU over the GPU span",
                [STEPS],
            )
        ]
    if (overlap := _overlapping_steps(windows)) is not None:
        return [overlap]
    gpu_steps = (tl.ranges.kind == GPU_RANGE) & np.isin(tl.ranges.name, [tl.names.find(n) for n in windows.names])
    if gpu_steps.any() or not np.isnan(tl.launch_time()[0]).any():
        return []  # only a kernel without a launch needs them
    return [
        _entry(
            "GPU-side step annotations",
            "no gpu_user_annotation ProfilerStep#N: the kernels without a launch "
            "are outside the steps, whichever launched them",
            [STEPS],
        )
    ]


def _processes(tl: Timeline, windows) -> list[dict]:
    """Several processes with their own steps and kernels in one file (a TraceLens TraceFusion merge of ranks, a
    cat of rank traces, an Nsight Systems capture of a whole job): the steps interleave, and a step's figures
    mix the ranks (trace/processes.py)."""
    pids = processes.ranks_in(tl, windows)
    if not pids:
        return []
    return [
        _entry(
            "several processes in one file",
            f"{len(pids)} processes (pids {', '.join(map(str, pids[:8]))}{' ...' if len(pids) > 8 else ''}) each "
            "record their own steps and launch their own kernels: a merged file of ranks? Its steps interleave, so "
            "the whole file's per-step figures mix the ranks; `dawnscope trace` and `comm ranks` read each process "
            "as a rank of one job",
            ["steps", "MFU", "findings"],
        )
    ]


def _overlapping_steps(windows) -> dict | None:
    """Steps of one process whose CPU ranges overlap (a writer's nesting, or a step range that is not a step): each
    GPU activity goes to the latest-starting one around its launch, and the steps' times add past the trace."""
    pairs = []
    for p in np.unique(windows.pid):
        mine = np.flatnonzero(windows.pid == p)
        mine = mine[np.argsort(windows.ts_us[mine], kind="stable")]
        reach, holder = -np.inf, None
        for j in mine:
            if windows.ts_us[j] < reach - EPS_US:
                pairs.append((j, holder))
            if windows.end_us[j] > reach:
                reach, holder = windows.end_us[j], j
    if not pairs:
        return None
    j, h = pairs[0]
    return _entry(
        "disjoint steps",
        f"{len(pairs)} of {len(windows)} steps start inside an earlier step of their process "
        f"({windows.names[j]} at {windows.ts_us[j]:,.1f} us, inside {windows.names[h]}, "
        f"{windows.ts_us[h]:,.1f} - {windows.end_us[h]:,.1f} us): each GPU activity is in "
        "the latest-starting step around its launch; the whole trace counts each instant "
        "once",
        [STEPS],
    )


def _devices(devices: list[dict]) -> list[dict]:
    out = []
    for d in devices:
        ds = d.get("datasheet") or {}
        if not d.get("name"):
            if ds.get("entry"):  # the user named the chip (--source): its peaks stand; the eligibility check needs
                out.append(
                    _entry(
                        "device properties",
                        f"device {d['id']} is not named in the trace; its datasheet "
                        f"is {ds['note'].removeprefix('given by ')}",
                        [ELIGIBILITY],
                    )
                )  # the trace's properties
                continue
            out.append(
                _entry(
                    "device properties",
                    ds.get("note") or f"device {d['id']} is not named in the trace",
                    [MFU, PEAKS, ELIGIBILITY],
                )
            )
        elif "datasheet" in d and not ds.get("entry"):
            out.append(
                _entry("device datasheet", ds.get("note") or f"no datasheet entry for {d['name']}", [MFU, PEAKS])
            )
    return out


# What the profiler's own log says when it lost events: libkineto's CUPTI layer (CuptiActivityApi.cpp) logs
# "Dropped N activity records" and "Exceeded max GPU buffer count (N >= M) - terminating tracing".
DROPPED = re.compile(r"dropped|terminating tracing|buffer (count|overflow|full)", re.IGNORECASE)


def lost_device_launches(tl: Timeline) -> int:
    """Runtime calls that launched device work (cudaLaunchKernel, hipMemcpyAsync, ...: the launches with a
    correlation id) in a trace that holds no GPU activity at all: the device's records were lost, this is not a
    trace of the host alone. 0 where the trace has GPU activity or no launches."""
    return 0 if len(tl.activities) else len(tl.launches)


LOST_DEVICE = (
    "{n:,} launch calls, 0 kernel records: the device activity was lost (CUPTI buffers not flushed? the profiler "
    "stopped or the trace was exported before the GPU work finished); every GPU figure is missing"
)


def _lost(tl: Timeline) -> list[dict]:
    n = lost_device_launches(tl)
    return [_entry("device activity", LOST_DEVICE.format(n=n), [ALL])] if n else []


def _long_names(tl: Timeline) -> list[dict]:
    """Kernel names over the cap the rules read (classify.name_cap_chars): classified on their head."""
    cap = name_cap_chars()
    used = set(tl.activities.name.tolist())
    long = [len(tl.names[i]) for i in used if len(tl.names[i]) > cap]
    if not long:
        return []
    detail = (
        f"{len(long)} kernel name(s) longer than {cap:,} characters (the longest {max(long):,}) were classified on "
        f"their first {cap:,}"
    )
    return [_entry("whole kernel names", detail, [])]


def _events(tl: Timeline) -> list[dict]:
    out = [_entry("events", f"the reader skipped {n} {what}", [ALL]) for what, n in tl.skipped.items()]
    out += _long_names(tl)
    log = tl.meta.get("profiler_log") or []
    lost = [f"{level}: {m}" for level, m in log if DROPPED.search(m)]
    if lost:
        out.append(
            _entry(
                "events the profiler dropped",
                "; ".join(lost[:3]) + (f" (and {len(lost) - 3} more)" if len(lost) > 3 else ""),
                [ALL],
            )
        )
    records = tl.meta.get("unread_records") or {}
    if records:  # rocprofv3 buffer kinds the reader does not read (roctx markers: the annotations)
        names = ", ".join(f"{k} ({n:,})" for k, n in sorted(records.items(), key=lambda kv: -kv[1]))
        out.append(
            _entry(
                "records not read",
                f"rocprofv3 records the reader leaves out: {names}",
                [ANNOTATIONS] if "marker_api" in records else [],
            )
        )
    if len(log) > len(lost):
        out.append(
            _entry(
                "profiler log",
                f"{len(log) - len(lost)} other ERROR / WARNING messages in the trace, "
                f"the first: {next(m for _, m in log if not DROPPED.search(m))[:160]}",
                [],
            )
        )
    unread = tl.meta.get("unread_categories") or {}
    if unread:
        names = ", ".join(f"{c} ({n:,})" for c, n in sorted(unread.items(), key=lambda kv: -kv[1]))
        out.append(
            _entry(
                "device work in unknown categories",
                f"events in categories no reader knows: {names}; if they are device work, it is not in any figure",
                [ALL],
            )
        )
    return out


def coverage(cov: dict) -> dict:
    """The FLOP coverage with its threshold and whether MFU, achieved TFLOP/s and the per-op totals are shown."""
    least = thresholds.value("flop_coverage_min")
    share = cov["share"]
    return cov | {"threshold": least, "withheld": share is not None and share < least}


def _setup_in_steps(steps: list[dict]) -> list[dict]:
    """One-off set-up inside the steps (gpu_time's idle kind `setup`), at least thresholds setup_in_steps_share of
    their wall time: the steps are warm-up, not the steady state."""
    wall = sum(st.get("wall_us") or 0.0 for st in steps)
    setup = [(st["name"], st["idle_by_host_us"]["setup"]) for st in steps if st.get("idle_by_host_us", {}).get("setup")]
    total = sum(us for _, us in setup)
    if not wall or total < thresholds.value("setup_in_steps_share") * wall:
        return []
    worst = max(setup, key=lambda x: x[1])
    return [
        _entry(
            "steady-state steps",
            f"{total:,.0f} us ({total / wall:.0%}) of the steps' {wall:,.0f} us is one-off set-up while the GPU "
            f"idles (JIT compilation, module loading, MPI_Init, cudnnFind, warm-up ranges; most in {worst[0]}: "
            f"{worst[1]:,.0f} us): profile after warm-up (torch.profiler.schedule's wait / warmup; Nsight Systems' "
            "--capture-range=cudaProfilerApi or --delay); no finding counts it as a per-step saving",
            [STEPS],
        )
    ]


def integrity_of(
    tl: Timeline, s: dict, windows, outside: dict, devices: list[dict], cov: dict, steps: list[dict] = ()
) -> dict:
    """The `integrity` key of the trace document (`s`: kernel_count and unattributed_kernels of the summary;
    `steps`: gpu_time's per-step breakdowns):
    `missing` (what, detail, the figures it makes unreliable),
    `unreliable` (those figures, once each), `flop_coverage` (module docstring) and `withheld`."""
    missing = (
        _lost(tl)
        + _launches(tl, s, outside, bool(len(windows)))
        + _operators(tl)
        + _steps(tl, windows, s)
        + _processes(tl, windows)
        + _setup_in_steps(list(steps))
        + _devices(devices)
        + _events(tl)
    )
    unreliable = list(dict.fromkeys(u for m in missing for u in m["unreliable"]))
    withheld = ["mfu", "achieved_tflops", "per-op totals"] if cov["withheld"] else []
    return {"missing": missing, "unreliable": unreliable, "flop_coverage": cov, "withheld": withheld}
