"""pytest-benchmark tests generated from a bench.toml profile: cases x providers. Shipped in the package, so that an
install runs them (`dawnscope bench`, microbench/bench/cli.py); a checkout's tests/test_benchmarks.py collects them
from here.

    dawnscope bench --json out.json                           # an install: the `quick` profile, as below
    pytest --benchmark-only                                   # a checkout: time the `quick` profile on the default device
    DAWNSCOPE_PROFILE=default pytest --benchmark-only --benchmark-json=out.json
    pytest --benchmark-only --benchmark-compare               # against the last saved run (--benchmark-autosave)
    DAWNSCOPE_TRACE=run.json.gz DAWNSCOPE_TRACE_TOP=5 pytest --benchmark-only   # a trace's cases (docs/replay.md)

Each benchmark checks its provider's result against the float64 reference first, synchronizes the device inside
the timed call, rotates among input sets, and puts flops, bytes, tflops and the percentage of the ceiling into
`extra_info`, derived from the same work counts and ceilings as `python -m microbench.roofline`. A plain
`pytest` runs each benchmark once, as a correctness check (microbench/bench/plugin.py).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import pytest

from microbench.core import vendor
from microbench.core.args import positive_int
from microbench.core.cases import make_inputs, reference, rel_err
from microbench.core.config import Config, load_config
from microbench.core.device import DEVICE_REQUESTS, Device, detect
from microbench.core.errors import InputError
from microbench.core.fingerprint import TRACE_TOP_ENV, benchmark_selection, trace_selection
from microbench.core.ops import case_work
from microbench.core.results import KernelCaseRow
from microbench.core.stats import summarize
from microbench.roofline import registry
from microbench.roofline.ceilings import Ceilings, build_ceilings, machine_ceilings
from microbench.roofline.registry import Unsupported, bind
from microbench.roofline.runner import CaseRunner, judge, too_slow
from microbench.roofline.timing import time_calls
from microbench.roofline.trace_cases import case_set_of, trace_cases

PROFILE, CONFIG, DEVICE = benchmark_selection()  # the environment variables above, read where plugin.py reads them
TRACE, TRACE_TOP = trace_selection()


def _load() -> Config:
    try:
        return load_config(CONFIG)
    except InputError as e:
        raise pytest.UsageError(f"error: {e.line()}") from None


def pytest_generate_tests(metafunc):
    if "bench_case" not in metafunc.fixturenames:
        return
    if DEVICE not in DEVICE_REQUESTS:  # a usage error before any test, as a bad DAWNSCOPE_PROFILE is
        raise pytest.UsageError(f"error: DAWNSCOPE_DEVICE = {DEVICE!r}: expected one of {', '.join(DEVICE_REQUESTS)}")
    case_set = _case_set(_load())
    params, ids = [], []
    for case in case_set.cases:
        names = {p.name for p in registry.for_op(case.family)}
        for name in case_set.providers:
            if name in names:
                params.append((case, name))
                ids.append(f"{case.op}-{case.shape.label().replace(' ', '_')}-{case.dtype}-{name}")
    metafunc.parametrize("bench_case", params, ids=ids)


def _runner(env) -> CaseRunner:
    """The runner `roofline` runs this profile with: its limit on a call (the profile's max_case_seconds, else
    timing's) and its rule for a call over it (checked, not timed)."""
    return CaseRunner(env.device, env.cfg, env.ceilings, max_case_seconds=_case_set(env.cfg).max_case_seconds)


def _case_set(cfg: Config):
    """DAWNSCOPE_PROFILE's case set, or DAWNSCOPE_TRACE's cases (the same as roofline --from-trace; once a session)."""
    global _TRACE_CASE_SET
    if TRACE is None:
        try:
            return cfg.case_set(PROFILE)
        except InputError as e:
            raise pytest.UsageError(f"error: {e.line()} (DAWNSCOPE_PROFILE)") from None
    if _TRACE_CASE_SET is None:
        try:
            top = positive_int(TRACE_TOP) if TRACE_TOP else None
        except Exception as e:  # noqa: BLE001 - argparse's ArgumentTypeError: one line
            raise pytest.UsageError(f"error: {TRACE_TOP_ENV}: {e}") from None
        try:
            tc = trace_cases(TRACE, cfg, top)
        except InputError as e:
            raise pytest.UsageError(f"error: {e.line()} (DAWNSCOPE_TRACE)") from None
        _TRACE_CASE_SET = case_set_of(tc)
        for g in tc.groups:  # where each case came from, for the benchmark's extra_info (a row's trace_source)
            for c in g.cases:
                _TRACE_SOURCE.setdefault(c, tc.source(g))
    return _TRACE_CASE_SET


_TRACE_CASE_SET = None
_TRACE_SOURCE: dict = {}


@dataclass
class BenchEnv:
    cfg: Config
    device: Device
    ceilings: Ceilings
    timing_enabled: bool


@pytest.fixture(scope="session")
def bench_env(request) -> BenchEnv:
    cfg = _load()
    device = detect(DEVICE)
    timing_enabled = not request.config.getoption("benchmark_disable")
    if not timing_enabled:  # a correctness run: no measured ceilings needed
        return BenchEnv(cfg, device, build_ceilings(device, cfg, measure_now=False), False)
    # The cached ceilings of this machine, the same `python -m microbench.roofline` uses (with the profile's
    # GEMM shapes in their search); the conditions were looked at when the session started (plugin.py).
    conditions = getattr(request.config, "dawnscope_conditions", None)
    ceilings = machine_ceilings(
        device, cfg, shapes=_case_set(cfg).cases, busy_now=conditions.busy_now() if conditions else None
    )
    return BenchEnv(cfg, device, ceilings, True)


def test_benchmark(benchmark, bench_case, bench_env):
    case, name = bench_case
    p = registry.get(case.family, name)
    dev = bench_env.device
    if why := p.unavailable_reason(dev):
        pytest.skip(why)
    untimed = p.timed(dev)
    if untimed and bench_env.timing_enabled:
        pytest.skip(untimed)
    work = case_work(case)
    if bench_env.timing_enabled and (slow := too_slow(case, work, bench_env.ceilings, _runner(bench_env).limit_s)):
        pytest.skip(slow)

    with vendor.settings_for("kernels"):  # the vendor libraries as every kernel-comparing command sets them
        _bench(benchmark, case, name, p, work, bench_env)


def _bench(benchmark, case, name, p, work, bench_env):
    dev = bench_env.device
    inputs = [make_inputs(case, dev.torch_device, seed=i) for i in range(bench_env.cfg.timing.input_sets)]
    calls = [bind(p, case, *x) for x in inputs]
    runner = _runner(bench_env)
    try:
        out, first_s = runner._call_s(calls[0])
    except Unsupported as e:
        pytest.skip(f"unsupported: {e}")
    err = rel_err(out, reference(case, *inputs[0]))
    tol = bench_env.cfg.tolerance[case.dtype]
    assert err <= tol, f"wrong: relative error {err:.3g} > tolerance {tol:g}"
    if over := runner._over_limit(calls[0], first_s):  # e.g. a CPU without native bf16: 59 - 64 s a 2048^3 bf16 call
        pytest.skip(f"{over} (relative error {err:.2g})")

    rotation = itertools.cycle(calls)

    def timed_call():
        next(rotation)()
        dev.synchronize()  # GPU work is asynchronous: time its completion, not its launch

    benchmark.extra_info.update(
        op=case.op,
        shape=case.shape.label(),
        dtype=case.dtype,
        provider=name,
        device=dev.name,
        flops=work.flops,
        bytes=work.bytes_moved,
        rel_err=err,
        tf32_allowed=case.dtype == "tf32",
        profile=PROFILE,
    )
    if case in _TRACE_SOURCE:
        benchmark.extra_info["trace_source"] = _TRACE_SOURCE[case]
    benchmark(timed_call)

    if benchmark.stats is not None:  # timed (not --benchmark-disable)
        row = KernelCaseRow(op=case.op, shape=case.shape.label(), dtype=case.dtype, provider=name, device=dev.name)
        timer, timing = _judged_timing(benchmark, calls, bench_env)
        judge(row, work, timing, bench_env.ceilings)
        benchmark.extra_info["timer"] = timer
        benchmark.extra_info.update(
            tflops=row.tflops,
            gbps=row.gbps,
            intensity=row.intensity,
            ceiling=row.ceiling,
            ceiling_tflops=row.ceiling_tflops,
            pct_of_ceiling=row.pct_of_ceiling,
            pct_of_measured=row.pct_of_measured,
            pct_of_datasheet=row.pct_of_datasheet,
            bound=row.bound,
            flags=row.flags,
            time_ms=row.time_ms,
        )


def _judged_timing(benchmark, calls, bench_env):
    """The times the row is judged on, timed as the ceilings were. pytest-benchmark's own figures are wall clock
    around a synchronized call (launch, Python and the synchronization included); a GPU's ceilings are timed with
    events (roofline.timing), so there the row is timed again with the same events and judged on those. A CPU's
    ceilings are timed with perf_counter, as pytest-benchmark times: its samples are judged."""
    dev, cfg = bench_env.device, bench_env.cfg
    if dev.is_gpu:
        return (
            "events (roofline.timing.time_calls, as the ceilings); pytest-benchmark's stats are wall clock",
            time_calls(calls, dev, cfg.timing, cfg.noise),
        )
    samples_ms = [t * 1e3 for t in benchmark.stats.stats.data]
    return "wall clock (perf_counter, as the CPU ceilings)", summarize(samples_ms, cfg.noise)
