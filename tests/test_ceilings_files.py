"""Measured ceilings read from a file (`trace --ceilings`, `predict --ceilings` / `--source-ceilings`): only the
ceilings of the machine being judged, and only those their own run did not judge noisy."""

from __future__ import annotations

import json

import pytest

from microbench.core.config import load_config
from microbench.core.datasheet import ceilings_file
from microbench.core.errors import InputError
from microbench.predict import cli as predict
from microbench.trace import cli as trace

from .conftest import TRACES

H100_TRACE = "h100_bert_small.json.gz"


def _results(tmp_path, name: str, noise=()) -> str:
    doc = {
        "hardware": {"name": name},
        "ceilings": [
            {
                "name": "measured bf16",
                "kind": "compute",
                "dtype": "bf16",
                "value": 700.0,
                "source": "measured",
                "noise": list(noise),
            },
            {
                "name": "measured copy",
                "kind": "memory",
                "dtype": None,
                "value": 3000.0,
                "source": "measured",
                "noise": [],
            },
        ],
    }
    path = tmp_path / f"{name.split()[-1]}.json"
    path.write_text(json.dumps(doc))
    return str(path)


def test_same_machine_by_datasheet_entry(tmp_path):
    devices = load_config(None).devices
    rates, memory = ceilings_file(_results(tmp_path, "NVIDIA H100 80GB HBM3"), "NVIDIA H100 SXM5", devices)
    assert rates == {"bf16": 700.0} and memory == pytest.approx(3.0)


@pytest.mark.parametrize("machine", ["Intel(R) Xeon(R) Processor", "AMD Instinct MI300X"])
def test_another_machines_ceilings_are_refused(tmp_path, machine):
    with pytest.raises(InputError, match="ceilings measured on .*, not on 'NVIDIA H100 80GB HBM3'"):
        ceilings_file(_results(tmp_path, machine), "NVIDIA H100 80GB HBM3", load_config(None).devices)


def test_noisy_ceilings_are_not_used(tmp_path):
    with pytest.raises(InputError, match="1 noisy"):
        ceilings_file(_results(tmp_path, "NVIDIA H100 80GB HBM3", noise=["coefficient of variation 120% > 30%"]))


def test_trace_refuses_a_cpus_ceilings_for_a_gpu_trace(shared_dir, tmp_path, capsys):
    cpu = _results(tmp_path, "Intel(R) Xeon(R) Processor")
    assert trace.main([str(shared_dir / "traces" / H100_TRACE), "--ceilings", cpu]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "not on 'NVIDIA H100 80GB HBM3'" in err
    assert (
        trace.main([str(shared_dir / "traces" / H100_TRACE), "--ceilings", _results(tmp_path, "NVIDIA H100 80GB HBM3")])
        == 0
    )


def test_predict_checks_target_and_source_ceilings(shared_dir, tmp_path, capsys):
    src = str(shared_dir / "traces" / H100_TRACE)
    assert predict.main([src, "--on", "MI300X", "--ceilings", _results(tmp_path, "Intel(R) Xeon(R) Processor")]) == 2
    assert "not on 'AMD Instinct MI300X'" in capsys.readouterr().err
    assert (
        predict.main(
            [src, "--on", "MI300X", "--source", "H100", "--source-ceilings", _results(tmp_path, "AMD Instinct MI300X")]
        )
        == 2
    )
    assert predict.main([src, "--on", "MI300X", "--ceilings", _results(tmp_path, "AMD Instinct MI300X")]) == 0


def _cache(tmp_path, name: str, busy=()) -> str:
    """A ceilings cache file as microbench/roofline/ceilings.py writes it (schema, key, items)."""
    item = {"name": "measured bf16", "kind": "compute", "dtype": "bf16", "value": 650.0, "source": "measured",
            "noise": [], "busy": list(busy)}  # fmt: skip
    copy = {"name": "measured copy", "kind": "memory", "dtype": None, "value": 2900.0, "source": "measured",
            "noise": [], "busy": list(busy)}  # fmt: skip
    doc = {"schema": "dawnscope.ceilings-cache/1", "key": {"machine": {"kind": "cuda", "name": name}, "threads": 1},
           "conditions": {"busy": bool(busy), "reasons": list(busy)}, "items": [item, copy]}  # fmt: skip
    path = tmp_path / "ceilings-cuda-0123456789abcdef.json"
    path.write_text(json.dumps(doc))
    return str(path)


def test_the_ceilings_cache_is_read_by_the_one_rule(tmp_path, capsys):
    """The cache `roofline`, `decompose` and `pytest --benchmark-only` read: `trace --ceilings` reads it too (it
    refused it: "neither a results.json ... nor a TraceLens GPU arch JSON"), by the same rule: the machine must be
    the trace's, and a ceiling measured on a busy machine is not used."""
    devices = load_config(None).devices
    rates, memory = ceilings_file(_cache(tmp_path, "NVIDIA H100 80GB HBM3"), "NVIDIA H100 80GB HBM3", devices)
    assert rates == {"bf16": 650.0} and memory == pytest.approx(2.9)
    out = tmp_path / "t.json"
    trace_file = str(TRACES / H100_TRACE)
    assert trace.main([trace_file, "--ceilings", _cache(tmp_path, "NVIDIA H100 80GB HBM3"), "--json", str(out)]) == 0
    with pytest.raises(InputError, match=r"\(2 noisy or busy: measure again on a quiet machine\)"):
        ceilings_file(_cache(tmp_path, "NVIDIA H100 80GB HBM3", busy=["other processes kept 1.0 of 2 cores busy"]))
    with pytest.raises(InputError, match="ceilings measured on .*, not on"):
        ceilings_file(_cache(tmp_path, "AMD EPYC"), "NVIDIA H100 80GB HBM3", devices)


def test_an_operator_above_the_measured_ceiling_is_flagged(tmp_path):
    """`trace --ceilings`: an operator whose math kernels beat the measured ceiling (here one of 5 TFLOP/s bf16, far
    under what the H100's GEMMs reached) is flagged, as the judge flags a benchmark row above its measured roof; an
    operator under it is not."""
    from microbench.trace.analysis import TraceAnalysis

    low = tmp_path / "low.json"
    low.write_text(json.dumps({"hardware": {"name": "NVIDIA H100 80GB HBM3"}, "ceilings": [
        {"name": "m", "kind": "compute", "dtype": "bf16", "value": 5.0, "source": "measured", "noise": []}]}))  # fmt: skip
    rates, _ = ceilings_file(low)
    doc = TraceAnalysis.open(TRACES / H100_TRACE, measured=rates).document()
    flagged = [n for n in doc["notes"] if "above the measured roof, flagged" in n]
    above = [o for o in doc["ops"] if (o.get("kernel_pct_of_measured") or 0) > 105]
    assert flagged and len(flagged) == len(above)
    assert flagged[0].startswith(f"{above[0]['op']} {above[0]['shape']} {above[0]['dtype']}: its math kernels ran at")
    plain = TraceAnalysis.open(TRACES / H100_TRACE).document()
    assert not [n for n in plain["notes"] if "above the measured roof" in n]
