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
    """ResNet-9's amp check on this CPU: processes saved 5.5 and 12.9 ms against a range from 11.1 ms."""
    assert not could_tell(11_106, 30_246, 9_195, [5_462, 12_927], 232)
    assert could_tell(11_106, 30_246, 20_000, [18_000, 22_000], 232)


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
    argv = ["--model", "tests.findings_models:matmul_mlp", "--batch", "64", "--fixes", "amp", "--processes", "2",
            "--blocks", "4", "--steps", "2", "--json", str(out)]  # fmt: skip
    assert main(argv) == 0
    doc = json.loads(out.read_text())
    assert doc["schema"] == "dawnscope.verify/1" and doc["device"] and doc["conditions"]
    (c,) = doc["checks"]
    assert c["finding"] == "amp" and c["after"] == {"dtype": "bf16"}
    assert set(c) >= {"finding", "fix", "predicted", "measured_us", "aa_spread_us", "held", "decidable"}
    p, m = c["predicted"], c["measured_us"]
    assert p["low"] <= p["expected"] <= p["high"] and m["low"] <= m["median"] <= m["high"]
    assert len(m["processes"]) == 2 and c["aa_spread_us"] >= 0
    assert c["held"] == (p["low"] <= m["median"] <= p["high"])
    assert doc["decidable"] == int(c["decidable"]) and doc["held"] == int(c["held"] and c["decidable"])
    assert "decidable checks held" in capsys.readouterr().out
