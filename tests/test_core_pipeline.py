"""Registry, correctness before timing, and result rows, through the real runner."""

from __future__ import annotations

import json

import pytest
import torch

import microbench
from microbench import Case, ResultRow, Unsupported, provider
from microbench.core.cases import make_inputs, reference, rel_err
from microbench.core.config import load_config
from microbench.core.device import cpu_device
from microbench.core.ops.work import gemm_work
from microbench.core.results import KernelCaseRow, ResultsWriter
from microbench.core.stats import summarize
from microbench.roofline import registry
from microbench.roofline.ceilings import Ceiling, Ceilings
from microbench.roofline.runner import CaseRunner, judge

GemmShape, ConvShape = microbench.shapes.GemmShape, microbench.shapes.ConvShape


@pytest.fixture
def scratch_providers():
    """Register providers for one test and remove them afterwards (the registry is process-wide)."""
    with registry.scoped():
        yield


def test_decorator_returns_function_unchanged(scratch_providers):
    def f(a, b, *, allow_tf32=False):
        return a @ b

    assert provider("gemm", "t_identity")(f) is f
    assert registry.get("gemm", "t_identity").fn is f
    with pytest.raises(ValueError, match="registered twice"):
        provider("gemm", "t_identity")(lambda a, b, allow_tf32=False: a)
    with pytest.raises(ValueError, match="unknown op"):
        provider("softmax", "x")


def test_public_measure_with_a_provider_of_ones_own(tiny_config):
    """The public API end to end: a provider declared with microbench.provider, measured beside the baseline by
    microbench.measure, one typed row each; the scoped registry forgets it afterwards."""
    with registry.scoped():

        @provider("gemm", "t_public")
        def mine(a, b, *, allow_tf32=False):
            if a.dim() != 2:
                raise Unsupported("2-D only")
            return torch.matmul(a, b)

        case = Case("gemm", GemmShape(16, 8, 4), "fp32")
        rows = microbench.measure(case, ["torch", "t_public"], device="cpu", config=tiny_config)
        batched = microbench.measure(
            Case("gemm", GemmShape(4, 4, 4, batch=2), "fp32"), ["t_public"], device="cpu", config=tiny_config
        )
    assert registry.get("gemm", "t_public") is None and registry.get("gemm", "torch") is not None
    assert [r.provider for r in rows] == ["t_public", "torch"]
    assert all(isinstance(r, ResultRow) and r.status == "ok" and r.rel_err < 1e-6 for r in rows)
    assert all(r.flops == 2 * 16 * 8 * 4 and r.time_ms["reps"] >= 3 for r in rows)
    assert batched[0].status == "skipped" and batched[0].reason == "unsupported: 2-D only"


def test_vendor_providers_registered_and_cupy_unavailable_on_cpu():
    assert registry.baseline("gemm").name == "torch" and registry.baseline("conv2d").name == "torch"
    cupy_blas = registry.get("gemm", "cupy_blas")
    reason = cupy_blas.unavailable_reason(cpu_device())
    assert reason is not None and reason.startswith("unavailable: ")  # no GPU here (or no CuPy)


@pytest.mark.parametrize(
    "case",
    [
        Case("gemm", GemmShape(33, 7, 127), "fp32"),
        Case("gemm", GemmShape(5, 9, 3, batch=3, trans_a=True, trans_b=True), "bf16"),
        Case("conv2d_fwd", ConvShape(2, 3, 7, 7, 4, 7, 7, stride=(2, 2), pad=(3, 3)), "fp32"),
        Case("conv2d_bwd_data", ConvShape(2, 4, 9, 9, 5, 3, 3, stride=(2, 2), pad=(1, 1)), "fp32"),
        Case("conv2d_bwd_weight", ConvShape(2, 4, 9, 9, 5, 3, 3, stride=(2, 2), pad=(1, 1)), "bf16"),
    ],
)
def test_vendor_matches_float64_reference(case, cfg):
    a, b = make_inputs(case, "cpu", seed=3)
    if case.family == "conv2d":
        assert a.is_contiguous(memory_format=torch.channels_last)
    if case.op == "gemm" and case.shape.trans_a:
        assert not a.is_contiguous()  # a column-major view, as the case says
    p = registry.baseline(case.family)
    from microbench.roofline.registry import bind

    out = bind(p, case, a, b)()
    assert rel_err(out, reference(case, a, b)) <= cfg.tolerance[case.dtype]


def test_inputs_are_random_and_fresh_per_seed():
    case = Case("gemm", GemmShape(16, 16, 16), "fp16")
    a0, _ = make_inputs(case, seed=0)
    a1, _ = make_inputs(case, seed=1)
    assert (a0 != 0).float().mean() > 0.99 and not torch.equal(a0, a1)


def test_rel_err_rejects_zero_nan_and_wrong_shape():
    ref = torch.randn(8, 8, dtype=torch.float64)
    assert rel_err(torch.zeros(8, 8), ref) == pytest.approx(1.0)
    bad = ref.clone()
    bad[0, 0] = float("nan")
    assert rel_err(bad, ref) == float("inf")
    assert rel_err(torch.zeros(8, 7), ref) == float("inf")


def _runner(cfg, measured_gflops=100.0):
    c = Ceilings(
        [
            Ceiling("measured fp32", "compute", "fp32", measured_gflops / 1e3, "TFLOP/s", "measured"),
            Ceiling("measured memory", "memory", None, 10.0, "GB/s", "measured"),
        ]
    )
    return CaseRunner(cpu_device(), cfg, c)


def test_wrong_provider_is_reported_wrong_without_throughput(scratch_providers, tiny_config):
    cfg = load_config(tiny_config)

    @provider("gemm", "t_zeros")
    def zeros(a, b, *, allow_tf32=False):
        return torch.zeros(a.shape[0], b.shape[1], dtype=a.dtype)

    @provider("gemm", "t_unsupported")
    def unsupported(a, b, *, allow_tf32=False):
        raise Unsupported("only square")

    @provider("gemm", "t_broken")
    def broken(a, b, *, allow_tf32=False):
        raise RuntimeError("kernel launch failed\nmore detail")

    @provider("gemm", "t_away", enabled=lambda d: "unavailable: not here")
    def away(a, b, *, allow_tf32=False):
        raise AssertionError("never called")

    case = Case("gemm", GemmShape(32, 16, 8), "fp32")
    ps = [registry.get("gemm", n) for n in ("torch", "t_zeros", "t_unsupported", "t_broken", "t_away")]
    rows = {r.provider: r for r in _runner(cfg).run(case, ps)}
    ok, wrong = rows["torch"], rows["t_zeros"]
    assert ok.status == "ok" and ok.time_ms and ok.tflops > 0 and ok.rel_err < 1e-5 and ok.tf32_allowed is False
    assert wrong.status == "wrong" and wrong.rel_err == pytest.approx(1.0)
    assert wrong.time_ms is None and wrong.tflops is None and "tolerance" in wrong.reason
    assert rows["t_unsupported"].status == "skipped" and "only square" in rows["t_unsupported"].reason
    assert rows["t_broken"].status == "failed" and rows["t_broken"].reason == "RuntimeError: kernel launch failed"
    assert rows["t_away"].status == "skipped" and rows["t_away"].reason == "unavailable: not here"


def test_untimed_provider_gets_correctness_only(scratch_providers, tiny_config):
    cfg = load_config(tiny_config)
    provider("gemm", "t_interp", timed=lambda d: "interpreted: correctness only")(
        lambda a, b, *, allow_tf32=False: torch.matmul(a, b)
    )
    row = next(_runner(cfg).run(Case("gemm", GemmShape(8, 8, 8), "fp32"), [registry.get("gemm", "t_interp")]))
    assert row.status == "ok" and row.time_ms is None and row.tflops is None and row.reason.startswith("interpreted")


def test_a_fallback_path_flags_the_row(scratch_providers, tiny_config):
    """Evidence that the matrix units ran the case at another precision's rate (an AMD fp8 flavour upcast to
    f16, fp32 without xf32) flags the row: the table and the roofline say it beside the figure."""
    from microbench.roofline.registry import Evidence
    from microbench.roofline.runner import FALLBACK

    cfg = load_config(tiny_config)
    why = "no xf32 (TF32) matrix instructions on gfx950: fp32 operands run as IEEE fp32"
    provider("gemm", "t_fallback", evidence=lambda case, dev, call: Evidence("yes", "amdgcn ...", fallback=why))(
        lambda a, b, *, allow_tf32=False: torch.matmul(a, b)
    )
    row = next(_runner(cfg).run(Case("gemm", GemmShape(8, 8, 8), "fp32"), [registry.get("gemm", "t_fallback")]))
    assert row.status == "ok" and row.tensor_cores == "yes" and f"{FALLBACK}{why}" in row.flags


def test_too_slow_case_skipped_by_estimate(tiny_config):
    cfg = load_config(tiny_config)
    # at a (pretend) measured 1,000 FLOP/s, a 64^3 GEMM (524,288 FLOPs) would take 524 s per call
    row = next(
        _runner(cfg, measured_gflops=1e-6).run(Case("gemm", GemmShape(64, 64, 64), "fp32"), [registry.baseline("gemm")])
    )
    assert row.status == "skipped" and "max_case_seconds" in row.reason


def test_a_case_whose_calls_take_longer_than_the_limit_is_checked_not_timed(scratch_providers, tiny_config):
    """The ceilings can be wrong about a call's time (a CPU without native bf16: its estimate puts bf16 at the fp32
    rate, PyTorch ran it 60x slower): a provider whose call takes longer than the limit is skipped with its output
    checked; on a GPU only where a second call is slow too (the first may be a JIT compile or an autotune)."""
    import time

    from microbench.core.device import Device

    cfg = load_config(tiny_config)
    calls = {"slow": 0, "first": 0}

    def slow(a, b, *, allow_tf32=False):
        calls["slow"] += 1
        time.sleep(0.06)
        return torch.matmul(a, b)

    def slow_first(a, b, *, allow_tf32=False):
        calls["first"] += 1
        time.sleep(0.06 if calls["first"] == 1 else 0.0)
        return torch.matmul(a, b)

    provider("gemm", "t_slow")(slow)
    provider("gemm", "t_slow_first")(slow_first)
    runner = _runner(cfg)
    runner.max_case_seconds = 0.05  # the profile's limit, under what a sleep of 0.06 s must take
    case = Case("gemm", GemmShape(8, 8, 8), "fp32")
    ps = [registry.get("gemm", n) for n in ("t_slow", "t_slow_first")]
    rows = {r.provider: r for r in runner.run(case, ps)}
    for r in rows.values():  # a CPU: the first call decides
        assert r.status == "skipped" and r.time_ms is None and "first call took" in r.reason and r.rel_err < 1e-5
        assert "max_case_seconds = 0.05" in r.reason
    assert calls == {"slow": 1, "first": 1}

    class AsIfGpu(Device):  # the same CPU, taken for a GPU: the second call decides
        @property
        def is_gpu(self) -> bool:
            return True

        def synchronize(self) -> None:
            pass  # nothing queued: the calls ran on the CPU

    cpu = runner.device
    runner.device = AsIfGpu(**{f: getattr(cpu, f) for f in cpu.__dataclass_fields__})
    a, b = make_inputs(case, "cpu", seed=0)
    assert runner._over_limit(lambda: slow_first(a, b), first_s=0.06) is None  # the second call was fast: timed
    assert "(the first 0.06 s)" in runner._over_limit(lambda: slow(a, b), first_s=0.06)
    assert calls == {"slow": 2, "first": 2}


def test_a_profile_sets_its_own_longest_call(tmp_path):
    from microbench.core.config import load_config as load
    from microbench.core.errors import InputError

    from .conftest import REPO

    text = (REPO / "bench.toml").read_text()
    assert load(REPO / "bench.toml").case_sets["quick"].max_case_seconds == 1.0
    assert load(REPO / "bench.toml").case_sets["default"].max_case_seconds is None  # timing.max_case_seconds
    bad = tmp_path / "bench.toml"
    bad.write_text(text.replace("max_case_seconds = 1.0 ", "max_case_seconds = -1.0 ", 1))
    with pytest.raises(InputError, match="profiles.quick.max_case_seconds"):
        load(bad)


def test_judge_roofline_and_flags():
    work = gemm_work(GemmShape(100, 100, 100), "fp32")  # 2e6 FLOPs, 120 kB, intensity 16.7
    c = Ceilings(
        [
            Ceiling("m", "compute", "fp32", 1.0, "TFLOP/s", "measured"),
            Ceiling("mem", "memory", None, 30.0, "GB/s", "measured"),
            Ceiling("d", "compute", "fp32", 4.0, "TFLOP/s", "datasheet"),
        ]
    )
    row = KernelCaseRow(op="gemm", shape="x", dtype="fp32", provider="p", device="d")
    judge(row, work, summarize([0.01] * 5), c)  # 2e6 FLOPs in 10 us = 0.2 TFLOP/s
    assert row.tflops == pytest.approx(0.2)
    # memory roof at this intensity: 30e9 * 16.67 = 0.5 TFLOP/s < 1.0 compute roof -> memory-bound
    assert row.bound == "memory" and row.ceiling_tflops == pytest.approx(0.5)
    assert row.pct_of_ceiling == pytest.approx(40.0) and row.pct_of_measured == pytest.approx(20.0)
    assert row.pct_of_datasheet == pytest.approx(5.0) and row.flags == []
    fast = KernelCaseRow(op="gemm", shape="x", dtype="fp32", provider="p", device="d")
    judge(fast, work, summarize([0.001] * 5), c)  # 2 TFLOP/s: four times the memory roof
    assert fast.flags and "above the measured memory roof" in fast.flags[0]


def test_writer_keeps_every_row_as_it_goes(tmp_path):
    w = ResultsWriter(tmp_path, {"hardware": {"name": "x"}, "software": {}, "config": {}})
    for i in range(3):
        w.add(KernelCaseRow(op="gemm", shape=f"{i}", dtype="fp32", provider="p", device="d", rel_err=float("inf")))
        doc = json.loads((tmp_path / "results.json").read_text())  # readable after every row
        assert len(doc["results"]) == i + 1 and doc["results"][-1]["rel_err"] is None
        lines = (tmp_path / "results.csv").read_text().splitlines()
        assert len(lines) == i + 2  # header + rows, flushed
    w.close()
    assert {"hardware", "software", "config", "ceilings", "results"} <= set(doc)
    with pytest.raises(ValueError):
        KernelCaseRow(op="gemm", shape="1", dtype="fp32", provider="p", device="d", status="great")


def test_public_names_are_not_module_names(tiny_config):
    """Every public name is one thing: no subpackage or command module of microbench shares a name with a
    public function, so importing every module leaves the API's functions callable as they were."""
    import importlib
    import pkgutil

    modules = {m.name for m in pkgutil.iter_modules(microbench.__path__)}
    functions = {n for n in microbench.__all__ if callable(getattr(microbench, n)) and n not in ("shapes",)}
    assert not functions & modules, functions & modules
    for name in modules - {"__main__"}:
        importlib.import_module(f"microbench.{name}")
    rows = microbench.measure(Case("gemm", GemmShape(8, 8, 8), "fp32"), ["torch"], device="cpu", config=tiny_config)
    assert [(r.provider, r.status) for r in rows] == [("torch", "ok")]
    assert callable(microbench.decompose_step) and callable(microbench.decompose.cli.main)
