"""The device check's stage budgets, on this CPU: the plan (order, caps, the files each test
stage collects), the on-disk cubin cache of our CUDA C++ modules (the real NVRTC and Triton's ptxas of this
environment; the second build is taken from disk with NVRTC made to fail), and the ceiling search limited to
the dtypes a profile judges (measured_ceilings replaced by a recorder, as in tests/test_judge.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from devtools import devicecheck as dc
from microbench.core.config import load_config
from microbench.roofline import ceilings as C

REPO = Path(__file__).resolve().parents[1]


def _paths(st: dc.Stage) -> list[str]:
    return [a for a in st.cmd if a.startswith("tests")]


def test_every_stage_is_planned_within_half_its_cap_and_wgmma_runs_last():
    plan = dc.stages()
    assert plan[-1].name == "wgmma (unverified kernel, alone)"
    assert sum(st.cap_s for st in plan) <= dc.DEADLINE_S - dc.SUMMARY_RESERVE_S
    doc = (REPO / "devtools" / "README.md").read_text()
    table = doc[doc.index("## The device check's plan") :]
    for st in plan:  # devtools/README.md gives each stage's expected seconds: at most half its cap
        row = next(ln for ln in table.splitlines() if ln.startswith(f"| {st.name} |"))
        cap, expected = (float(c.strip().removesuffix(" s")) for c in row.split("|")[2:4])
        assert cap == st.cap_s and expected <= cap / 2, row


def test_test_stages_collect_named_files_only_and_survive_a_collection_error():
    for st in dc.stages():
        if st.junit:
            assert "--continue-on-collection-errors" in st.cmd
            assert _paths(st) and "tests" not in _paths(st)  # never the whole suite
    triton = next(st for st in dc.stages() if st.name == "gpu tests: triton")
    assert _paths(triton) == ["tests/test_triton_conv.py", "tests/test_triton_gemm.py"]  # conv not last
    assert "not autotuned" in triton.cmd[triton.cmd.index("-k") + 1]  # autotuning is off: no duplicate pairs


def test_every_file_with_a_gpu_test_is_in_a_stage():
    planned = {p for st in dc.stages() for p in _paths(st)}
    marked = {
        f"tests/{p.name}"
        for p in (REPO / "tests").glob("test_*.py")
        if re.search(r"^@pytest\.mark\.gpu|pytestmark = .*mark\.gpu", p.read_text(), re.M)
    }
    assert marked and marked <= planned, marked - planned


def test_ncu_gets_its_own_deadline_inside_its_cap():
    st = next(st for st in dc.stages() if st.name == "hardware counters (ncu)")
    assert float(st.cmd[st.cmd.index("--deadline-s") + 1]) < st.cap_s


def test_the_stages_share_one_cubin_cache(tmp_path):
    env = dc._env(False, tmp_path / "site")
    assert env["DAWNSCOPE_CUBIN_CACHE"] == str(tmp_path / "cubins")


def test_a_cubin_built_once_is_loaded_from_disk_by_the_next_build(tmp_path, monkeypatch):
    from microbench.kernels import cuda_kernels as ck
    from microbench.kernels import gemm_cupy, nvrtc

    try:
        nvrtc.version()
    except Exception as e:  # noqa: BLE001
        pytest.skip(f"no NVRTC here: {e}")
    monkeypatch.setenv(ck.CUBIN_CACHE_ENV, str(tmp_path))
    ck.build.cache_clear()
    first = ck.build(gemm_cupy.WGMMA_SOURCE, gemm_cupy.wgmma_exprs(), "sm_90")
    if first.cubin is None:
        pytest.skip(f"no ptxas here: {first.toolchain_error}")
    assert len(list(tmp_path.glob("*.cubin"))) == 1
    ck.build.cache_clear()  # as a new process would start

    def no_compile(*a, **k):
        raise AssertionError("compiled again")

    monkeypatch.setattr(nvrtc, "compile_ptx", no_compile)
    again = ck.build(gemm_cupy.WGMMA_SOURCE, gemm_cupy.wgmma_exprs(), "sm_90")
    assert again.cubin == first.cubin and again.symbols == first.symbols and again.ptx == first.ptx
    src, headers = nvrtc.kernel_source(gemm_cupy.WGMMA_SOURCE)
    key = ck.disk_key(src, headers, gemm_cupy.wgmma_exprs(), "sm_90")
    assert key != ck.disk_key(src + "\n", headers, gemm_cupy.wgmma_exprs(), "sm_90")  # the source
    assert key != ck.disk_key(src, headers, gemm_cupy.wgmma_exprs(), "sm_80")  # the architecture
    monkeypatch.setattr(nvrtc, "version", lambda: (99, 0))
    assert key != ck.disk_key(src, headers, gemm_cupy.wgmma_exprs(), "sm_90")  # NVRTC's version
    ck.build.cache_clear()


def test_the_ceiling_search_measures_only_the_profiles_dtypes(monkeypatch, tmp_path):
    from microbench.core.device import Device

    asked = []

    def measured(device, cfg, on_step=None, budget_s=None, shapes=(), dtypes=None):
        asked.append(dtypes)
        return [
            C.Ceiling(f"measured {d}", C.COMPUTE, d, 1.0, "TFLOP/s", "measured", "fake", (0.9, 1.1)) for d in dtypes
        ], []

    monkeypatch.setattr(C, "measured_ceilings", measured)
    monkeypatch.setenv(C.CACHE_ENV, str(tmp_path))
    monkeypatch.setattr("microbench.core.conditions.Conditions.start", lambda self: self)
    monkeypatch.setattr("microbench.core.conditions.Conditions.stop", lambda self: {"busy": False, "reasons": []})
    cfg = load_config()
    quick = cfg.case_sets["quick"]
    dev = Device("cuda", "cuda:0", "NVIDIA H200", "sm_90", 132, 141 * 2**30, None, l2_bytes=50 * 2**20)
    wanted = tuple(sorted({c.dtype for c in quick.cases}))
    assert "tf32" not in wanted
    C.machine_ceilings(dev, cfg, shapes=quick.cases, busy_now=False, dtypes=wanted)
    assert [set(a) for a in asked] == [set(wanted)]  # no tf32 search for the quick profile
    C.machine_ceilings(dev, cfg, shapes=quick.cases, busy_now=False, dtypes=wanted)
    assert len(asked) == 1  # from the cache
    C.machine_ceilings(dev, cfg, busy_now=False)  # a full search wants tf32: the subset entry is stale
    assert set(asked[-1]) == set(cfg.ceilings["cuda"].gemm_sizes) and "tf32" in asked[-1]
