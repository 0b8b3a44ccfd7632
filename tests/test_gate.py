"""`dawnscope gate`: real pairs of captures. Two runs of one roofline profile (no regression), a run with the torch
GEMM provider made slower on purpose (a regression, in the table, the JSON and the JUnit XML), traces of two chips
and results of two machines (refused), a trace with its GEMMs stretched (a regression), another workload's shapes
(refused), kept baselines, and bad input in one line.

The runs are timed on this (shared, 2-core) CI machine, where the tiny profile's 30-100 us operations differ
between two runs of one build by up to 2.2x with tight spreads (measured while another test suite ran beside them:
the two threads of a small torch op are scheduled against other work); so the pairs of runs are gated with
--max-slowdown 300% and --allow-busy (CI's machine runs another environment beside the tests), and the slowed
provider sleeps 5 ms a call, a hundred times what its tiny GEMMs take. The default floor (5 %) is checked on
pytest-benchmark files whose spreads are known."""

from __future__ import annotations

import dataclasses
import gzip
import json
import time
import xml.etree.ElementTree as ET

import pytest

from microbench.gate.cli import main as gate_main
from microbench.gate.gate import Limits, gate
from microbench.roofline import registry
from microbench.roofline.cli import main as roofline_main

from .conftest import TINY_PROFILE, TRACES

SLEEP_S = 0.005


@pytest.fixture(scope="module")
def runs(tmp_path_factory, cfg):
    """Two runs of the tiny profile, and a third with the torch GEMM provider sleeping SLEEP_S before each call."""
    root = tmp_path_factory.mktemp("gate")
    config = root / "bench.toml"
    tol = "\n".join(f"{k} = {v!r}" for k, v in cfg.tolerance.items())
    config.write_text(TINY_PROFILE + "\n[tolerance]\n" + tol + "\n")
    argv = ["--config", str(config), "--profile", "tiny", "--device", "cpu", "--no-plot", "--out"]
    for name in ("a", "b"):
        assert roofline_main(argv + [str(root / name)]) == 0
    torch_gemm = registry.get("gemm", "torch")

    def slower(a, b, *, allow_tf32=False):
        time.sleep(SLEEP_S)
        return torch_gemm.fn(a, b, allow_tf32=allow_tf32)

    with registry.scoped():
        registry._REGISTRY[("gemm", "torch")] = dataclasses.replace(torch_gemm, fn=slower)
        assert roofline_main(argv + [str(root / "slow")]) == 0
    assert registry.get("gemm", "torch").fn is torch_gemm.fn
    return root


def test_two_runs_of_one_build_pass(runs, tmp_path, capsys):
    out = tmp_path / "gate.json"
    code = gate_main([str(runs / "a"), str(runs / "b"), "--max-slowdown", "300%", "--allow-busy", "--json", str(out)])
    doc = json.loads(out.read_text())
    assert code == 0 and doc["verdict"] == "pass" and doc["incomparable"] == [] and doc["regressions"] == 0
    assert len(doc["rows"]) == 11 and {r["metric"] for r in doc["rows"]} == {"case"}
    assert "no regression beyond the noise floor (exit 0)" in capsys.readouterr().out


def test_a_provider_made_slower_is_a_regression(runs, tmp_path, capsys):
    out, xml = tmp_path / "gate.json", tmp_path / "gate.xml"
    code = gate_main(
        [
            str(runs / "a"),
            str(runs / "slow"),
            "--max-slowdown",
            "300%",
            "--allow-busy",
            "--json",
            str(out),
            "--junit",
            str(xml),
        ]
    )
    doc = json.loads(out.read_text())
    slower = sorted(r["name"] for r in doc["rows"] if r["verdict"] == "slower")
    # every GEMM row of the torch provider, and nothing else
    assert code == 1 and doc["verdict"] == "regression"
    assert slower == sorted(
        r["name"] for r in doc["rows"] if r["name"].startswith("gemm") and r["name"].endswith("torch")
    )
    assert len(slower) == 4 and all(r["change"] > 10 for r in doc["rows"] if r["verdict"] == "slower")
    assert "regression (exit 1)" in capsys.readouterr().out
    suite = ET.parse(xml).getroot()
    failed = [c.get("name") for c in suite.iter("testcase") if c.find("failure") is not None]
    assert sorted(failed) == slower and suite.get("failures") == "4" and suite.get("errors") == "0"


def test_results_of_another_machine_or_software_are_refused(runs, tmp_path):
    doc = json.loads((runs / "b" / "results.json").read_text())
    other = tmp_path / "other.json"
    other.write_text(json.dumps(doc | {"hardware": doc["hardware"] | {"name": "Another CPU"}}))
    assert gate_main([str(runs / "a"), str(other)]) == 2
    got = gate(runs / "a", other, allow_busy=True)
    assert got["verdict"] == "incomparable" and [i["what"] for i in got["incomparable"]] == ["device"]
    newer = tmp_path / "newer.json"
    newer.write_text(json.dumps(doc | {"software": doc["software"] | {"torch": "9.9.9"}}))
    assert [i["what"] for i in gate(runs / "a", newer, allow_busy=True)["incomparable"]] == ["software"]
    busy = tmp_path / "busy.json"
    reasons = ["before the run other processes kept 1.01 of 2 cores busy (> 0.25)"]
    busy.write_text(
        json.dumps(doc | {"conditions": (doc.get("conditions") or {}) | {"busy": True, "reasons": reasons}})
    )
    (line,) = [i for i in gate(runs / "a", busy)["incomparable"] if i["detail"].startswith("the current run")]
    assert line["detail"].startswith("the current run was measured on a busy machine (before the run other")
    allowed = gate(runs / "a", newer, Limits(3.0), allow_software=True, allow_busy=True)
    assert allowed["incomparable"] == [] and allowed["exit_code"] == 0


def test_traces_of_two_chips_are_refused(capsys):
    code = gate_main([str(TRACES / "h100_bert_small.json.gz"), str(TRACES / "mi300_bert_small.json.gz")])
    out = capsys.readouterr().out
    assert code == 2 and "cannot compare (device)" in out and "(exit 2)" in out


def test_a_trace_against_itself_passes_and_stretched_gemms_fail(tmp_path):
    path = TRACES / "h100_bert_small.json.gz"
    same = gate(path, path)
    assert same["verdict"] == "pass" and {r["verdict"] for r in same["rows"]} == {"unchanged"}
    assert {r["metric"] for r in same["rows"]} >= {"step", "class", "op", "tensor_core_share"}
    with gzip.open(path, "rt") as f:
        trace = json.load(f)
    for e in trace["traceEvents"]:  # every cuBLAS (xmma) and CUTLASS GEMM 30 % longer
        if e.get("cat") == "kernel" and ("xmma_gemm" in e["name"] or "cutlass_80" in e["name"]):
            e["dur"] *= 1.3
    slow = tmp_path / "slow.json"
    slow.write_text(json.dumps(trace))
    doc = gate(path, slow)
    assert doc["exit_code"] == 1
    (tc,) = [r for r in doc["rows"] if r["metric"] == "class" and r["name"] == "tc_gemm"]
    assert tc["verdict"] == "slower" and 0.1 < tc["change"] < 0.3
    assert all(r["verdict"] != "slower" for r in doc["rows"] if r["metric"] == "class" and r["name"] != "tc_gemm")


def test_another_workload_s_shapes_are_refused(tmp_path):
    from .conftest import analyze_with_findings

    report = analyze_with_findings(TRACES / "h100_bert_small.json.gz")
    base, other = tmp_path / "base.json", tmp_path / "other.json"
    base.write_text(json.dumps(report))
    bigger = [o | {"shape": str(o["shape"]).replace("141", "282")} for o in report["ops"]]  # another sequence length
    other.write_text(json.dumps(report | {"ops": bigger}))
    doc = gate(base, other)
    assert doc["verdict"] == "incomparable" and [i["what"] for i in doc["incomparable"]] == ["shapes"]
    assert gate(base, base)["verdict"] == "pass"


def _benchmark_json(path, median_s: float) -> None:
    """A pytest-benchmark --benchmark-json file (its keys as pytest-benchmark 4 writes them) of one benchmark."""
    stats = {"median": median_s, "mean": median_s, "stddev": median_s * 0.01, "q1": median_s * 0.99,
             "q3": median_s * 1.01, "rounds": 20}  # fmt: skip
    path.write_text(
        json.dumps(
            {
                "machine_info": {"node": "ci", "processor": "x86_64", "python_version": "3.11.7", "cpu": {}},
                "benchmarks": [{"name": "test_step", "fullname": "tests/test_x.py::test_step", "stats": stats}],
            }
        )
    )


def test_pytest_benchmark_files_and_kept_baselines(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    main_run, pr_ok, pr_slow = tmp_path / "main.json", tmp_path / "ok.json", tmp_path / "slow.json"
    _benchmark_json(main_run, 0.010)
    _benchmark_json(pr_ok, 0.0101)
    _benchmark_json(pr_slow, 0.013)
    assert gate_main([str(main_run), "--save-baseline", "main"]) == 0
    kept = tmp_path / ".dawnscope" / "baselines" / "main"
    meta = json.loads((kept / "baseline.json").read_text())
    assert meta["file"] == "main.json" and len(meta["sha256"]) == 64 and "python 3.11.7" in meta["fingerprint"]
    assert gate_main(["--against", "main", str(pr_ok)]) == 0
    assert gate_main(["--against", "main", str(pr_slow), "--save-baseline", "main"]) == 1
    assert json.loads((kept / "baseline.json").read_text())["sha256"] == meta["sha256"]  # a regression is not kept
    capsys.readouterr()
    (kept / "main.json").write_text("{}")
    assert gate_main(["--against", "main", str(pr_ok)]) == 2
    assert "changed since it was saved" in capsys.readouterr().err
    assert gate_main(["--against", "nightly", str(pr_ok)]) == 2
    assert "no baseline named 'nightly' (the store holds: main" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv, says",
    [
        (["missing.json", "missing2.json"], "missing.json"),
        (["{main}", "{main}", "--max-slowdown", "fast"], "--max-slowdown"),
        (["{main}", str(TRACES / "h100_bert_small.json.gz")], "gate traces with traces, results with results"),
        (["{main}"], "give a baseline and a current capture"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, argv, says):
    main_run = tmp_path / "main.json"
    _benchmark_json(main_run, 0.01)
    assert gate_main([a.replace("{main}", str(main_run)) for a in argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and says in err
