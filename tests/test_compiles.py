"""The compile budget, counted on a CPU (microbench.inspect.compiles): the wrappers' GPU path under
triton_runtime.planning records what the JIT would compile, and DAWNSCOPE_AUTOTUNE=0 leaves one default
configuration per kernel and specialization. Expected counts are computed here from the configuration
lists and Triton's specialization rule, not read back from the code under test."""

from __future__ import annotations

import pytest
import triton

from microbench.core.shapes import Case, ConvShape, GemmShape
from microbench.inspect.compiles import count, plan_cases
from microbench.kernels import triton_configs as cfgs
from microbench.kernels import triton_runtime as tr

pytestmark = [pytest.mark.inspect, pytest.mark.slow]  # compiles for sm_80 and sm_90

GEMMS = [
    Case("gemm", GemmShape(512, 512, 512), "bf16"),
    Case("gemm", GemmShape(2048, 2048, 2048), "bf16"),
    Case("gemm", GemmShape(127, 33, 7), "bf16"),
]


def _after_prune(configs, m, n, sms=132):
    """The candidates the autotuner keeps, by the rules stated in gemm_triton._prune: no tile more than twice
    the problem (64 at least), no persistent tile whose plain twin is there when tiles <= SMs."""
    small = [
        c
        for c in configs
        if c.block_m <= max(64, 2 * triton.next_power_of_2(m)) and c.block_n <= max(64, 2 * triton.next_power_of_2(n))
    ]
    plain = {(c.block_m, c.block_n, c.block_k, c.num_warps, c.num_stages) for c in small if not c.persistent}
    kept = [
        c
        for c in small
        if not (
            c.persistent
            and (c.block_m, c.block_n, c.block_k, c.num_warps, c.num_stages) in plain
            and triton.cdiv(m, c.block_m) * triton.cdiv(n, c.block_n) <= sms
        )
    ]
    return len(kept)


def test_autotuned_gemm_compiles_every_candidate_once_per_specialization(monkeypatch):
    monkeypatch.setenv(tr.AUTOTUNE_ENV, "1")
    # 512^3 and 2048^3 (sizes divisible by 16, aligned) share a specialization and take the TMA kernel on
    # sm_90; 127x33x7 cannot (33 bf16 = 66-byte rows) and takes the pointer kernel, whose candidates are
    # pruned for its small N.
    expect = _after_prune(cfgs.gemm_tma_configs_sm90("bf16"), 2048, 2048) + _after_prune(
        cfgs.gemm_configs_sm90("bf16"), 127, 33
    )
    c = count(GEMMS, "sm_90")
    assert c["total"] == expect and c["by_kernel"] == {
        "triton_gemm": _after_prune(cfgs.gemm_configs_sm90("bf16"), 127, 33),
        "triton_gemm_tma": _after_prune(cfgs.gemm_tma_configs_sm90("bf16"), 2048, 2048),
    }


def test_autotune_off_compiles_the_default_only(monkeypatch):
    monkeypatch.setenv(tr.AUTOTUNE_ENV, "0")
    compiles = plan_cases(GEMMS, "sm_90")
    assert len(set(compiles)) == 2  # one default per kernel and specialization
    assert {cfg for _, cfg, _ in compiles} == {cfgs.gemm_default("sm_90", "bf16")}
    assert not tr.autotune_enabled()
    monkeypatch.setenv(tr.AUTOTUNE_ENV, "1")
    assert tr.autotune_enabled()


def test_specialization_follows_the_jit(monkeypatch):
    """An odd size is its own specialization: K = 7 vs K = 16 compile twice, K = 16 vs 32 once."""
    monkeypatch.setenv(tr.AUTOTUNE_ENV, "0")
    fp32 = lambda k: Case("gemm", GemmShape(64, 64, k), "fp32")  # noqa: E731 - fp32: the pointer kernel
    assert count([fp32(16), fp32(32)], "sm_80")["total"] == 1
    assert count([fp32(16), fp32(7)], "sm_80")["total"] == 2
    assert count([fp32(16), fp32(1)], "sm_80")["total"] == 2  # 1 becomes a constant


def test_conv_directions_and_bwd_data_phases(monkeypatch):
    monkeypatch.setenv(tr.AUTOTUNE_ENV, "0")
    s = ConvShape(2, 32, 15, 15, 32, 3, 3, stride=(2, 2), pad=(1, 1))
    c = count([Case(f"conv2d_{d}", s, "bf16") for d in ("fwd", "bwd_data", "bwd_weight")], "sm_90")
    # stride 2 x 2: the input splits into four phases, one launch each; PHASE_H and PHASE_W are 0 or 1, and
    # the JIT makes 1 a constant while 0 stays an argument: four specializations, four compiles
    assert c["by_kernel"] == {"triton_conv_fwd": 1, "triton_conv_bwd_weight": 1, "triton_conv_bwd_data": 4}


def test_conv_candidates_larger_than_the_problem_are_not_compiled(monkeypatch):
    monkeypatch.setenv(tr.AUTOTUNE_ENV, "1")
    s = ConvShape(2, 32, 15, 15, 32, 3, 3, stride=(2, 2), pad=(1, 1))  # fwd: 2*8*8 = 128 pixels x 32 channels
    m, n = 2 * 8 * 8, 32
    want = [
        c
        for c in cfgs.conv_configs_sm90("bf16")
        if c.block_m <= max(64, 2 * triton.next_power_of_2(m)) and c.block_n <= max(64, 2 * triton.next_power_of_2(n))
    ]
    compiles = plan_cases([Case("conv2d_fwd", s, "bf16")], "sm_90")
    assert sorted({cfg for _, cfg, _ in compiles}, key=repr) == sorted(want, key=repr)
    assert len(want) < len(cfgs.conv_configs_sm90("bf16"))  # the 128- and 256-wide column tiles are gone


@pytest.mark.parametrize("target", ["sm_80", "sm_90"])
def test_defaults_do_not_spill_at_the_quick_profiles_odd_and_batch8_shapes(target):
    """Where the 4096^3 builds hide it: 127x33x7 (no size or stride divisible by 16: more address registers)
    and ResNet's conv2_x 3x3 at batch 8, as the quick profile runs them. Compiled ahead of time with the
    JIT's specialization for these very arguments (microbench.inspect.compiles.default_plans)."""
    from microbench.inspect.compiles import default_plans, inspect_plans

    cases = [
        Case("gemm", GemmShape(127, 33, 7), "fp32"),
        Case("gemm", GemmShape(127, 33, 7), "bf16"),
        Case("conv2d_fwd", ConvShape(8, 64, 56, 56, 64, 3, 3, pad=(1, 1)), "fp32"),
    ]
    plans = default_plans(cases, target)
    assert len(plans) == 3
    for r in inspect_plans(plans, target, jobs=2):
        assert "error" not in r, r
        assert not r["spills"], (
            f"{r['kernel']} [{r['config']}] {target}: {r['registers']} registers, "
            f"{r['spill_stores']} spill stores, stack {r['stack_bytes']}"
        )
        assert (r["tensor_core_instructions"] > 0) == ("bfloat16" in r["config"])
