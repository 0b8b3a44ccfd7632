"""the vendor baselines are set up the same way in every command of a family
(data/vendor_settings.toml, applied by core.vendor), and what was applied is in results.json's conditions.

The switches are PyTorch's global flags (torch.backends.cudnn.benchmark, torch.backends.cuda.matmul's
reduced-precision reductions), which a CPU build of PyTorch holds and reads back like a CUDA build; a provider
registered here reads them at the moment it is called, which is what cuBLAS and cuDNN would see. Whether cuBLAS
then picks a different algorithm, only a GPU shows."""

from __future__ import annotations

import json

import pytest
import torch

from microbench.api import decompose_step, measure
from microbench.core import vendor
from microbench.core.shapes import Case, GemmShape
from microbench.roofline import cli as roofline
from microbench.roofline import registry
from microbench.roofline.registry import provider

SEEN: list[dict] = []
pytestmark = pytest.mark.filterwarnings("ignore:Profiler won't be using warmup")


def _switches() -> dict:
    m = torch.backends.cuda.matmul
    return {
        "cudnn.benchmark": torch.backends.cudnn.benchmark,
        "cuda.matmul.allow_fp16_reduced_precision_reduction": m.allow_fp16_reduced_precision_reduction,
        "cuda.matmul.allow_bf16_reduced_precision_reduction": m.allow_bf16_reduced_precision_reduction,
        "cuda.matmul.allow_fp16_accumulation": m.allow_fp16_accumulation,
    }


@pytest.fixture
def recording():
    """A GEMM provider that records the vendor switches as it is called."""
    SEEN.clear()
    with registry.scoped():

        @provider("gemm", "t_reads_switches")
        def reads(a, b, *, allow_tf32=False):
            SEEN.append(_switches())
            return torch.matmul(a, b)

        yield


KERNELS = {vendor.SWITCHES[k]: v for k, v in vendor.table()["kernels"].items()}
STEP = {vendor.SWITCHES[k]: v for k, v in vendor.table()["step"].items()}


def test_the_table_names_known_switches_and_turns_the_reductions_off_for_kernels():
    assert set(vendor.table()) == {"kernels", "step"}
    assert KERNELS["cudnn.benchmark"] is STEP["cudnn.benchmark"] is True
    assert KERNELS["cuda.matmul.allow_fp16_reduced_precision_reduction"] is False
    assert KERNELS["cuda.matmul.allow_bf16_reduced_precision_reduction"] is False


def test_measure_runs_under_the_kernels_setting_and_restores(recording):
    before = _switches()
    rows = measure(Case("gemm", GemmShape(8, 8, 8), "fp32"), ["t_reads_switches"], device="cpu")
    assert rows[0].status == "ok" and SEEN
    assert all(seen == KERNELS for seen in SEEN)
    assert _switches() == before


@pytest.mark.slow
def test_roofline_records_its_setting(recording, tiny_config, tmp_path):
    tiny_config.write_text(
        tiny_config.read_text().replace('providers = ["torch", "cupy_blas"]', 'providers = ["t_reads_switches"]')
    )
    out = tmp_path / "out"
    assert (
        roofline.main(
            ["--profile", "tiny", "--config", str(tiny_config), "--out", str(out), "--no-plot", "--device", "cpu"]
        )
        == 0
    )
    doc = json.loads((out / "results.json").read_text())
    assert doc["conditions"]["vendor"] == {"kernels": KERNELS}
    assert SEEN and all(seen == KERNELS for seen in SEEN)


@pytest.mark.slow
def test_decompose_step_and_replay_each_under_their_family(recording):
    """The step under [step], its replay (the same cases roofline would run) under [kernels]; both recorded."""
    doc = decompose_step(
        "tests.ext_model:make",
        batch=4,
        device="cpu",
        replay=True,
        providers=("t_reads_switches",),
        measure_ceilings=False,
        plot=False,
        timed_steps=0,
        profiled_steps=1,
        profiler_warmup_steps=0,
    )
    assert doc["conditions"]["vendor"] == {"step": STEP, "kernels": KERNELS}
    assert SEEN and all(seen == KERNELS for seen in SEEN)
