"""`dawnscope verify`: each finding whose fix can be applied here, checked against the saving the fix really brings
(alternating blocks in separate processes, an A/A pair for the noise). The verdict rules are checked on numbers; the
whole command once, on the GEMM-dominated MLP of the findings' checks (tests/findings_models.py), on this CPU."""

from __future__ import annotations

import json

import pytest

from microbench.core.device import cpu_device
from microbench.verify.fixes import plan
from microbench.verify.pair import Setting
from microbench.verify.verify import could_tell, decidable


@pytest.mark.parametrize(
    "low, high, measured, spread, tells",
    [
        (10.0, 30.0, 20.0, 5.0, True),  # inside, and inside whatever the noise
        (10.0, 30.0, 12.0, 5.0, False),  # inside, but the noise reaches past the low edge
        (10.0, 30.0, 2.0, 5.0, True),  # outside, and outside whatever the noise
        (10.0, 30.0, 40.0, 5.0, True),
        (10.0, 30.0, 33.0, 5.0, False),
    ],
)
def test_a_verdict_is_decidable_only_beyond_the_noise(low, high, measured, spread, tells):
    assert decidable(low, high, measured, spread) is tells


def test_processes_that_disagree_cannot_tell():
    """The noise of a check is the larger of the A/A spread and half its own processes' spread. ResNet-9's amp check
    on this CPU: processes saved 5.5 and 12.9 ms against a range from 11.1 ms (A/A 232 us): cannot tell; the MLP's:
    8.6 - 10.2 ms, median 8.7, in 6.8 - 10.2 ms (A/A 372 us): held."""
    assert not could_tell(11_106, 30_246, 9_195, [5_462, 12_927], 232)
    assert could_tell(6_831, 10_233, 8_671, [10_166, 8_671, 8_608], 372)
    assert not could_tell(6_831, 10_233, 8_671, [10_166, 8_671, 8_608], 1_600)  # a noisier A/A: cannot tell


def test_the_fix_of_each_finding_on_a_cpu():
    base, cpu = Setting("tests.findings_models:matmul_mlp"), cpu_device()
    assert plan({"id": "amp"}, base, cpu).after.dtype == "bf16"
    assert plan({"id": "channels_last"}, base, cpu).after.channels_last is True
    # a finding that does not state its fix's settings: data/verify.toml's workers, the threads left as they are
    generic = plan({"id": "dataloader"}, base, cpu).after
    assert (generic.workers, generic.threads) == (2, None)
    tf32 = plan({"id": "tf32"}, base, cpu)
    assert tf32.after is None and tf32.why_not == "TF32 is a GPU Tensor Core format (cpu)"
    assert plan({"id": "sync"}, base, cpu).why_not.startswith("removing a host synchronization")
    already = plan({"id": "amp"}, Setting(base.spec, "bf16"), cpu)
    assert already.after is None and already.why_not == "the model already runs with this fix"


def test_the_dataloader_fix_verify_applies_is_the_one_the_finding_printed():
    """Two workers were applied where the CPU finding said one worker (and, beside a step on every core, one thread
    fewer): the first three dataloader checks measured another fix than the one printed."""
    base, cpu = Setting("tests.findings_models:digits_loader"), cpu_device()
    finding = {"id": "dataloader", "fix": "DataLoader(num_workers=1, persistent_workers=True); torch.set_num_threads(1)",
               "fix_setting": {"workers": 1, "threads": 1}}  # fmt: skip
    applied = plan(finding, base, cpu)
    assert (applied.after.workers, applied.after.threads) == (1, 1) and applied.fix == finding["fix"]
    # a finding under the threshold without its fix's words: the data file's, never None (a None cell broke the
    # terminal table after a run had measured everything)
    unworded = plan({"id": "dataloader", "fix_setting": {"workers": 1, "threads": 1}}, base, cpu)
    assert unworded.fix == "DataLoader(num_workers=N, persistent_workers=True)" and unworded.after.workers == 1
    one_thread = plan(finding | {"fix_setting": {"workers": 1, "threads": None}}, base, cpu).after
    assert (one_thread.workers, one_thread.threads) == (1, None)


@pytest.mark.slow
def test_verify_a_model_s_amp_finding(tmp_path, capsys):
    from microbench.verify.cli import main

    out = tmp_path / "verify.json"
    # no --batch: the model's own, as decompose chooses it (the pair processes were given None once)
    argv = ["--model", "tests.findings_models:matmul_mlp", "--fixes", "amp", "--processes", "2",
            "--blocks", "4", "--steps", "2", "--json", str(out), "--html", str(tmp_path / "verify.html")]  # fmt: skip
    assert main(argv) == 0
    doc = json.loads(out.read_text())
    assert doc["schema"] == "dawnscope.verify/1" and doc["device"] and doc["conditions"]
    assert isinstance(doc["batch"], int) and doc["batch"] > 0
    (c,) = doc["checks"]
    assert c["finding"] == "amp" and c["after"] == {"dtype": "bf16"}
    assert set(c) >= {"finding", "fix", "predicted", "measured_us", "aa_spread_us", "held", "decidable"}
    p, m = c["predicted"], c["measured_us"]
    assert p["low"] <= p["expected"] <= p["high"] and m["low"] <= m["median"] <= m["high"]
    assert len(m["processes"]) == 2 and c["aa_spread_us"] >= 0
    assert c["held"] == (p["low"] <= m["median"] <= p["high"])
    assert doc["decidable"] == int(c["decidable"]) and doc["held"] == int(c["held"] and c["decidable"])
    assert "decidable checks held" in capsys.readouterr().out
    assert "<svg" in (tmp_path / "verify.html").read_text()


def test_the_findings_table_is_generated_from_the_kept_verify_files():
    """docs/findings.md's "Checked by verify" table is scripts/verify-table's output over docs/verify/*.json (the
    checks' documents, with the machine's fingerprint), not written by hand."""
    from microbench.report.verify_report import TABLE_BEGIN, TABLE_END

    from .conftest import REPO, load_script

    kept = sorted((REPO / "docs" / "verify").glob("*.json"))
    assert kept, "no verify --json file kept in docs/verify"
    for path in kept:  # a run its own conditions called busy is not kept: its saving is another process's too
        assert not json.loads(path.read_text())["conditions"]["busy"], path.name
    section = (REPO / "docs" / "findings.md").read_text().split(TABLE_BEGIN, 1)[1].split(TABLE_END, 1)[0]
    assert section.strip() == load_script("verify-table").table().strip()


def test_the_shipped_ranges_are_derived_from_the_kept_checks_by_the_documented_method():
    """data/calibration.toml's derived part is scripts/derive-ranges' output over docs/verify/*.json: no band is
    written by hand, and each one names the files it was drawn from, none of them a held-out workload's."""
    import tomllib

    from microbench.verify.calibrate import held_out

    from .conftest import REPO, load_script

    script = load_script("derive-ranges")
    data = tomllib.loads(script.DATA.read_text())
    docs = script.kept()
    derived = script.with_held_out_tally(docs, data, script.derive(docs, data))
    assert script.rewrite(script.DATA.read_text(), derived) == script.DATA.read_text()
    models = {name: doc["model"] for name, doc in script.kept()}
    for kinds in data.get("derived", {}).values():
        for e in kinds.values():
            assert e["below"] <= 0 <= e["above"] and e["checks"] >= 1
            assert 0 <= e["held_out_held"] <= e["held_out_decidable"] <= e["held_out_checks"]
            assert all(not held_out(models[n], data) for n in e["from"]), e["from"]
    assert (REPO / "docs" / "verify").is_dir()


def _doc(model: str, checks: list[dict], kind: str = "cpu") -> dict:
    return {"model": model, "batch": 8, "step_time_us": 1e6, "fingerprint": {"kind": kind}, "checks": checks}


def _check(finding: str, expected: float, median: float, noise: float = 0.0, time_us: float | None = None) -> dict:
    return {
        "finding": finding,
        "predicted": {"low": expected * 0.8, "expected": expected, "high": expected * 1.1},
        "time_us": time_us,
        "measured_us": {"median": median, "low": median, "high": median, "processes": [median, median]},
        "aa_spread_us": noise,
    }


DATA = {
    "method": {"held_out": ["kb."]},
    "scales": {"amp": "expected", "dataloader": "time"},
}


def test_a_band_is_the_furthest_informative_misses_of_the_workloads_not_held_out():
    """Step 3: q = (measured - expected) / scale over informative checks (noise under the scale); a held-out
    workload's and a noisy check's misses are not used; a rule without a scale is not derived."""
    from microbench.verify.calibrate import derive

    docs = [
        ("a.json", _doc("m1", [_check("amp", 1000.0, 500.0), _check("dataloader", 0.0, -1500.0, 100.0, 3000.0)])),
        ("b.json", _doc("m2", [_check("amp", 2000.0, 2400.0, noise=100.0), _check("sync", 10.0, 1.0)])),
        ("c.json", _doc("m3", [_check("amp", 1000.0, 5000.0, noise=1500.0)])),  # noisier than its saving
        ("d.json", _doc("kb.x", [_check("amp", 1000.0, 9000.0)])),  # held out
    ]
    got = derive(docs, DATA)
    assert got["amp"]["cpu"] == {"below": -0.5, "above": 0.2, "checks": 2, "workloads": 2, "from": ["a.json", "b.json"]}
    assert got["dataloader"]["cpu"] | {"from": None} == {
        "below": -0.5, "above": 0.0, "checks": 1, "workloads": 1, "from": None
    }  # fmt: skip
    assert "sync" not in got


def test_a_finding_s_range_is_widened_to_the_band_never_narrowed_and_floored_by_its_rule():
    from microbench.findings.calibration import widened

    data = DATA | {"derived": {"amp": {"cpu": {"below": -0.5, "above": 0.2, "checks": 2, "workloads": 2}},
                               "dataloader": {"cpu": {"below": -0.5, "above": 0.0, "checks": 1, "workloads": 1}}}}  # fmt: skip
    rng, how = widened("amp", "cpu", {"low": 800.0, "expected": 1000.0, "high": 1100.0}, None, data)
    assert rng == {"low": 500.0, "expected": 1000.0, "high": 1200.0} and how["checks"] == 2
    wide = {"low": 100.0, "expected": 1000.0, "high": 3000.0}
    assert widened("amp", "cpu", wide, None, data)[0] == wide  # the model's wider range is kept
    assert widened("amp", "gpu", wide, None, data) == (wide, None)  # no checks on a GPU: the model's range
    # amp never costs (floor 0); the CPU dataloader rule may (findings.toml may_slow_on): its band goes below 0
    assert widened("amp", "cpu", {"low": 10.0, "expected": 100.0, "high": 100.0}, None, data | {
        "derived": {"amp": {"cpu": {"below": -3.0, "above": 0.0, "checks": 1, "workloads": 1}}}})[0]["low"] == 0.0  # fmt: skip
    loader, _ = widened("dataloader", "cpu", {"low": 0.0, "expected": 200.0, "high": 600.0}, 2000.0, data)
    assert loader == {"low": -800.0, "expected": 200.0, "high": 600.0}


def test_kept_checks_are_judged_against_the_range_their_finding_has_now():
    """A held-out check is judged against the band derived from the others: the summary counts both sets apart,
    and the median width of the ranges over their expected saving."""
    from microbench.verify.calibrate import derive, judged, summary

    docs = [
        ("a.json", _doc("m1", [_check("amp", 1000.0, 500.0)])),
        ("d.json", _doc("kb.x", [_check("amp", 1000.0, 600.0, noise=10.0)])),
    ]
    data = DATA | {"derived": derive(docs, DATA)}
    rows = judged(docs, data)
    assert [r["range"] for r in rows] == [{"low": 500.0, "expected": 1000.0, "high": 1100.0}] * 2
    # the derivation's own check sits on the edge drawn through it (in-sample); the held-out one is inside, clear of
    # the edges by more than its noise
    assert [(r["held_out"], r["held"], r["decidable"]) for r in rows] == [(False, True, True), (True, True, True)]
    s = summary(rows)
    # under the model's own range (800 - 1,100) both missed: what the widening bought is counted apart
    one = {"checks": 1, "workloads": 1, "decidable": 1, "held": 1, "model_decidable": 1, "model_held": 0}
    assert s["held_out"] == one and s["derivation"] == one
    assert s["median_width_over_expected"] == pytest.approx(0.6)


def test_the_html_page_draws_every_check_and_says_what_was_widened(tmp_path):
    """verify --html: one self-contained page (no address, no script) with every check's row, its verdict, the
    model's own range where calibration widened it, and the fixes not applied."""
    from microbench.report.verify_html import verify_page

    from .conftest import REPO

    doc = json.loads((REPO / "docs" / "verify" / "small_cifar_loader_one_thread.json").read_text())
    doc["model"] = "pkg.<model>:make"  # escaped, as every string of the document
    c = doc["checks"][0]
    c["predicted_model"] = dict(c["predicted"])
    c["predicted"] = c["predicted"] | {"low": 0.0}
    page = verify_page(doc)
    assert "pkg.&lt;model&gt;:make" in page and "<model>" not in page
    assert page.count("<svg") == 1 and "<script" not in page and "http" not in page.replace("http-equiv", "")
    for check in doc["checks"]:
        assert f"<td>{check['finding']}</td>" in page
    assert f"* {c['finding']}: the model&#x27;s own range" in page and page.count("own range") == 1
    assert "Not applied" in page and "channels_last" in page
    assert f"{doc['held']} of {doc['decidable']} decidable checks held" in page


def test_one_setting_is_timed_alone_in_a_child_process():
    """The child of a process pair builds and times one step (blocks of steps), nothing beside it."""
    from microbench.verify.pair import run_in_process

    doc = run_in_process(Setting("tests.findings_models:matmul_mlp"), None, 4, 2, 1, "cpu")
    assert len(doc["before"]["block_ms"]) == 2 and "after" not in doc and all(t > 0 for t in doc["before"]["block_ms"])


def test_a_fix_that_acts_from_a_process_start_is_timed_in_pairs_of_fresh_processes(monkeypatch):
    """glibc's malloc thresholds are read at start-up: the allocator fix cannot alternate with its absence in one
    process. Each pair is two fresh processes of the same setting, one with the fix in its environment, the order
    turned every pair; the saving is the difference of their median steps."""
    from microbench.decompose import allocator
    from microbench.verify import pair

    calls = []

    def fake(before, after, batch, blocks, steps, device="cpu", env=None, timeout_s=0.0):
        assert after is None  # one step built in each process: a second would share the heap the fix changes
        calls.append(dict(env or {}))
        ms = 10.0 if env else 12.0  # the fix saves 2 ms a step
        return {"before": {"block_ms": [ms, ms + 1, ms - 1]}}

    monkeypatch.setattr(pair, "run_in_process", fake)
    s, fix = Setting("tests.findings_models:matmul_mlp"), {"MALLOC_TOP_PAD_": "1"}
    runs = pair.process_pairs(s, fix, 8, 2, 1, "cpu", 3)
    assert calls == [{}, fix, fix, {}, {}, fix]
    assert [r["saving_us"]["median"] for r in runs] == [pytest.approx(2000.0)] * 3
    p = plan({"id": "allocator"}, s, cpu_device())
    assert p.after == s and p.env == allocator.fixed_env() and set(p.env) >= {"MALLOC_MMAP_THRESHOLD_"}


def test_a_rule_name_verify_does_not_know_is_refused_before_any_measurement(monkeypatch):
    from microbench.core.errors import InputError
    from microbench.verify import verify as V

    def never(*a, **k):
        raise AssertionError("decomposed before the --fixes were checked")

    monkeypatch.setattr(V, "run_decomposition", never)
    with pytest.raises(InputError) as e:
        V.verify("tests.findings_models:matmul_mlp", V.VerifyOptions(fixes=("alocator",)))
    assert "no such rule" in str(e.value) and "alocator" in str(e.value) and "allocator" in str(e.value)


class _Gpu:
    """What plan() reads of a device: a GPU, for the fixes a CPU cannot run (their plans are what a CPU can test)."""

    kind, is_gpu, name = "cuda", True, "a GPU"


def test_the_gpu_fixes_verify_applies_where_a_gpu_is_lent():
    """launch_bound: torch.compile(mode='reduce-overhead') (CUDA graphs); pageable_copy and dataloader: pinned
    batches; on a CPU the launch-bound fix is said not to apply, with why."""
    base = Setting("tests.findings_models:digits_loader")
    assert plan({"id": "launch_bound"}, base, _Gpu()).after.compile_mode == "reduce-overhead"
    assert plan({"id": "pageable_copy"}, base, _Gpu()).after.pin_memory is True
    loader = plan({"id": "dataloader"}, base, _Gpu()).after
    assert (loader.workers, loader.pin_memory) == (2, True)
    assert plan({"id": "dataloader"}, base, cpu_device()).after.pin_memory is None  # nothing to pin for on a CPU
    on_cpu = plan({"id": "launch_bound"}, base, cpu_device())
    assert on_cpu.after is None and on_cpu.why_not.startswith("CUDA graphs replay a GPU's launches")


def test_a_compiled_side_is_warmed_before_its_blocks(monkeypatch):
    """The compiled model replaces the step's, and COMPILE_WARM_STEPS untimed steps compile it and record its
    graphs before any block is timed (torch.compile recorded here: a CPU compile is not what is checked)."""
    import torch

    from microbench.verify import pair

    modes, calls = [], []

    def fake_compile(model, mode=None):
        modes.append(mode)

        def compiled(*args):
            calls.append(1)
            return model(*args)

        return compiled

    monkeypatch.setattr(torch, "compile", fake_compile)
    side = pair.build_side(Setting("tests.findings_models:matmul_mlp", compile_mode="reduce-overhead"), 4, cpu_device())
    assert modes == ["reduce-overhead"] and len(calls) == pair.COMPILE_WARM_STEPS
    assert side.step.model.__name__ == "compiled"  # the step runs the compiled model


@pytest.mark.filterwarnings("ignore:'pin_memory' argument is set as true but no accelerator:UserWarning")
def test_pinning_a_loader_copies_it_with_its_own_workers():
    from microbench.models.step import TrainingStep

    from .findings_models import digits_loader

    step = TrainingStep(digits_loader(), 4, "cpu", pin_memory=True)
    assert step.loader.pin_memory is True and step.loader.num_workers == 0


def test_a_fix_that_fails_to_apply_is_said_and_the_other_checks_are_kept(monkeypatch):
    """A pair process that fails (here the channels_last side) costs that check only, with the one line why."""
    from microbench.core.errors import InputError
    from microbench.verify import verify as V

    doc = {
        "findings": [
            {"id": "amp", "saving_us": {"low": 1.0, "expected": 2.0, "high": 3.0}, "fix": "autocast"},
            {"id": "channels_last", "saving_us": {"low": 1.0, "expected": 2.0, "high": 3.0}, "fix": "NHWC"},
        ],
        "findings_step_time_us": 10.0,
    }

    class D:
        dev, batch = cpu_device(), 4

    def pair_(before, after, batch, opts, dev):
        if after.channels_last:
            raise InputError(None, "a pair process failed: no 4-D input", key="verify")
        return {"saving_us": {"median": 2.0, "q1": 1.5, "q3": 2.5}}

    monkeypatch.setattr(V, "run_decomposition", lambda *a, **k: D())
    monkeypatch.setattr(V, "with_decomposition_findings", lambda d: doc)
    monkeypatch.setattr(V, "_pair", pair_)
    out = V.verify("tests.findings_models:matmul_mlp", V.VerifyOptions(processes=1, blocks=2, steps=1), progress=str)
    assert [c["finding"] for c in out["checks"]] == ["amp"]
    (failed,) = [n for n in out["not_applied"] if n["finding"] == "channels_last"]
    assert failed["why"].startswith("applying it failed: ") and "no 4-D input" in failed["why"]
