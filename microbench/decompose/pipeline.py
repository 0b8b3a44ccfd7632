"""A model's training step, decomposed into its kernels (GPU) or operators (CPU), attributed to layers and
phases, counted (FLOPs, bytes), classified, judged against the ceilings, and replayed GEMM by GEMM through
every available provider: `decomposition_doc(model, DecomposeOptions(...))` runs the named stages of STAGES (load,
record, profile, attribute, count, judge, replay, document) over one Decomposition and returns data; the files
are written by the caller (microbench.api.decompose_step, the command).

The command is `dawnscope decompose --model NAME` (or `dawnscope roofline --model NAME`);
the public API takes the options as keyword arguments:

    from microbench import decompose_step
    doc = decompose_step("resnet9", batch=64, dtype="bf16", out="results/resnet9")
    doc = decompose_step((my_model, make_inputs))            # or a Workload, or "package.module:factory"

Writes into --out: decomposition.json (summary + layers), results.json / results.csv (the layer rows and
the replay rows, one row type), roofline.png / .svg, and trace.json.gz (the profiler trace: open it in
Perfetto or chrome://tracing). See docs/models.md for the definitions.
"""

from __future__ import annotations

import datetime as _dt
import tempfile
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from microbench import models
from microbench.core import dtypes, ops, thresholds, vendor
from microbench.core.conditions import Conditions
from microbench.core.config import CaseSet, load_config
from microbench.core.errors import InputError
from microbench.core.ops.work import Work
from microbench.core.results import LayerRow
from microbench.core.stats import NoiseSettings, spreads_overlap, summarize
from microbench.core.verdict import IMPOSSIBLE
from microbench.decompose import allocator
from microbench.decompose.attribution import attribute, load_trace
from microbench.models import ModelError
from microbench.roofline import registry
from microbench.trace.classify import class_set, classify_cpu_impl
from microbench.trace.gpu_time import step_ends

SCHEMA = "dawnscope.decomposition/1"
DECOMPOSE_FILES = (
    "decomposition.json",
    "results.json",
    "results.csv",
    "roofline.png",
    "roofline.svg",
    "trace.json.gz",
    "report.html",
)
CPU_MATRIX_NOTE = (
    "CPU profile: time is operator self time, not kernel time. Whether a matrix unit ran a convolution or "
    "matmul (AMX tiles; the AVX-512 BF16/FP16/VNNI dot-product instructions, which kernel_rules.toml counts as "
    "this CPU's matrix units) is read from oneDNN's verbose log, matched to the operators by problem shape. "
    "GEMMs that MKL runs (fp32 matmul and linear layers) leave no such record: their matrix-unit use is "
    "unknown, and fp32 AVX-512 FMA is a vector unit, not a matrix unit."
)


def _progress(cb: Callable[[str], None] | None, msg: str) -> None:
    if cb:
        cb(msg)


# ---- oneDNN evidence on a CPU ----------------------------------------------------------------------------
def onednn_key(rec) -> tuple | None:
    """A oneDNN record -> the problem key of its op family's spec (None: no family, or unparsable)."""
    spec = ops.for_onednn(rec.kind)
    return spec.onednn_key(rec) if spec else None


def cpu_matrix_evidence(records, onednn) -> dict[tuple[str, str], dict]:
    """(layer, phase) -> FLOPs of its GEMM/conv cases by matrix-unit verdict, and the implementations seen."""
    from microbench.decompose.oprecord import bucket_name

    impls: dict[tuple, Counter] = defaultdict(Counter)
    for r in onednn:
        key = onednn_key(r)
        if key is not None:
            impls[key][r.impl] += 1
    out: dict[tuple[str, str], dict] = {}
    for rec in records:
        for case in rec.cases:
            e = out.setdefault(
                (bucket_name(rec.layer, rec.phase), rec.phase or "step"), {"flops": Counter(), "impls": Counter()}
            )
            spec = ops.of(case)
            seen = impls.get(spec.problem_key(case))
            flops = spec.work(case).flops
            if not seen:
                e["flops"]["unknown"] += flops
                continue
            impl = seen.most_common(1)[0][0]
            e["flops"][classify_cpu_impl(impl).tensor_cores] += flops
            e["impls"][impl] += 1
    return out


# ---- the decomposition -----------------------------------------------------------------------------------
def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"


_OUT_OF_MEMORY = ("can't allocate", "out of memory", "not enough memory")


def _step_error(what: str, e: BaseException, model_name: str, batch: int):
    """The one line for a training step that fails: an allocation failure names --batch (the argument to
    change), anything else --model."""
    if isinstance(e, MemoryError) or any(t in str(e).lower() for t in _OUT_OF_MEMORY):
        return ModelError(
            None,
            f"{what}: out of memory at this batch ({_first_line(e)[:160]}); give a smaller one",
            key="--batch",
            value=batch,
        )
    return ModelError(None, f"{what}: {_first_line(e)}", key="--model", value=model_name)


def _run_first_step(step, ranges_factory, notes: list[str]):
    """The first step; a model that modifies a module's output in place cannot have full backward hooks:
    retry without backward ranges (attribution does not need them)."""
    try:
        step()
        return
    except (Exception, SystemExit) as e:  # noqa: BLE001 - any failure of the user's model is one line, not a traceback
        if not (isinstance(e, RuntimeError) and "BackwardHookFunction" in str(e)):
            raise _step_error("the model's training step failed", e, step.workload.name, step.batch) from None
    step.ranges.remove()
    step.ranges = ranges_factory(backward_ranges=False)
    step.optimizer.zero_grad(set_to_none=True)
    notes.append(
        "the model modifies a module's output in place, which full backward hooks forbid: no backward "
        "layer ranges (NVTX); backward time is still attributed by autograd sequence numbers"
    )
    try:
        step()
    except (Exception, SystemExit) as e:  # noqa: BLE001
        raise _step_error("the model's training step failed", e, step.workload.name, step.batch) from None


def _profile(step, device, n_warmup: int, n_active: int, trace_path: Path) -> None:
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule

    from microbench.core.device import quiet_profiler

    quiet_profiler()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.is_gpu else [])
    # One cycle (repeat=1), written when it completes: a second cycle would clear the first one's events.
    with profile(
        activities=activities,
        schedule=schedule(wait=0, warmup=n_warmup, active=n_active, repeat=1),
        on_trace_ready=lambda p: p.export_chrome_trace(str(trace_path)),
    ) as prof:
        step.sync_at_end = torch.cuda.synchronize if device.is_gpu else None  # inside the `step` range
        try:
            for _ in range(n_warmup + n_active):
                step()  # ends with the device synchronization: each step's kernels finish inside its range
                prof.step()
        finally:
            step.sync_at_end = None
    if not trace_path.is_file():
        raise RuntimeError(f"the profiler wrote no trace to {trace_path}")


@dataclass(frozen=True)
class DecomposeOptions:
    """How to decompose a step. `microbench.decompose_step(model, **kw)` builds one from keyword arguments."""

    batch: int | None = None  # None: the benchmark's batch (GPU) or its CPU batch (models/benchmarks.toml)
    dtype: str = "fp32"  # a training-step dtype of microbench.core.dtypes: fp32 (IEEE), bf16, fp16 (autocast)
    device: str = "auto"
    out: object = (
        None  # where the profiler's trace goes: a folder or an entered OutputDir (its staging); None: a temporary one
    )
    config: str | Path | None = None
    replay: bool = True  # replay the step's GEMMs and convolutions through the providers
    providers: tuple[str, ...] | None = None  # replay through these; None: `profile`'s, else all registered
    profile: str | None = None
    measure_ceilings: bool = True
    timed_steps: int | None = None  # None: models.decompose_defaults()
    profiled_steps: int | None = None
    profiler_warmup_steps: int | None = None
    num_workers: int | None = None  # the workload's DataLoader with this many workers (its own setting: None)
    plot: bool = True
    on_progress: Callable[[str], None] | None = None

    def progress(self, msg: str) -> None:
        if self.on_progress:
            self.on_progress(msg)


@dataclass
class Decomposition:
    """What the stages of `decomposition_doc` hand to each other, filled in stage by stage."""

    model: object  # what `decomposition_doc` was given
    opts: DecomposeOptions
    cfg: object = None
    workload: object = None
    dev: object = None
    batch: int = 0
    steps: dict = field(default_factory=dict)  # timed_steps, profiled_steps, profiler_warmup_steps
    replay_providers: tuple[str, ...] = ()
    notes: list[str] = field(default_factory=list)
    step: object = None  # models.step.TrainingStep
    step_timing: object = None  # core.stats.Timing
    unprofiled: object = None  # the step timed without the profiler (core.stats.Timing), or None
    profiled_steps: object = None  # the profiled steps' wall times (core.stats.Timing)
    loader_probe: dict | None = None  # a CPU step's loader per batch, in process and from one worker (_loader_probe)
    conditions: object = None  # core.conditions.Conditions, started when the device is known
    vendor_step: dict = field(default_factory=dict)  # [step]'s vendor settings as applied (core.vendor)
    records: list = field(default_factory=list)  # decompose.oprecord.OpRecord of one step
    flops_per_step: int = 0  # our formulas (oprecord.matrix_work)
    flop_counter_flops: int = 0  # torch.utils.flop_counter's total, for reference only
    onednn: list = field(default_factory=list)
    out_dir: Path | None = None
    trace_path: Path | None = None
    timeline: object = None  # microbench.trace's Timeline of the profiled steps
    att: object = None  # decompose.attribution's result
    work: dict = field(default_factory=dict)  # (layer, phase) -> LayerWork
    cpu_ev: dict = field(default_factory=dict)
    ceilings: object = None
    layers: list = field(default_factory=list)
    rows: list = field(default_factory=list)
    summary: dict = field(default_factory=dict)
    replay_doc: dict = field(default_factory=lambda: {"enabled": False})
    replay_rows: list = field(default_factory=list)
    doc: dict = field(default_factory=dict)


def decomposition_doc(model, options: DecomposeOptions | None = None) -> dict:
    """Decompose one training step of `model` (a name of models/benchmarks.toml, `package.module:factory`,
    a Workload, a factory or a `(model, make_inputs[, loss_fn])` tuple): the decomposition document (what
    decomposition.json holds). Bad input raises InputError. Writes no file but the profiler's trace (into
    `options.out`, else a temporary folder): the files are the caller's (microbench.api.decompose_step)."""
    return run_decomposition(model, options).doc


def run_decomposition(model, options: DecomposeOptions | None = None) -> Decomposition:
    """The stages, in order (load, record, profile, attribute, count, judge, replay, document), over one
    Decomposition: its `doc`, and its `rows` and `replay_rows` for a results.json."""
    opts = options or DecomposeOptions()
    d = Decomposition(model, opts)
    tmp = None
    try:
        if d.opts.out is None:  # the profiler's trace needs a place even when no files are asked for
            tmp = tempfile.TemporaryDirectory(prefix="dawnscope-decompose-")
        out = d.opts.out
        d.out_dir = Path(tmp.name) if out is None else (out.staging if hasattr(out, "staging") else Path(out))
        # The vendor libraries as the model's users train it ([step] of data/vendor_settings.toml: the PyTorch
        # DAWNBench entries let cuDNN pick its fastest algorithms, which decides Tensor Core use), put back at
        # the end; the replay sets [kernels] for each case (harness/runner).
        with vendor.settings_for("step") as d.vendor_step:
            for stage in STAGES:
                stage(d)
        return d
    finally:
        if d.step is not None:
            d.step.ranges.remove()  # the caller's model keeps no hooks of ours
        if tmp is not None:
            tmp.cleanup()


def _positive(key: str, v, minimum: int) -> None:
    if not isinstance(v, int) or isinstance(v, bool) or v < minimum:
        raise ModelError(None, "must be a positive integer", key=key, value=v)


def stage_load(d: Decomposition) -> None:
    """Stage load: the options checked, the configuration, the model's workload, the device, the batch."""
    from microbench.core import device as devmod

    o = d.opts
    d.cfg = load_config(o.config)
    if o.dtype not in dtypes.STEP_DTYPES:
        raise ModelError(None, f"unknown dtype (use {', '.join(dtypes.STEP_DTYPES)})", key="--dtype", value=o.dtype)
    if o.batch is not None:
        _positive("--batch", o.batch, 1)
    if o.num_workers is not None:
        _positive("--num-workers", o.num_workers, 0)
    defaults = models.decompose_defaults()
    for k in ("timed_steps", "profiled_steps", "profiler_warmup_steps"):
        v = getattr(o, k)
        if v is not None:
            _positive(k, v, 1 if k == "profiled_steps" else 0)
        d.steps[k] = defaults[k] if v is None else v
    d.workload = models.as_workload(d.model)
    if o.num_workers is not None and d.workload.make_loader is None:  # said before any work: nothing to set
        raise ModelError(
            None,
            f"workload {d.workload.name!r} has no DataLoader: its inputs are made once, in memory",
            key="--num-workers",
            value=o.num_workers,
        )
    try:
        d.dev = devmod.detect(o.device)
    except (RuntimeError, ValueError) as e:
        raise ModelError(None, str(e), key="--device", value=o.device) from None
    facts = d.workload.facts
    d.batch = o.batch or (
        (facts.reference_batch if d.dev.is_gpu else facts.cpu_batch) if facts else defaults["external_batch"]
    )
    d.replay_providers = _replay_providers(d.cfg, o.providers, o.profile) if o.replay else ()

    d.conditions = Conditions(d.cfg.conditions, gpu_index=0 if d.dev.kind == "cuda" else None).start()
    if d.dev.kind == "cpu":
        d.conditions.fit_threads()


def stage_record(d: Decomposition) -> None:
    """Stage record: the training step built and run once, timed, and every operator of one step recorded
    (FLOPs, bytes, cases; on a CPU, oneDNN's record of which implementation ran)."""
    from torch.utils.flop_counter import FlopCounterMode

    from microbench.decompose.oprecord import OpRecorder
    from microbench.roofline.evidence import onednn_records
    from microbench.roofline.timing import time_calls

    if d.dev.is_gpu:  # set for the whole decomposition by run_decomposition
        d.notes.append(
            "vendor libraries as [step] of data/vendor_settings.toml: "
            + ", ".join(f"{k} = {v}" for k, v in d.vendor_step.items())
        )
    if d.opts.dtype == "fp32":
        d.notes.append("fp32 is IEEE fp32: TF32 off for the whole step")
    if d.opts.dtype == "bf16" and not d.dev.is_gpu and not d.dev.native_bf16:
        d.notes.append(
            f"bf16 autocast on {d.dev.name}, which has no bf16 instructions (AVX512-BF16 / AMX-BF16): "
            "PyTorch converts to fp32 and back around every operator, and the step runs slower than in "
            "fp32 (compare --dtype fp32)"
        )
    d.opts.progress("building the step")
    d.step = _build_step(d)
    d.opts.progress("first step")
    _run_first_step(d.step, lambda backward_ranges=True: _ranges(d, backward_ranges), d.notes)
    if d.steps["timed_steps"]:
        d.opts.progress(f"timing {d.steps['timed_steps']} steps")
        d.step_timing = time_calls(d.step, d.dev, d.cfg.timing.exactly(d.steps["timed_steps"]), d.cfg.noise)
        d.unprofiled = d.step_timing
        d.loader_probe = _loader_probe(d)
    d.opts.progress("counting FLOPs and bytes, operator by operator")
    d.step.ranges.reset()
    with FlopCounterMode(display=False) as flop_counter, OpRecorder(d.step.ranges) as recorder:
        if d.dev.is_gpu:
            d.step()
        else:  # the same step tells which oneDNN implementation ran each convolution / matmul
            d.onednn = onednn_records(d.step)
    d.records = recorder.records
    d.flops_per_step = sum(r.flops for r in d.records)  # our formulas, not FlopCounterMode's
    d.flop_counter_flops = flop_counter.get_total_flops()


# The loader probe's batches: as many as fit in about this long, within the bounds
LOADER_PROBE_MS, LOADER_PROBE_BATCHES = 2000.0, (5, 60)


def _loader_probe(d: Decomposition) -> dict | None:
    """A CPU step that loads in its own process (a DataLoader, num_workers=0): its loading per batch timed without
    the profiler (whose cost per operator inflates a loader's many small per-sample operators in the trace), and how
    long the main process waits per batch when one worker makes the batches instead (the CPU dataloader finding's
    fix). Between the timed batches the step runs without its loading, as in training: the worker has a step's time
    for each batch, and the step's operators leave the GIL to the loader's queue threads as they would (a spinning
    stand-in holds it). A batch arriving through the worker's queue and shared memory costs the main process
    0.6 - 2 ms on a 2-core CPU even when it is ready (docs/findings.md). None where there is nothing to probe."""
    from microbench.models.loader import endless, with_workers
    from microbench.roofline.timing import time_calls

    loader = d.step.loader
    if d.dev.is_gpu or loader is None or getattr(loader, "num_workers", 1) != 0 or d.step_timing is None:
        return None
    copy = with_workers(loader, 1)
    if copy is None:
        return None
    low, high = LOADER_PROBE_BATCHES
    reps = int(min(max(LOADER_PROBE_MS / (2 * d.step_timing.median_ms), low), high))
    d.opts.progress(f"DataLoader: {reps} batches in this process, {reps} from one worker")
    settings = d.cfg.timing.exactly(reps)
    rest = lambda: d.step(load=False)  # noqa: E731 - the step without its loading, between the timed batches
    in_process = time_calls(endless(loader), d.dev, settings, d.cfg.noise, between=rest)
    worker = time_calls(endless(copy), d.dev, settings, d.cfg.noise, between=rest)
    return {"in_process": in_process.as_dict(), "one_worker": worker.as_dict()}


def _ranges(d: Decomposition, backward_ranges: bool = True):
    from microbench.models.ranges import StepRanges

    model = d.workload.model
    return StepRanges(model, root_name=type(model).__name__, backward_ranges=backward_ranges)


def _build_step(d: Decomposition):
    from microbench.models.step import NoDataLoader, TrainingStep

    try:
        return TrainingStep(
            d.workload, d.batch, d.dev.torch_device, d.opts.dtype, _ranges(d), num_workers=d.opts.num_workers
        )
    except InputError:
        raise
    except NoDataLoader as e:
        raise ModelError(None, str(e), key="--num-workers", value=d.opts.num_workers) from None
    except (Exception, SystemExit) as e:  # noqa: BLE001 - a factory's model or input maker that cannot run
        raise _step_error("cannot set up the training step", e, d.workload.name, d.batch) from None


def stage_profile(d: Decomposition) -> None:
    """Stage profile: the profiler's trace of a few steps (trace.json.gz in the output directory)."""
    d.trace_path = d.out_dir / "trace.json.gz"
    d.opts.progress(f"profiling {d.steps['profiled_steps']} steps")
    d.step.ranges.reset()
    _profile(d.step, d.dev, d.steps["profiler_warmup_steps"], d.steps["profiled_steps"], d.trace_path)


def stage_attribute(d: Decomposition) -> None:
    """Stage attribute: the trace's kernels (GPU) or operators (CPU) attributed to layers and phases."""
    from microbench.models.ranges import STEP_RANGE

    ranges = d.step.ranges
    d.timeline = load_trace(d.trace_path)
    d.att = attribute(d.timeline, layer_names=ranges.layer_names, seq_map=ranges.seq_map(), step_range=STEP_RANGE)
    d.notes += d.att.notes
    d.profiled_steps = summarize(profiled_step_ms(d.timeline, STEP_RANGE), d.cfg.noise)
    if d.step_timing is None:
        d.step_timing = d.profiled_steps
        d.notes.append("step time from the profiled steps' `step` ranges (--timed-steps 0): profiler overhead included")


def profiled_step_ms(tl, step_range: str) -> list[float]:
    """Each profiled step's time: from its `step` range's start to the end of the last GPU activity it launched
    (trace.gpu_time.step_ends), or of the range where that is later. The CPU range alone would close before
    the GPU finishes (launches are asynchronous): the step's GPU work would spill out of it (profiled steps
    faster than the event-timed ones, kernels covering more than 100 % of the step)."""
    w = tl.step_windows(step_range)
    return ((step_ends(tl, w) - w.ts_us) / 1e3).tolist()


def stage_count(d: Decomposition) -> None:
    """Stage count: the recorded work per (layer, phase), and on a CPU the matrix-unit evidence per layer."""
    from microbench.decompose.oprecord import by_layer

    d.work = by_layer(d.records)
    d.cpu_ev = cpu_matrix_evidence(d.records, d.onednn) if not d.dev.is_gpu else {}


def stage_judge(d: Decomposition) -> None:
    """Stage judge: the ceilings, then the layers judged against them (judge_layers)."""
    from microbench.roofline.ceilings import build_ceilings, machine_ceilings

    d.opts.progress("ceilings")
    if d.opts.measure_ceilings:  # the cached ceilings of this machine, the same roofline and pytest-benchmark use
        d.ceilings = machine_ceilings(
            d.dev, d.cfg, on_step=d.opts.on_progress, busy_now=d.conditions.busy_now() if d.conditions else None
        )
    else:
        d.ceilings = build_ceilings(d.dev, d.cfg, measure_now=False)
    d.notes += d.ceilings.notes
    judge_layers(d)
    d.summary.update(
        profiler_overhead(d.unprofiled, d.profiled_steps, d.summary["profiled_time_ms"], d.cfg.noise.max_spread)
    )
    if flag := os_time_flag(d.unprofiled):
        d.summary["step_flags"].append(flag)


def os_time_flag(unprofiled) -> str | None:
    """The flag for a CPU step that spends a share of its time in the operating system (os_time_share of
    data/thresholds.toml) while it page-faults: the buffers it frees go back to the OS and are faulted in again on
    the next step. The measured timing stands; the flag says part of it is the allocator's."""
    if not _in_os(unprofiled):
        return None
    faults = unprofiled.minor_faults_per_call or 0.0
    head = (
        f"{unprofiled.sys_ms_per_call:.3g} ms of each {unprofiled.median_ms:.3g} ms step "
        f"({unprofiled.sys_ms_per_call / unprofiled.median_ms:.0%}) is in the operating system, with {faults:,.0f} "
        "page faults per step"
    )
    if not _page_faulting(unprofiled):
        return head + ": not mostly page faults (system calls, a busy machine's scheduling)"
    return head + (
        ": memory freed in one step and faulted in again in the next (glibc malloc returns large buffers "
        "to the OS); what that costs the step is the allocator finding's measurement"
    )


def _in_os(t) -> bool:
    """A CPU step timing whose system time is os_time_share of its median or more."""
    return bool(
        t is not None
        and t.sys_ms_per_call
        and t.median_ms
        and t.sys_ms_per_call / t.median_ms >= thresholds.value("os_time_share")
    )


def _page_faulting(t) -> bool:
    """...and that system time is mostly minor page faults (FAULTS_PER_SYS_MS)."""
    return _in_os(t) and (t.minor_faults_per_call or 0.0) >= FAULTS_PER_SYS_MS * t.sys_ms_per_call


# A minor fault that maps and zeroes a 4 KiB page costs the OS about 1 - 3 us (the spectrogram CNN: 5,900 faults
# in 15 ms of system time, 390 a ms): under 100 a ms the system time is mostly something else
FAULTS_PER_SYS_MS = 100.0


def judge_layers(d: Decomposition) -> None:
    """One entry and one row per (layer, phase) against `d.ceilings`, and the step's summary."""
    d.layers, d.rows = _layers(
        d.workload,
        d.step.ranges,
        d.att,
        d.work,
        d.cpu_ev,
        d.dev,
        d.ceilings,
        d.opts.dtype,
        d.cfg.noise if d.cfg is not None else NoiseSettings(),
    )
    d.summary = step_summary(d)
    if not d.dev.is_gpu:
        d.notes.insert(0, CPU_MATRIX_NOTE)


def stage_replay(d: Decomposition) -> None:
    """Stage replay: the step's GEMM and convolution cases through the providers, tagged with their layers."""
    if d.opts.replay:
        d.replay_doc, d.replay_rows = _replay(
            d.workload.name, d.records, d.dev, d.cfg, d.ceilings, d.replay_providers, d.opts.on_progress
        )
        _attach_replay(d.layers, d.replay_doc)


def stage_allocator(d: Decomposition) -> None:
    """Stage allocator, the last to measure: a CPU step flagged for its time in the OS while it page-faults, timed
    again with glibc malloc's thresholds fixed (decompose/allocator.py): summary.allocator_ms. A workload given by name is
    rebuilt and timed in separate processes, each setting in as many (the fix acts from a process's start); one given
    as an object is timed again in this process, with the thresholds set for good."""
    if d.dev.is_gpu or d.unprofiled is None or not _page_faulting(d.unprofiled):
        return
    n = d.steps["timed_steps"]
    if isinstance(d.model, str):
        d.summary["allocator_ms"] = _allocator_children(d, n)
        return
    d.opts.progress(f"timing {n} steps with the allocator's thresholds fixed")
    fixed = allocator.probe(d.step, d.dev, d.cfg.timing.exactly(n), d.cfg.noise)
    if fixed is None:
        d.summary["allocator_ms"] = {
            "not_run": "not glibc's malloc (no mallopt thresholds to fix): the allocator probe did not run"
        }
        return
    d.summary["allocator_ms"] = {
        "default": d.unprofiled.as_dict(),
        "fixed": fixed.as_dict(),
        "env": allocator.env_assignments(),
        "processes": 0,
    }
    d.notes.append(
        "glibc malloc's thresholds were fixed in this process for the allocator probe, after every other "
        f"measurement ({allocator.env_assignments()}, through mallopt); they stay so in a process that "
        "called decompose_step"
    )


def _allocator_children(d: Decomposition, n: int) -> dict:
    import torch

    if allocator._libc() is None:
        return {"not_run": "not glibc's malloc (no thresholds to fix): the allocator probe did not run"}
    k = allocator.processes()
    d.opts.progress(f"timing {n} steps in {2 * k} processes, {k} with the allocator's thresholds fixed")
    spec = {
        "model": d.model,
        "batch": d.batch,
        "dtype": d.opts.dtype,
        "num_workers": d.opts.num_workers,
        "threads": torch.get_num_threads(),
        "timed_steps": n,
        "config": str(d.opts.config) if d.opts.config is not None else None,
    }
    timeout_s = allocator._data()["probe"]["start_s"] + 20 * (n + 4) * d.unprofiled.median_ms / 1e3
    out = allocator.child_probe(spec, k, timeout_s)
    if isinstance(out, str):
        return {"not_run": out}
    return out | {"env": allocator.env_assignments()}


def stage_document(d: Decomposition) -> None:
    """Stage document: the decomposition document (decomposition.json's content)."""
    d.doc = _document(d)


def _document(d: Decomposition) -> dict:
    """The decomposition document (decomposition.json)."""
    from microbench.core import device as devmod

    w, step, facts = d.workload, d.step, d.workload.facts
    return {
        "schema": SCHEMA,
        "model": {
            "name": w.name,
            "class": type(w.model).__name__,
            "parameters": sum(p.numel() for p in w.model.parameters()),
            "facts": facts.as_dict() if facts else None,
        },
        "run": {
            "batch": d.batch,
            "dtype": d.opts.dtype,
            "device": d.dev.torch_device,
            "channels_last": w.uses_channels_last,
            "optimizer": type(step.optimizer).__name__,
            "grad_scaler": step.scaler is not None,
            **d.steps,
            "backward_ranges": step.ranges.backward_ranges,
            "loader_workers": getattr(step.loader, "num_workers", None),
        },
        "hardware": devmod.fingerprint(d.dev),
        "software": devmod.software(),
        "started": _dt.datetime.now(_dt.timezone.utc).isoformat(),
        "summary": d.summary,
        "layers": d.layers,
        "replay": d.replay_doc,
        "ceilings": d.ceilings.as_list(),
        "notes": d.notes,
        "conditions": d.conditions.stop() if d.conditions else None,
    }


STAGES = (
    stage_load,
    stage_record,
    stage_profile,
    stage_attribute,
    stage_count,
    stage_judge,
    stage_replay,
    stage_allocator,
    stage_document,
)


def _layers(workload, ranges, att, work, cpu_ev, dev, ceilings, dtype, noise=None):
    """One entry (and one LayerRow) per (layer, phase) that took time or did work, each judged by the one judge
    (roofline.judge) over its profiled steps' times (`noise`: the stability thresholds, [noise] in bench.toml)."""
    from microbench.decompose.oprecord import LayerWork
    from microbench.roofline.judge import judge, judge_timing

    n = att.steps
    rep = att.median_step()
    keys = list(dict.fromkeys(list(work) + list(att.buckets)))
    total_ms = att.total_per_step_us[rep] / 1e3
    layers, rows = [], []
    for key in keys:
        name, phase = key
        b = att.buckets.get(key)
        part = b.steps[rep] if b else None
        w = work.get(key, LayerWork())
        time_ms = part.us / 1e3 if b else 0.0
        flops = w.flops + w.other_flops
        if time_ms <= 0 and flops <= 0:
            continue
        layer_dtype = w.gemm_dtype or (w.dtypes.most_common(1)[0][0] if w.dtypes else dtype)
        kind = ranges.types.get(name, "loss" if name == "(loss)" else "-")
        gemm_ms = sum(part.by_class[c] for c in class_set("gemm")) / 1e3 if b else 0.0
        tc, tc_ev, tc_split = _layer_matrix_units(b, part, key, cpu_ev, dev, gemm_ms)
        row = LayerRow(
            model=workload.name,
            layer=name,
            phase=phase,
            module=kind,
            dtype=layer_dtype,
            shape=w.cases[0].shape.label() if w.cases else "-",
            device=dev.name,
            flops=flops,
            bytes=w.bytes,
            tensor_cores=tc,
            tensor_core_evidence=tc_ev,
            params={
                "module": kind,
                "cases": sorted({c.label() for c in w.cases}),
                "time_by_class_ms": {c: v / 1e3 for c, v in (part.by_class.items() if b else ())},
            },
        )
        if b and time_ms > 0 and flops > 0 and w.bytes > 0:
            judge(row, Work(flops, w.bytes), summarize([us / 1e3 for us in b.per_step_us], noise), ceilings)
        elif b and time_ms > 0:  # time but no arithmetic (copies, views, allocation): no roofline point
            judge_timing(row, summarize([us / 1e3 for us in b.per_step_us], noise))
            row.gbps = w.bytes / (time_ms * 1e-3) / 1e9 if w.bytes else None
        else:
            row.reason = "no profiled time" if not b else "no work counted"
        rows.append(row)
        layers.append(
            _layer_entry(
                row,
                {
                    "time_ms": time_ms,
                    "time_ms_per_step": [us / 1e3 for us in b.per_step_us] if b else [],
                    "pct_of_profiled": 100.0 * time_ms / total_ms if total_ms else None,
                    "matrix_flops": w.flops,
                    "other_flops": w.other_flops,
                    "intensity": row.intensity if row.intensity is not None else (flops / w.bytes if w.bytes else None),
                    "tensor_core_time_ms": tc_split,
                    "gemm_time_ms": gemm_ms,
                    "time_by_class_ms": {c: v / 1e3 for c, v in part.by_class.most_common()} if b else {},
                    "top": [[k, v / n / 1e3] for k, v in b.items.most_common(3)] if b else [],  # mean over the steps
                    "cases": [c.label() for c in w.cases],
                },
            )
        )
    return layers, rows


# A layer's entry in the document: the LayerRow's own fields (the one source of them) under the names the document
# has always used, in its order, and what only the document holds (per-step times, the class split, the top kernels).
_ENTRY_FROM_ROW = {
    "name": "layer",
    "module": "module",
    "phase": "phase",
    "dtype": "dtype",
    "flops": "flops",
    "bytes": "bytes",
    "tflops": "tflops",
    "pct_of_ceiling": "pct_of_ceiling",
    "ceiling": "ceiling",
    "bound": "bound",
    "tensor_cores": "tensor_cores",
    "tensor_core_evidence": "tensor_core_evidence",
    "flags": "flags",
}
_ENTRY_ORDER = (
    "name",
    "module",
    "phase",
    "dtype",
    "time_ms",
    "time_ms_per_step",
    "pct_of_profiled",
    "flops",
    "matrix_flops",
    "other_flops",
    "bytes",
    "intensity",
    "tflops",
    "pct_of_ceiling",
    "ceiling",
    "bound",
    "tensor_cores",
    "tensor_core_evidence",
    "tensor_core_time_ms",
    "gemm_time_ms",
    "time_by_class_ms",
    "top",
    "cases",
    "flags",
)


def _layer_entry(row: LayerRow, extra: dict) -> dict:
    entry = {key: getattr(row, field) for key, field in _ENTRY_FROM_ROW.items()} | extra
    return {key: entry[key] for key in _ENTRY_ORDER}


def _layer_matrix_units(b, part, key, cpu_ev, dev, gemm_ms: float):
    """Verdict (yes/no/unknown), evidence, and the layer's time split {yes, no, unknown} in ms (GPU: all its
    kernels; CPU: its GEMM/conv operators), in the step `part` belongs to."""
    if b is None or gemm_ms <= 0:
        return "no", "no GEMM/convolution work in this layer: element-wise, normalization or data movement", {}
    if dev.is_gpu:
        split = {k: v / 1e3 for k, v in part.tensor_cores.items() if v > 0}
        g = part.gemm_tensor_cores
        share = g["yes"] / 1e3 / gemm_ms
        no_share = g["no"] / 1e3 / gemm_ms
        verdict = "yes" if share >= 0.999 else ("no" if no_share >= 0.999 else "unknown")
        top = b.gemm_items.most_common(1)[0][0] if b.gemm_items else ""
        return (
            verdict,
            f"{share:.0%} of the layer's GEMM/conv kernel time in Tensor Core kernels by name "
            f"(kernel_rules.toml); top GEMM/conv kernel {top[:80]!r}",
            split,
        )
    ev = cpu_ev.get(key)
    if not ev or not sum(ev["flops"].values()):
        return (
            "unknown",
            "no oneDNN record for this layer's GEMM/conv operators (MKL or a reference path)",
            {"unknown": gemm_ms},
        )
    flops = ev["flops"]
    total = sum(flops.values())
    split = {k: gemm_ms * v / total for k, v in flops.items() if v > 0}
    verdict = max(flops, key=flops.get) if max(flops.values()) == total else "unknown"
    impls = ", ".join(f"{k}" for k in ev["impls"]) or "none"
    return (
        verdict,
        (
            f"oneDNN implementations {impls}; {flops['yes'] / total:.0%} of GEMM/conv FLOPs on matrix-unit "
            f"implementations, {flops['unknown'] / total:.0%} without a oneDNN record"
        ),
        split,
    )


def profiler_overhead(unprofiled, profiled, operator_ms: float, max_spread: float) -> dict:
    """How much the profiler slowed the step (profiled step wall time against the unprofiled one), how much of
    the profiled step its operators/kernels cover, and flags where they disagree beyond noise."""
    flags = []
    out = {
        "profiled_step_ms": profiled.median_ms,
        "profiled_step_spread": profiled.as_dict(),
        "profiler_overhead": None,
        "operator_coverage": operator_ms / profiled.median_ms if profiled.median_ms else None,
    }
    if unprofiled is not None and unprofiled.median_ms > 0:
        over = profiled.median_ms / unprofiled.median_ms - 1
        out["profiler_overhead"] = over
        u, p = unprofiled.as_dict(), profiled.as_dict()
        if unprofiled.noisy or profiled.noisy:
            out["profiler_overhead"] = None  # no ratio from a number that is not trustworthy
            flags.append(
                "step times are noisy ("
                + "; ".join(unprofiled.noise + profiled.noise)
                + f"): no verdict on the profiler's overhead (it would read {over:+.0%})"
            )
        elif over < 0 and not spreads_overlap(u, p) and -over > max_spread:
            out["profiler_overhead"] = None  # a profiler never makes a step faster: kept out of the summary
            flags.append(
                f"{IMPOSSIBLE}the profiled step ({profiled.median_ms:.4g} ms) is faster than the unprofiled "
                f"one ({unprofiled.median_ms:.4g} ms), {over:+.0%}: the unprofiled steps were slowed "
                "(a busy machine, first-call work, memory pressure); no profiler overhead is reported"
            )
        elif not spreads_overlap(u, p) and abs(over) > max_spread:
            flags.append(
                f"profiled and unprofiled step times disagree beyond noise: {profiled.median_ms:.4g} ms "
                f"profiled (p20-p80 {p['p20']:.4g}-{p['p80']:.4g}) against {unprofiled.median_ms:.4g} ms "
                f"unprofiled ({u['p20']:.4g}-{u['p80']:.4g}), {over:+.0%}"
            )
    cov = out["operator_coverage"]
    if cov is not None and cov < 0.5:
        flags.append(
            f"the profiled operators/kernels cover only {cov:.0%} of the profiled step's wall time "
            f"({operator_ms:.4g} of {profiled.median_ms:.4g} ms): the rest is Python, launch overhead, "
            "waiting (a busy machine) or work outside any operator"
        )
    out["step_flags"] = flags
    return out


def step_summary(d: Decomposition) -> dict:
    """The step as a whole: times, FLOPs, Tensor Core share, the what-if times, the attribution's checks."""
    att, records = d.att, d.records
    rep = att.median_step()
    step_ms = d.step_timing.median_ms
    total_ms = att.total_per_step_us[rep] / 1e3
    by_class: Counter = Counter()
    by_phase: Counter = Counter()
    for b in att.buckets.values():
        for c, us in b.steps[rep].by_class.items():
            by_class[c] += us / 1e3
        by_phase[b.phase] += b.steps[rep].us / 1e3
    flops = d.flops_per_step
    return {
        "step_time_ms": step_ms,
        "step_time_spread": d.step_timing.as_dict(),
        **({"loader_ms": d.loader_probe} if d.loader_probe else {}),
        **_profiled_summary(att, rep, total_ms),
        "flops_per_step": flops,
        "flop_counter_flops": d.flop_counter_flops,
        "forward_flops": sum(r.flops for r in records if r.phase == "forward"),
        "backward_flops": sum(r.flops for r in records if r.phase == "backward"),
        "flop_convention": "GEMM, convolution (every variant, both backward directions) and attention FLOPs by "
        "microbench.core.ops.work (2 per multiply-add); normalization and element-wise work are in "
        "other_flops_per_step. flop_counter_flops: torch.utils.flop_counter's total, for "
        "reference only (it counts grouped-convolution backward as ungrouped)",
        "other_flops_per_step": sum(r.other_flops for r in records),
        "bytes_per_step": sum(r.bytes for r in records),
        "achieved_tflops": flops / (step_ms * 1e-3) / 1e12 if step_ms else None,
        **_matrix_unit_summary(d.layers, by_class, total_ms, d.dev.is_gpu),
        "time_by_class_ms": dict(by_class.most_common()),
        "share_by_class": {c: v / total_ms for c, v in by_class.most_common()} if total_ms else {},
        "time_by_phase_ms": dict(by_phase),
        **_what_if(d.layers, by_class, d.ceilings, step_ms),
        **_backward_checks(att, d.step.ranges),
    }


def _profiled_summary(att, rep: int, total_ms: float) -> dict:
    return {
        "profiled_time_ms": total_ms,
        "attributed_time_ms": att.attributed_step_us(rep) / 1e3,
        "attribution_coverage": att.attributed_step_us(rep) / att.total_per_step_us[rep] if total_ms else None,
        "profiled_time_ms_per_step": [us / 1e3 for us in att.total_per_step_us],
        "median_step": rep,
        "per_step_note": "layer times, classes and the profiled time are those of the median profiled step "
        "(by its total); every step's are in time_ms_per_step / profiled_time_ms_per_step",
        "profiled_unit": att.unit,
        "profiled_time_definition": (
            "sum of GPU kernel, memcpy and memset durations launched inside the step"
            if att.unit == "kernel"
            else "sum of operator self CPU time inside the step (= summed duration of the outermost operators)"
        ),
        "profiled_steps": att.steps,
    }


def _matrix_unit_summary(layers: list[dict], by_class: Counter, total_ms: float, gpu: bool) -> dict:
    """The Tensor Core / matrix-unit share of the profiled time, and what it means on this device."""

    def split(key: str) -> float:
        return sum(v for l in layers for k, v in (l["tensor_core_time_ms"] or {}).items() if k == key)

    tc_yes, tc_unknown = split("yes"), split("unknown")
    gemm_total = sum(by_class[c] for c in class_set("gemm"))
    share = tc_yes / total_ms if total_ms else None
    if gpu:
        note = (
            "kernel time in kernels whose names say Tensor Core / matrix core (kernel_rules.toml), over all kernel time"
        )
    elif gemm_total and tc_yes == 0 and tc_unknown >= gemm_total * 0.999:
        share = None
        note = "unknown: no oneDNN record says which unit ran this step's GEMMs/convolutions (see notes)"
    else:
        note = (
            "operator time of GEMM/conv operators whose oneDNN implementation uses a matrix unit "
            "(AMX or AVX-512 dot products), split by FLOPs within each layer, over all operator time"
        )
    return {
        "tensor_core_time_share": share,
        "tensor_core_unknown_share": (tc_unknown / total_ms) if total_ms and not gpu else None,
        "tensor_core_note": note,
    }


def _what_if(layers: list[dict], by_class: Counter, ceilings, step_ms: float) -> dict:
    """What-if times: the step time minus what each change would save, measured in profiled time."""
    saving_gemm, ideal_total, used = 0.0, 0.0, {}
    for l in layers:
        if l["gemm_time_ms"] <= 0 or not l["matrix_flops"]:
            continue
        c = ceilings.compute(l["dtype"], ("measured",)) or ceilings.compute(l["dtype"], ("datasheet", "estimate"))
        if c is None:
            continue
        used[l["dtype"]] = {"tflops": c.value, "source": c.source + (", measured busy" if c.busy else "")}
        ideal = l["matrix_flops"] / (c.value * 1e12) * 1e3
        ideal_total += ideal
        saving_gemm += max(0.0, l["gemm_time_ms"] - ideal)
    elementwise = by_class.get("elementwise", 0.0)
    norm = by_class.get("norm", 0.0)
    return {
        "gemm_time_ms": sum(by_class[c] for c in class_set("gemm")),
        "gemm_time_at_ceiling_ms": ideal_total,
        "gemm_ceilings": used,
        "time_if_gemm_at_ceiling_ms": max(0.0, step_ms - saving_gemm),
        "time_if_elementwise_free_ms": max(0.0, step_ms - elementwise),
        "time_if_elementwise_and_norm_free_ms": max(0.0, step_ms - elementwise - norm),
    }


def _backward_checks(att, ranges) -> dict:
    seq = att.backward_seq_us
    backward_us = sum(b.time_us for b in att.buckets.values() if b.phase == "backward")  # all profiled steps
    return {
        # The full backward hooks behind the NVTX backward ranges add autograd nodes of their own (identity
        # functions, no kernels): on a CPU their operators are in the profiled time. Reported, not removed.
        "backward_hook_time_ms": sum(
            us for b in att.buckets.values() for name, us in b.items.items() if "BackwardHookFunction" in name
        )
        / att.steps
        / 1e3,
        "backward_by_sequence_share": seq / backward_us if backward_us else None,
        "backward_range_agreement": att.backward_agree_us / att.backward_hook_us if att.backward_hook_us else None,
        "interleaved_backward_ranges": ranges.interleaved_closes,
    }


# ---- replay of the step's GEMMs and convolutions through the providers -----------------------------------
def _replay_providers(cfg, providers: list[str] | None, case_set_name: str | None) -> tuple[str, ...]:
    """The providers to replay through: the given ones, a bench.toml profile's, or all registered."""

    known = registry.names()
    if providers:
        bad = [p for p in providers if p not in known]
        if bad:
            raise ModelError(
                None, f"unknown provider (registered: {', '.join(known)})", key="--providers", value=bad[0]
            )
        return tuple(providers)
    if case_set_name:
        names = cfg.case_set(case_set_name).providers
        bad = [p for p in names if p not in known]
        if bad:
            raise ModelError(
                None,
                f"profile {case_set_name!r} names provider {bad[0]!r}, which is not registered "
                f"(registered: {', '.join(known)})",
                key="--profile",
                value=case_set_name,
            )
        return tuple(names)
    return tuple(known)


def _replay(model_name, records, dev, cfg, ceilings, names, on_progress):
    from microbench.decompose.oprecord import bucket_name
    from microbench.roofline.runner import run_case_set

    occurrences: dict = defaultdict(list)
    skipped = Counter()
    for r in records:
        for c in r.cases:
            occurrences[c].append((bucket_name(r.layer, r.phase), r.phase or "step"))
        if r.skipped:
            skipped[r.skipped] += 1
    cases = tuple(occurrences)
    case_set = CaseSet(
        f"model:{model_name}", f"GEMM and convolution cases of one {model_name} training step", names, cases
    )
    unique_rows = []
    done = [0]

    def on_case(case):
        done[0] += 1
        _progress(on_progress, f"replay {done[0]}/{len(cases)}: {case.label()}")

    stopped = None  # a replayed call that lost the device context ends the replay (roofline/runner.py)
    if cases:
        stopped = run_case_set(case_set, dev, cfg, ceilings, on_row=unique_rows.append, on_case=on_case)
    by_case_key = {(c.op, c.shape.label(), c.dtype): c for c in cases}
    tagged = []
    for row in unique_rows:
        case = by_case_key[(row.op, row.shape, row.dtype)]
        for layer, phase in occurrences[case]:
            tagged.append(replace(row, layer=layer, phase=phase, flags=list(row.flags), params=dict(row.params)))
    doc = {
        "enabled": True,
        "providers": list(names),
        "cases": len(cases),
        "occurrences": sum(len(v) for v in occurrences.values()),
        "not_replayed": dict(skipped),
        **({"stopped": stopped} if stopped else {}),
        "rows": [r.as_dict() for r in unique_rows],
        "case_layers": {f"{c.label()}": sorted({f"{l} [{p}]" for l, p in occ}) for c, occ in occurrences.items()},
    }
    return doc, tagged


def _attach_replay(layers: list[dict], replay_doc: dict) -> None:
    """Per layer: the summed replay time of its GEMM/conv cases, per provider (only where all were timed)."""
    times = defaultdict(dict)
    for r in replay_doc["rows"]:
        if r.get("time_ms"):
            times[f"{r['op']} {r['shape']} {r['dtype']}"][r["provider"]] = r["time_ms"]["median"]
    for l in layers:
        if not l["cases"]:
            continue
        per: dict[str, float] = {}
        for provider in replay_doc["providers"]:
            ts = [times.get(label, {}).get(provider) for label in l["cases"]]
            if ts and all(t is not None for t in ts):
                per[provider] = sum(ts)
        l["replay_ms"] = per
