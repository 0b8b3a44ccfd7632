"""A rule's saving range widened by what its fixes really saved (data/calibration.toml, derived by
scripts/derive-ranges from the `dawnscope verify --json` files kept in docs/verify/; docs/findings.md
"Calibration").

The model's range ({low, expected, high}: its alternative assumptions) says how far its own assumptions can move the
saving; the checks say how far the real saving fell from the model's expected value on workloads the derivation
used. Per rule and kind of device, the derivation keeps the furthest each check's measured median fell below and
rose above the expected value, in units of the rule's scale (the expected saving for a rate-scaled saving, amp and
tf32; the time the finding acts on for a time removed, dataloader). The range a finding shows is the model's,
widened to those edges where they reach past it (never narrowed), then cut as every range is (engine.bounded). A
rule or device kind without derived checks keeps the model's range, and the finding says nothing of calibration."""

from __future__ import annotations

from functools import cache

import tomllib

from microbench.core.documents import Finding
from microbench.core.resources import data_file
from microbench.findings.facts import floor_of, saving

DERIVED_MARK = "# --- derived by scripts/derive-ranges from docs/verify/*.json: do not edit below this line ---"


@cache
def calibration() -> dict:
    return tomllib.loads(data_file("calibration.toml").read_text())


def device_kind(fingerprint_kind: str | None) -> str:
    """The kind the derivation and the findings key on: cpu, or gpu for any accelerator."""
    return "cpu" if fingerprint_kind == "cpu" else "gpu"


def scale_of(rid: str, expected: float, time_us: float | None, data: dict | None = None) -> float | None:
    """The unit a rule's misses are measured in (calibration.toml [scales]); None where the check lacks it."""
    how = ((data or calibration()).get("scales") or {}).get(rid)
    if how == "expected":
        return abs(expected) or None
    if how == "time":
        return abs(time_us) if time_us else None
    return None


def widened(
    rid: str, kind: str, model: dict, time_us: float | None, data: dict | None = None
) -> tuple[dict, dict | None]:
    """(range, how): the model's range widened to the derived edges of `rid` on `kind` (module docstring), and the
    derivation's figures used, or None where there is none (the model's range unchanged)."""
    entry = ((data or calibration()).get("derived") or {}).get(rid, {}).get(kind)
    if not entry:
        return model, None
    e = model["expected"]
    scale = scale_of(rid, e, time_us, data)
    if scale is None:
        return model, None
    low = min(model["low"], e + entry["below"] * scale)
    high = max(model["high"], e + entry["above"] * scale)
    out = saving(low, e, high, floor=floor_of(rid, kind))
    how = {k: entry[k] for k in ("below", "above", "checks", "workloads")} | {"scale_us": scale}
    return out, how


def calibrated(finding: Finding, kind: str) -> Finding:
    """The finding with its range widened (widened); the model's own range kept as `saving_model_us`."""
    model = finding["saving_us"]
    out, how = widened(finding["id"], kind, model, finding.get("acts_on_us", finding.get("time_us")))
    if how is None or out == model:
        return finding
    return finding | {"saving_us": out, "saving_model_us": model, "calibration": how}
