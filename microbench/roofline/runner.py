"""The flow for each case: providers -> correctness -> timing -> work counting -> ceilings -> result row."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import torch

from microbench.core import dtypes, vendor
from microbench.core.cases import make_inputs, reference, rel_err
from microbench.core.config import CaseSet, Config
from microbench.core.device import Device
from microbench.core.errors import ConfigError
from microbench.core.ops import case_work
from microbench.core.ops.work import Work
from microbench.core.results import KernelCaseRow, ResultRow
from microbench.core.shapes import Case
from microbench.core.verdict import FALLBACK  # noqa: F401 - written on rows below
from microbench.roofline import preflight, registry
from microbench.roofline.ceilings import Ceilings
from microbench.roofline.faults import isolated_providers, lost_context
from microbench.roofline.judge import NOISY, is_noisy, judge  # noqa: F401 - the one judge
from microbench.roofline.registry import Evidence, Provider, Unsupported, bind
from microbench.roofline.timing import time_calls


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"


def too_slow(case: Case, work: Work, ceilings: Ceilings, limit_s: float) -> str | None:
    """Why a case should not be timed here: its estimated time per call at the measured ceiling of its dtype
    exceeds `limit_s` (timing.max_case_seconds). None when it fits or no measured ceiling says otherwise. A
    ceiling measured on a busy machine may be far too low: then the faster of it and the datasheet (estimate)
    peak decides, so that a busy ceiling skips no case the machine could run."""
    peak = ceilings.compute(case.dtype, ("measured",))
    if peak is not None and peak.busy:
        other = ceilings.compute(case.dtype, ("datasheet", "estimate"))
        peak = other if other is not None and other.value > peak.value else peak
    if peak is None or peak.value <= 0:
        return None
    est_s = work.flops / (peak.value * 1e12)
    if est_s > limit_s:
        return (
            f"estimated {est_s:.0f} s per call at the {peak.source} {case.dtype} ceiling "
            f"({peak.value * 1e3:.3g} GFLOP/s) > timing.max_case_seconds = {limit_s:g}"
        )
    return None


@dataclass
class CaseRunner:
    device: Device
    cfg: Config
    ceilings: Ceilings
    faulted: dict = field(default_factory=dict)  # (case, provider) -> why it lost the context in pre-flight
    lost: str | None = None  # set when a call lost this process's device context: the run stops there
    max_case_seconds: float | None = None  # the profile's own limit (its max_case_seconds), else timing's

    @property
    def limit_s(self) -> float:
        return self.max_case_seconds if self.max_case_seconds is not None else self.cfg.timing.max_case_seconds

    def _call_s(self, call) -> tuple[object, float]:
        """One call, to the end of its device work: its output and its wall time in seconds (a guard on how long
        timing would take, not a measurement: the timer is roofline.timing's)."""
        t0 = time.perf_counter()
        out = call()
        self.device.synchronize()
        return out, time.perf_counter() - t0

    def _over_limit(self, call, first_s: float) -> str | None:
        """Why a case's timing is skipped: its call took longer than the limit; on a GPU the first call and one
        more (the first may include a JIT compile or an autotune), on a CPU the first (no compile there: PyTorch's
        own first call sets up in milliseconds, and a second slow call would double the cost). A ceiling can miss
        it: the estimate of a CPU without native bf16 puts bf16 at the fp32 rate, and PyTorch's bf16 GEMM there
        ran 60x slower (a 2048^3 call: 59 - 64 s, seven calls to time it)."""
        if first_s <= self.limit_s:
            return None
        if not self.device.is_gpu:
            return (
                f"not timed: its first call took {first_s:.3g} s > max_case_seconds = {self.limit_s:g}; its "
                "output was checked"
            )
        _, again_s = self._call_s(call)
        if again_s <= self.limit_s:
            return None
        return (
            f"not timed: a call took {again_s:.3g} s (the first {first_s:.3g} s) > max_case_seconds = "
            f"{self.limit_s:g}; its output was checked"
        )

    def _lost(self, row: KernelCaseRow, case: Case, p: Provider, e: BaseException, while_: str = "") -> bool:
        """A lost device context: the row says so and the runner stops (every later call would fail too)."""
        fault = lost_context(e)
        if fault is None:
            return False
        row.status, row.reason = "failed", f"device context lost{while_}: {_first_line(e)}"
        self.lost = (
            f"stopped: {case.label()} through {p.name} lost the device context ({fault}); every later "
            f"call in this process would fail, so no later case was run. The rows before it are kept; "
            f"run this provider apart (its own --profile, or leave it out) to measure the rest."
        )
        return True

    def _row(self, case: Case, p: Provider, **kw) -> KernelCaseRow:
        return KernelCaseRow(
            op=case.op,
            shape=case.shape.label(),
            dtype=case.dtype,
            provider=p.name,
            device=self.device.name,
            baseline=p.baseline,
            params=case.shape.as_dict(),
            tf32_allowed=(case.dtype == "tf32") if dtypes.get(case.dtype).torch_name == "float32" else None,
            tolerance=self.cfg.tolerance[case.dtype],
            **kw,
        )

    def run(self, case: Case, providers: list[Provider]) -> Iterator[KernelCaseRow]:
        """One row per provider; the vendor libraries set up as every kernel-comparing command sets them
        (core.vendor, [kernels] of data/vendor_settings.toml), put back afterwards."""
        with vendor.settings_for("kernels"):
            yield from self._run(case, providers)

    def _run(self, case: Case, providers: list[Provider]) -> Iterator[KernelCaseRow]:
        work = case_work(case)
        dev = self.device.torch_device
        inputs = ref = None
        slow = too_slow(case, work, self.ceilings, self.limit_s)
        for p in providers:
            row = self._row(case, p, flops=work.flops, bytes=work.bytes_moved, intensity=work.intensity)
            why = p.unavailable_reason(self.device)
            timed_why = p.timed(self.device)
            if why:
                row.status, row.reason = "skipped", why
                yield row
                continue
            if slow and not timed_why:
                row.status, row.reason = "skipped", slow
                yield row
                continue
            if (case, p.name) in self.faulted:
                row.status, row.reason = (
                    "failed",
                    (
                        f"lost the device context in its pre-flight process "
                        f"({self.faulted[case, p.name]}); not run in this one"
                    ),
                )
                yield row
                continue
            try:
                if inputs is None:
                    inputs = make_inputs(case, dev, seed=0)
                    ref = reference(case, *inputs)
                call = bind(p, case, *inputs)
                out, first_s = self._call_s(call)
            except Unsupported as e:
                row.status, row.reason = "skipped", f"unsupported: {e}"
                yield row
                continue
            except Exception as e:  # noqa: BLE001 - one failing provider must not end the run
                row.status, row.reason = "failed", _first_line(e)
                lost = self._lost(row, case, p, e)
                yield row
                if lost:
                    return
                continue
            row.rel_err = rel_err(out, ref)
            del out
            ev = p.evidence(case, self.device, call) if p.evidence else Evidence("unknown", "no evidence hook")
            row.tensor_cores, row.tensor_core_evidence = ev.tensor_cores, ev.evidence
            if ev.fallback:
                row.flags.append(f"{FALLBACK}{ev.fallback}")
            if not row.rel_err <= row.tolerance:  # also catches inf/nan
                row.status, row.reason = "wrong", f"relative error {row.rel_err:.3g} > tolerance {row.tolerance:g}"
                yield row
                continue
            if timed_why:
                row.reason = timed_why
                yield row
                continue
            try:
                over = self._over_limit(call, first_s)
                if over:
                    row.status, row.reason = "skipped", over
                    yield row
                    continue
                calls = [call] + [
                    bind(p, case, *make_inputs(case, dev, seed=i)) for i in range(1, self._input_sets(inputs))
                ]
                judge(row, work, time_calls(calls, self.device, self.cfg.timing, self.cfg.noise), self.ceilings)
            except Exception as e:  # noqa: BLE001
                row.status, row.reason = "failed", f"while timing: {_first_line(e)}"
                if self._lost(row, case, p, e, " while timing"):
                    yield row
                    return
            yield row

    def _input_sets(self, inputs) -> int:
        """Rotate among several input sets unless they would crowd the device's memory."""
        nbytes = sum(t.numel() * t.element_size() for t in inputs)
        n = self.cfg.timing.input_sets
        if self.device.memory_bytes and n * nbytes > self.device.memory_bytes // 4:
            return 1
        return n


def resolve_providers(case_set: CaseSet, cfg: Config) -> dict[str, list[Provider]]:
    """A case set's provider names -> registered providers per op family; a name no op knows is a config error."""
    known = registry.names()
    for name in case_set.providers:
        if name not in known:
            raise ConfigError(
                cfg.path,
                f"unknown provider (registered: {', '.join(known)})",
                key=f"profiles.{case_set.name}.providers",
                value=name,
            )
    out = {}
    for op in registry.OPS:
        by_name = {p.name: p for p in registry.for_op(op)}
        out[op] = [by_name[n] for n in case_set.providers if n in by_name]
    return out


def preflight_pairs(
    cases, providers: dict[str, list[Provider]], runner: CaseRunner, isolate: tuple[str, ...]
) -> list[preflight.Pair]:
    """The (case, provider) calls of the isolated providers the run will make: available here, not too slow."""
    usable = {
        p.name
        for ps in providers.values()
        for p in ps
        if p.name in isolate and p.unavailable_reason(runner.device) is None
    }
    pairs = []
    for case in cases:
        if too_slow(case, case_work(case), runner.ceilings, runner.limit_s):
            continue
        pairs += [preflight.Pair(case, p.name, p.fn.__module__) for p in providers[case.family] if p.name in usable]
    return pairs


def run_case_set(
    case_set: CaseSet,
    device: Device,
    cfg: Config,
    ceilings: Ceilings,
    on_row: Callable[[ResultRow], None],
    on_case: Callable[[Case], None] | None = None,
    isolate: tuple[str, ...] | None = None,
) -> str | None:
    """Every case through every provider, each row to `on_row` as it is made. On a GPU the providers no GPU
    has run yet (`isolate`, default: data/gpu_faults.toml) first run each case in a process of their own
    (roofline/preflight.py). Returns None, or the line that says why the run stopped early: a call that lost
    this process's device context ends it (the rows already given to `on_row` stand)."""
    providers = resolve_providers(case_set, cfg)
    runner = CaseRunner(device, cfg, ceilings, max_case_seconds=case_set.max_case_seconds)
    if device.is_gpu or isolate is not None:  # a CPU has no context to lose, unless a test asks
        pairs = preflight_pairs(case_set.cases, providers, runner, isolated_providers() if isolate is None else isolate)
        runner.faulted = preflight.faults(pairs, "cuda" if device.is_gpu else "cpu") if pairs else {}
    for case in case_set.cases:
        if on_case:
            on_case(case)
        for row in runner.run(case, providers[case.family]):
            on_row(row)
        if runner.lost:
            return runner.lost
        if device.is_gpu:
            torch.cuda.empty_cache()
    return None
