"""a kernel that faults ends its process's GPU context; the run must stop there and say so,
keep what it measured, and our never-run kernels must meet their faults in a process of their own.

No GPU here: the faults are modelled by tests/gpu_paths_sticky.py (a sticky error as the CUDA Runtime API
documents it: after the fault every call in the process fails with the same error, a new process is clean),
and the texts recognised are the documented ones (data/gpu_faults.toml)."""

from __future__ import annotations

import importlib
import json
import sys

import pytest

from microbench.core.config import load_config
from microbench.core.device import cpu_device
from microbench.core.shapes import Case, GemmShape
from microbench.roofline import cli as roofline
from microbench.roofline import preflight, registry
from microbench.roofline.ceilings import Ceilings
from microbench.roofline.faults import lost_context
from microbench.roofline.runner import run_case_set


@pytest.fixture
def sticky():
    """The two modelled providers, registered for one test, with a fresh context."""
    with registry.scoped():
        sys.modules.pop("tests.gpu_paths_sticky", None)  # importing registers them, in this scope
        yield importlib.import_module("tests.gpu_paths_sticky")


@pytest.mark.parametrize(
    "text, name",
    [
        ("CUDA error: an illegal memory access was encountered", "cudaErrorIllegalAddress"),
        ("cudaErrorIllegalAddress: an illegal memory access was encountered", "cudaErrorIllegalAddress"),
        ("Triton Error [CUDA]: unspecified launch failure", "cudaErrorLaunchFailure"),
        ("CUDA error: device-side assert triggered\nCompile with `TORCH_USE_CUDA_DSA`", "cudaErrorAssert"),
        ("CUDA_ERROR_MISALIGNED_ADDRESS", "cudaErrorMisalignedAddress"),
        ("HIP error: an illegal memory access was encountered", "cudaErrorIllegalAddress"),
        ("hipErrorLaunchFailure", "cudaErrorLaunchFailure"),
    ],
)
def test_documented_texts_are_a_lost_context(text, name):
    assert lost_context(RuntimeError(text)) == name


@pytest.mark.parametrize(
    "text",
    [
        "CUDA out of memory. Tried to allocate 2.00 GiB",
        "cudaErrorInvalidValue: invalid argument",
        "mixed operand dtypes",
    ],
)
def test_recoverable_errors_are_not(text):
    assert lost_context(RuntimeError(text)) is None


def test_a_cause_chain_is_read():
    try:
        try:
            raise RuntimeError("CUDA error: unspecified launch failure")
        except RuntimeError as inner:
            raise ValueError("while binding") from inner
    except ValueError as e:
        assert lost_context(e) == "cudaErrorLaunchFailure"


def _case_set(cfg, providers):
    from microbench.core.config import CaseSet

    cases = tuple(Case("gemm", GemmShape(m, 8, 8), "fp32") for m in (8, 16, 32))
    return CaseSet("t", "three GEMMs", tuple(providers), cases)


def test_the_runner_stops_at_the_first_lost_context(sticky):
    cfg = load_config()
    rows = []
    stopped = run_case_set(
        _case_set(cfg, ["t_ok", "t_fault"]), cpu_device(), cfg, Ceilings([], []), rows.append, isolate=()
    )
    got = [(r.shape, r.provider, r.status) for r in rows]
    assert got == [
        ("8x8x8", "t_ok", "ok"),
        ("8x8x8", "t_fault", "ok"),
        ("16x8x8", "t_ok", "ok"),
        ("16x8x8", "t_fault", "failed"),
    ]  # the 32x8x8 case, which would fail for both, never ran
    assert rows[-1].reason.startswith("device context lost: RuntimeError: CUDA error: an illegal memory access")
    assert "16x8x8" in stopped and "t_fault" in stopped and "cudaErrorIllegalAddress" in stopped


def test_preflight_meets_the_fault_in_its_own_process(sticky):
    """t_fault runs first in a child (spawned, so its context is its own): the child's context is lost on
    the 16-row case, a second child checks the rest; the measuring process never loses its context, so every
    other row is measured and only the faulting pair is failed."""
    cfg = load_config()
    rows = []
    stopped = run_case_set(
        _case_set(cfg, ["t_ok", "t_fault"]), cpu_device(), cfg, Ceilings([], []), rows.append, isolate=("t_fault",)
    )
    assert stopped is None and sticky.CONTEXT["lost"] is False
    got = {(r.shape, r.provider): r.status for r in rows}
    assert got == {
        ("8x8x8", "t_ok"): "ok",
        ("8x8x8", "t_fault"): "ok",
        ("16x8x8", "t_ok"): "ok",
        ("16x8x8", "t_fault"): "failed",
        ("32x8x8", "t_ok"): "ok",
        ("32x8x8", "t_fault"): "ok",
    }
    bad = next(r for r in rows if r.status == "failed")
    assert bad.reason.startswith("lost the device context in its pre-flight process (cudaErrorIllegalAddress")


def test_preflight_names_a_child_that_dies():
    """A child that ends without a word (ROCm aborts the process on a GPU memory fault) is reported with
    the call it was in."""
    pairs = [preflight.Pair(Case("gemm", GemmShape(4, 4, 4), "fp32"), "t_absent", "tests.gpu_paths_exit")]
    got = preflight.faults(pairs, "cpu")
    assert list(got.values()) == ["the pre-flight process was ended by SIGABRT in this call"]


def test_preflight_ends_a_child_that_hangs():
    pairs = [preflight.Pair(Case("gemm", GemmShape(4, 4, 4), "fp32"), "t_absent", "tests.gpu_paths_hang")]
    got = preflight.faults(pairs, "cpu", timeout_s=3.0)
    assert list(got.values()) == ["the pre-flight process hung (ended after its timeout) in this call"]


def test_roofline_keeps_the_rows_and_says_where_it_stopped(sticky, tiny_config, tmp_path):
    text = tiny_config.read_text().replace('providers = ["torch", "cupy_blas"]', 'providers = ["t_ok", "t_fault"]')
    text = text.replace("{ m = 64, n = 48, k = 32 }", "{ m = 64, n = 48, k = 32 }, { m = 16, n = 8, k = 8 }")
    tiny_config.write_text(text)
    out = tmp_path / "out"
    code = roofline.main(
        ["--profile", "tiny", "--config", str(tiny_config), "--out", str(out), "--no-plot", "--device", "cpu"]
    )
    assert code == 1
    doc = json.loads((out / "results.json").read_text())
    assert "16x8x8" in doc["stopped"] and "t_fault" in doc["stopped"]
    measured = [(r["shape"], r["dtype"], r["provider"], r["status"]) for r in doc["results"]]
    assert measured[:4] == [
        ("64x48x32", "fp32", "t_ok", "ok"),
        ("64x48x32", "fp32", "t_fault", "ok"),
        ("64x48x32", "bf16", "t_ok", "ok"),
        ("64x48x32", "bf16", "t_fault", "ok"),
    ]
    assert measured[-1][2:] == ("t_fault", "failed") and measured[-1][0] == "16x8x8"
    assert not any(r["op"].startswith("conv2d") for r in doc["results"])
