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
