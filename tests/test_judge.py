"""The one judge for every row kind (microbench.roofline.judge) and the one source of ceilings
(microbench.roofline.ceilings.machine_ceilings): each number the issue saw printed as valid when it was not, as a
test. Timings are synthetic: nothing here depends on how fast or how loaded this machine is."""

from __future__ import annotations

import json
import time

import pytest

from microbench.core.ops.work import Work
from microbench.core.results import CollectiveRow, KernelCaseRow, LayerRow, TimeToAccuracyRow
from microbench.core.stats import NoiseSettings, summarize
from microbench.core.verdict import BUSY_CEILING, IMPOSSIBLE, NOISY, is_impossible, trusted
from microbench.roofline import ceilings as C
from microbench.roofline.ceilings import COMPUTE, MEMORY, Ceiling, Ceilings
from microbench.roofline.judge import judge
from microbench.roofline.runner import too_slow

from .conftest import REPO

ST = NoiseSettings()
STEADY = [1.0, 1.0, 1.01, 1.0, 0.99]  # ms: five repeats that agree


def _ceilings(measured_tflops=1.0, busy=(), estimate_tflops=None):
    items = [
        Ceiling(
            "measured fp32",
            COMPUTE,
            "fp32",
            measured_tflops,
            "TFLOP/s",
            "measured",
            "",
            (measured_tflops * 0.95, measured_tflops * 1.05),
            (),
            (),
            busy,
        ),
        Ceiling("measured memory", MEMORY, None, 1000.0, "GB/s", "measured", "", (950.0, 1050.0), (), (), busy),
    ]
    if estimate_tflops:
        items.append(Ceiling("estimate fp32", COMPUTE, "fp32", estimate_tflops, "TFLOP/s", "estimate"))
    return Ceilings(items)


def _case_row(dtype="fp32"):
    return KernelCaseRow(op="gemm", shape="1000x1000x1000", dtype=dtype, provider="torch", device="cpu")


WORK = Work(2_000_000_000, 12_000_000)  # 2 GFLOP, compute-bound: 1 ms is 2 TFLOP/s


# ---- a ceiling measured busy is never used unflagged ------------------------------------------------------
def test_busy_ceiling_is_never_a_silent_denominator():
    """pytest-benchmark stored pct_of_measured up to 1924 with flags [] against a 4.2 GFLOP/s fp32 ceiling
    measured on a busy machine. Now the percentage says whose ceiling it is, and no verdict is drawn."""
    busy = ("before the run other processes kept 1.90 of 2 cores busy (> 0.25)",)
    ceil = _ceilings(measured_tflops=0.0042, busy=busy)
    r = judge(_case_row(), Work(2_000_000_000, 12_000_000), summarize([25.0, 25.1, 24.9, 25.0, 25.2], ST), ceil)
    assert r.pct_of_measured == pytest.approx(1905, rel=0.01)
    busy_flags = [f for f in r.flags if f.startswith(BUSY_CEILING)]
    assert len(busy_flags) == 1 and "busy machine" in busy_flags[0] and "1.90 of 2 cores" in busy_flags[0]
    assert not any(f.startswith("above the measured") for f in r.flags)  # a too-low ceiling: no verdict


def test_quiet_ceiling_gives_no_busy_flag():
    r = judge(_case_row(), WORK, summarize([4.0, 4.0, 4.02, 3.99, 4.0], ST), _ceilings())
    assert not any(f.startswith(BUSY_CEILING) for f in r.flags)


def test_busy_ceiling_skips_no_case_the_machine_could_run():
    """The busy 4.2 GFLOP/s ceiling skipped cases as '33 s per call'; the estimate decides instead."""
    from microbench.core.shapes import Case, GemmShape

    case = Case("gemm", GemmShape(4096, 4096, 4096), "fp32")
    work = Work(2 * 4096**3, 3 * 4096**2 * 4)
    busy = _ceilings(measured_tflops=0.0042, busy=("busy",), estimate_tflops=0.3)
    assert too_slow(case, work, busy, limit_s=10.0) is None
    quiet = _ceilings(measured_tflops=0.0042, estimate_tflops=0.3)
    assert "estimated 33 s per call at the measured fp32 ceiling" in too_slow(case, work, quiet, limit_s=10.0)


# ---- impossible numbers: flagged with the reason, kept out of ratios ----------------------------------------
def test_layer_above_the_estimated_peak_is_impossible():
    """decompose: a conv layer at 244 % of the measured ceiling and 148 % of the CPU estimate, status ok and
    no flag. Even at its slower steps it beats the estimate: flagged impossible, with why."""
    row = LayerRow(model="resnet9", layer="layer1.conv", phase="forward", module="Conv2d", dtype="fp32", device="cpu")
    est = 2.0 / 1.48  # TFLOP/s: the layer's 2 TFLOP/s is 148 % of it
    judge(row, WORK, summarize([1.0, 1.0, 1.0], ST), _ceilings(measured_tflops=2.0 / 2.44, estimate_tflops=est))
    assert row.pct_of_datasheet == pytest.approx(148, rel=0.01) and row.pct_of_ceiling == pytest.approx(244, rel=0.01)
    assert is_impossible(row) and not trusted(row)
    (flag,) = [f for f in row.flags if f.startswith(IMPOSSIBLE)]
    assert "148 % of the estimate fp32 peak" in flag and "over-counted" in flag
    assert any(f.startswith("above the measured compute roof (244 %") for f in row.flags)


def test_noisy_slow_repeats_are_not_called_impossible():
    # its fast repeats beat the estimate, its p80 does not: noise only slows repeats, so no verdict either way
    row = _case_row()
    judge(row, WORK, summarize([1.0] * 4 + [20.0] * 4 + [1.0], ST), _ceilings(estimate_tflops=1.5))
    assert not is_impossible(row) and row.flags[0].startswith(NOISY)


def test_impossible_row_gets_no_ratio():
    from microbench.report.roofline_report import baseline_ratios

    base = KernelCaseRow(op="gemm", shape="s", dtype="fp32", provider="torch", device="cpu", baseline=True)
    judge(base, WORK, summarize([4.0, 4.0, 4.01, 4.0, 3.99], ST), _ceilings(estimate_tflops=1.0))
    fast = KernelCaseRow(op="gemm", shape="s", dtype="fp32", provider="ours", device="cpu")
    judge(fast, WORK, summarize(STEADY, ST), _ceilings(estimate_tflops=1.0))  # 2 TFLOP/s on a 1 TFLOP/s chip
    assert is_impossible(fast)
    assert baseline_ratios([base, fast]) == {1: "flagged"}


# ---- every row kind -----------------------------------------------------------------------------------------
def test_collective_with_a_cov_of_155_percent_is_noisy():
    from microbench.comm.collectives import to_rows

    rec = {
        "op": "allreduce",
        "requested_bytes": 4096,
        "message_bytes": 4096,
        "elements": 1024,
        "nranks": 2,
        "samples_ms": [0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 5.0],
        "wrong": 0,
    }
    (row,) = to_rows([rec], "cpu", "gloo")
    assert isinstance(row, CollectiveRow) and row.time_ms["cov"] > 1.4
    assert any(f.startswith(NOISY) and "coefficient of variation" in f for f in row.flags)


def test_collective_that_agrees_is_not_noisy():
    from microbench.comm.collectives import to_rows

    rec = {
        "op": "allreduce",
        "requested_bytes": 4096,
        "message_bytes": 4096,
        "elements": 1024,
        "nranks": 2,
        "samples_ms": [0.1, 0.101, 0.099, 0.1, 0.1],
        "wrong": 0,
    }
    (row,) = to_rows([rec], "cpu", "gloo")
    assert row.flags == []


def test_tta_summary_over_seeds_that_disagree_is_noisy():
    from types import SimpleNamespace

    from microbench.tta.run import summary_row

    def run(tta_s):
        return SimpleNamespace(tta_s=tta_s, recipe=None, final_accuracy=0.95, new_test_accuracy=None)

    runs = [run(s) for s in (10.0, 10.5, 60.0, 61.0, 10.2)]
    summary = SimpleNamespace(reached=5, runs=5, as_dict=lambda: {})
    row = summary_row(summary, "m/d/top1>=0.9", "cpu", 0.9, runs, ST)
    assert isinstance(row, TimeToAccuracyRow) and any(f.startswith(NOISY) for f in row.flags)
    steady = summary_row(summary, "m/d/top1>=0.9", "cpu", 0.9, [run(10.0 + i / 10) for i in range(5)], ST)
    assert steady.flags == []


def test_pytest_benchmark_rows_carry_the_judges_flags_into_compare(tmp_path):
    """A pytest-benchmark JSON's extra_info flags (written by tests/test_benchmarks.py through the judge) keep a
    noisy or impossible case out of compare's ratios."""
    from microbench.report.compare import compare

    def bench(flags, median_s):
        return {
            "name": "t",
            "fullname": "t",
            "stats": {"median": median_s, "mean": median_s, "stddev": 0.0, "q1": median_s, "q3": median_s},
            "extra_info": {"op": "gemm", "shape": "8x8x8", "dtype": "fp32", "provider": "torch", "flags": flags},
        }

    files = []
    for name, flags in (("a", []), ("b", [IMPOSSIBLE + "faster than the chip"])):
        hw = {
            "name": f"m-{name}",
            "kind": "cpu",
            "arch": "x86_64",
            "units": 2,
            "clock_mhz": None,
            "memory_gib": 1.0,
            "isa_flags": [],
        }
        doc = {
            "machine_info": {"dawnscope": {"hardware": hw, "software": {"torch": "2", "triton": "3", "python": "3"}}},
            "benchmarks": [bench(flags, 0.001)],
        }
        (tmp_path / f"{name}.json").write_text(json.dumps(doc))
        files.append(tmp_path / f"{name}.json")
    (case,) = compare(files)["cases"]
    assert case["cells"]["m-b"]["ratio_to_baseline"] is None


# ---- one source of ceilings: cached per machine -------------------------------------------------------------
@pytest.fixture
def fake_search(monkeypatch, tmp_path):
    """measured_ceilings replaced by a counter (the search itself is tested in test_ceilings / test_trust)."""
    calls = []

    def measured(device, cfg, on_step=None, budget_s=None, shapes=(), dtypes=None):
        calls.append(shapes)
        return [Ceiling("measured fp32", COMPUTE, "fp32", 0.3, "TFLOP/s", "measured", "fake", (0.29, 0.31))], []

    monkeypatch.setattr(C, "measured_ceilings", measured)
    monkeypatch.setenv(C.CACHE_ENV, str(tmp_path / "cache"))
    return calls


def _quiet_look(monkeypatch, busy: bool):
    from microbench.core import conditions

    def stop(self):
        return {"busy": busy, "reasons": ["load average 5.00 before the run on 2 cores (> 1 per core)"] if busy else []}

    monkeypatch.setattr(conditions.Conditions, "start", lambda self: self)
    monkeypatch.setattr(conditions.Conditions, "stop", stop)


def test_ceilings_are_measured_once_then_read_from_the_cache(fake_search, monkeypatch, tmp_path, cfg):
    from microbench.core.device import cpu_device

    _quiet_look(monkeypatch, busy=False)
    dev = cpu_device()
    first = C.machine_ceilings(dev, cfg, busy_now=False)
    assert len(fake_search) == 1 and first.compute("fp32").value == 0.3
    files = list((tmp_path / "cache").glob("ceilings-cpu-*.json"))
    assert len(files) == 1 and not any(REPO in p.parents for p in files)
    doc = json.loads(files[0].read_text())
    assert doc["conditions"]["busy"] is False and doc["measured_at_s"] <= time.time()
    second = C.machine_ceilings(dev, cfg, busy_now=True)  # a quiet ceiling serves a busy run
    assert len(fake_search) == 1 and second.compute("fp32").value == 0.3
    assert any("from the cache" in n and "quiet machine" in n for n in second.notes)


def test_busy_ceiling_is_marked_and_measured_again_when_quiet(fake_search, monkeypatch, cfg):
    from microbench.core.device import cpu_device

    dev = cpu_device()
    _quiet_look(monkeypatch, busy=True)
    busy = C.machine_ceilings(dev, cfg, busy_now=True)
    assert busy.compute("fp32").busy and "load average 5.00" in busy.compute("fp32").busy[0]
    row = judge(_case_row(), WORK, summarize([10.0, 10.0, 10.1, 9.9, 10.0], ST), busy)
    assert any(f.startswith(BUSY_CEILING) for f in row.flags)
    C.machine_ceilings(dev, cfg, busy_now=True)  # still busy: the busy one is reused, marked
    assert len(fake_search) == 1
    _quiet_look(monkeypatch, busy=False)
    quiet = C.machine_ceilings(dev, cfg, busy_now=False)
    assert len(fake_search) == 2 and not quiet.compute("fp32").busy
    assert any("measured on a busy machine and it is quiet now" in n for n in quiet.notes)


def test_stale_or_missing_shapes_are_measured_again(fake_search, monkeypatch, cfg):
    from microbench.core.device import cpu_device
    from microbench.core.shapes import Case, GemmShape

    _quiet_look(monkeypatch, busy=False)
    dev = cpu_device()
    C.machine_ceilings(dev, cfg)
    entry = C.read_cache(next(C.cache_dir().glob("ceilings-*.json")))
    limit = cfg.ceilings["cpu"].max_age_h
    assert C.stale_reason(entry, [], limit, None) is None
    assert "old" in C.stale_reason(entry, [], limit, None, now_s=entry.measured_at_s + (limit + 1) * 3600)
    shapes = (Case("gemm", GemmShape(96, 80, 64), "fp32"),)
    C.machine_ceilings(dev, cfg, shapes=shapes)
    assert len(fake_search) == 2 and fake_search[-1] == shapes
    C.machine_ceilings(dev, cfg, shapes=shapes)
    assert len(fake_search) == 2


def test_a_broken_cache_file_is_measured_again(fake_search, monkeypatch, cfg):
    from microbench.core.device import cpu_device

    _quiet_look(monkeypatch, busy=False)
    dev = cpu_device()
    C.machine_ceilings(dev, cfg)
    path = next(C.cache_dir().glob("ceilings-*.json"))
    path.write_text("{not json")
    assert C.machine_ceilings(dev, cfg).compute("fp32").value == 0.3 and len(fake_search) == 2


# ---- comm scale never mixes machines --------------------------------------------------------------------------
def test_scale_refuses_this_cpus_step_time_for_a_v100_fabric(capsys):
    from microbench.comm import cli as comm

    assert comm.main(["scale", "--model", "resnet9", "--fabric", "v100_nvlink", "--workers", "1,8"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--step-ms" in err and "another machine" in err


def test_scale_table_says_where_the_step_time_came_from(capsys):
    from microbench.comm import cli as comm

    assert comm.main(["scale", "--step-ms", "100", "--gradient-bytes", "1000000", "--workers", "1,8"]) == 0
    assert "(--step-ms)" in capsys.readouterr().out.replace("\n", " ")


# ---- Nsight Compute exports said fully ------------------------------------------------------------------------
def test_ncu_export_names_its_device_and_places_kernels_by_its_dram_throughput(shared_dir, cfg):
    """The export has no device name, only the CC column: the device is named by its architecture (no product
    guessed, so no datasheet picked), and each kernel goes on the roofline by the export's own DRAM traffic."""
    from .conftest import analyze

    path = shared_dir / "nsight" / "copy_blocked.ncu.csv"
    if not path.is_file():
        pytest.skip(f"{path} is not here")
    doc = analyze(path, cfg)
    (dev,) = doc["devices"]
    assert dev["name"] == "NVIDIA Turing GPU, compute capability 7.5 (the export's CC column)"
    assert dev["compute_capability"] == "7.5" and dev["datasheet"]["entry"] is None  # not guessed as a T4
    (k,) = doc["kernels"]
    # Memory Workload Analysis: Memory Throughput 196,456,177,859.63 byte/s over the kernel's duration
    assert k["gbps"] == pytest.approx(196.456, rel=1e-3) and k["params"]["roofline_from"].startswith("the export's")


def test_a_row_above_a_noisy_measured_roof_is_flagged_not_shown_as_ok():
    """A measured roof whose repeats disagree gives no verdict, but a row at twice it is never shown unflagged
    (rows at 154 - 229 % of a cached ceiling were printed with no flag)."""
    from dataclasses import replace

    noisy = Ceilings([replace(c, noise=("its repeats' CoV 12 % > 5 %",)) for c in _ceilings(1.0).items])
    row = judge(_case_row(), WORK, summarize(STEADY, ST), noisy)  # 2 TFLOP/s against a 1 TFLOP/s roof
    assert row.pct_of_ceiling == pytest.approx(200, rel=0.02)
    assert any("whose own repeats disagree" in f for f in row.flags)
    steady = judge(_case_row(), Work(500_000_000, 3_000_000), summarize(STEADY, ST), noisy)  # 0.5 TFLOP/s: below
    assert not any("roof" in f for f in steady.flags)


def test_the_cache_key_holds_the_thread_count_and_a_noisy_entry_is_not_called_quiet(
    fake_search, monkeypatch, tmp_path, cfg
):
    """Ceilings measured with 1 thread are another cache entry than those a 2-thread run needs; an entry whose
    ceilings are noisy is not said to be from 'a quiet machine' alone."""
    import torch

    from microbench.core.device import cpu_device

    _quiet_look(monkeypatch, busy=False)
    dev = cpu_device()
    before = torch.get_num_threads()
    try:
        keys = []
        for n in (1, 2):
            torch.set_num_threads(n)
            keys.append(C.cache_key(dev, cfg))
            C.machine_ceilings(dev, cfg, busy_now=False)
        assert keys[0][0] != keys[1][0] and (keys[0][1]["threads"], keys[1][1]["threads"]) == (1, 2)
        assert len(fake_search) == 2  # the 1-thread entry did not serve the 2-thread run
    finally:
        torch.set_num_threads(before)
    entry = C.read_cache(next(C.cache_dir().glob("ceilings-*.json")))
    assert entry.conditions_phrase == "on a quiet machine"
    entry.items = [Ceiling("measured fp32", COMPUTE, "fp32", 0.3, "TFLOP/s", "measured", noise=("CoV 12 %",))]
    assert entry.conditions_phrase == "on a quiet machine, but the repeats of 1 of them disagree (noisy)"
