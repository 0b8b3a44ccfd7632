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
    assert plan("amp", base, cpu).after.dtype == "bf16"
    assert plan("channels_last", base, cpu).after.channels_last is True
    assert plan("dataloader", base, cpu).after.workers == 2
    tf32 = plan("tf32", base, cpu)
    assert tf32.after is None and tf32.why_not == "TF32 is a GPU Tensor Core format (cpu)"
    assert plan("sync", base, cpu).why_not.startswith("removing a host synchronization")
    already = plan("amp", Setting(base.spec, "bf16"), cpu)
    assert already.after is None and already.why_not == "the model already runs with this fix"


@pytest.mark.slow
def test_verify_a_model_s_amp_finding(tmp_path, capsys):
    from microbench.verify.cli import main

    out = tmp_path / "verify.json"
    # no --batch: the model's own, as decompose chooses it (the pair processes were given None once)
    argv = ["--model", "tests.findings_models:matmul_mlp", "--fixes", "amp", "--processes", "2",
            "--blocks", "4", "--steps", "2", "--json", str(out)]  # fmt: skip
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


def test_the_findings_table_is_generated_from_the_kept_verify_files():
    """docs/findings.md's "Checked by verify" table is scripts/verify-table's output over docs/verify/*.json (the
    checks' documents, with the machine's fingerprint), not written by hand."""
    from microbench.report.verify_report import TABLE_BEGIN, TABLE_END

    from .conftest import REPO, load_script

    kept = sorted((REPO / "docs" / "verify").glob("*.json"))
    assert kept, "no verify --json file kept in docs/verify"
    section = (REPO / "docs" / "findings.md").read_text().split(TABLE_BEGIN, 1)[1].split(TABLE_END, 1)[0]
    assert section.strip() == load_script("verify-table").table().strip()
