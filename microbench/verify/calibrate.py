"""Each rule's range re-derived from the checks `dawnscope verify` kept (docs/verify/*.json), by the method written
at the head of data/calibration.toml, and every kept check judged against the range derived now.

`derive` reads the checks of the workloads not held out and gives, per rule and kind of device, the band of the
informative checks' misses (calibration.toml, steps 1-3); `render` writes it below the file's mark
(scripts/derive-ranges --write); `judged` gives every check with the range its finding has now (the model's
range as the file recorded it, widened by the derivation: findings/calibration.widened, then cut as the engine
cuts it), its verdict under that range, and whether its workload was held out: what docs/findings.md's tables
are made of (report/verify_report.markdown_table)."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import tomllib

from microbench.findings.calibration import DERIVED_MARK, device_kind, scale_of, widened
from microbench.findings.engine import bounded

from .verify import judge, noise_us


def kept_checks(folder: Path) -> list[tuple[str, dict]]:
    """The `verify --json` files kept in `folder` (docs/verify/), as (file name, document), in name order."""
    return [(p.name, json.loads(p.read_text())) for p in sorted(folder.glob("*.json"))]


def held_out(model: str, data: dict) -> bool:
    return any(model.startswith(p) for p in data["method"]["held_out"])


def _kind(doc: dict) -> str:
    return device_kind((doc.get("fingerprint") or {}).get("kind"))


def _model_range(c: dict) -> dict:
    return c.get("predicted_model") or c["predicted"]


def derive(docs: list[tuple[str, dict]], data: dict) -> dict:
    """{rule: {kind: {below, above, checks, workloads, from}}} from `docs` ((name, verify document) pairs): steps
    1-3 of data/calibration.toml's method. A rule with no informative check has no entry."""
    qs: dict[tuple[str, str], list[tuple[float, str, str]]] = {}
    for name, doc in docs:
        if held_out(doc["model"], data):
            continue
        for c in doc["checks"]:
            e = _model_range(c)["expected"]
            scale = scale_of(c["finding"], e, c.get("time_us"), data)
            if scale is None or noise_us(c) >= scale:
                continue  # no scale recorded, or noisier than what it measures (step 2)
            q = (c["measured_us"]["median"] - e) / scale
            qs.setdefault((c["finding"], _kind(doc)), []).append((q, doc["model"], name))
    out: dict = {}
    for (rid, kind), rows in sorted(qs.items()):
        out.setdefault(rid, {})[kind] = {
            "below": round(min(0.0, min(q for q, _, _ in rows)), 4),
            "above": round(max(0.0, max(q for q, _, _ in rows)), 4),
            "checks": len(rows),
            "workloads": len({m for _, m, _ in rows}),
            "from": sorted({n for _, _, n in rows}),
        }
    return out


def with_held_out_tally(docs: list[tuple[str, dict]], data: dict, derived: dict) -> dict:
    """`derived` with each entry's out-of-sample record: the held-out checks of its rule and kind judged against
    the ranges it derives (`held_out_checks`, `held_out_decidable`, `held_out_held`), which a finding quotes."""
    rows = [r for r in judged(docs, data | {"derived": derived}) if r["held_out"]]
    out = {rid: {kind: dict(e) for kind, e in kinds.items()} for rid, kinds in derived.items()}
    for rid, kinds in out.items():
        for kind, e in kinds.items():
            mine = [r for r in rows if r["finding"] == rid and r["kind"] == kind]
            e["held_out_checks"] = len(mine)
            e["held_out_decidable"] = sum(r["decidable"] for r in mine)
            e["held_out_held"] = sum(r["decidable"] and r["held"] for r in mine)
    return out


def render(derived: dict) -> str:
    """The derived tables as TOML, to follow the mark."""
    lines = [DERIVED_MARK]
    for rid, kinds in derived.items():
        for kind, e in kinds.items():
            files = ", ".join(f'"{n}"' for n in e["from"])
            lines += [
                "",
                f"[derived.{rid}.{kind}]",
                f"below = {e['below']!r}",
                f"above = {e['above']!r}",
                f"checks = {e['checks']}",
                f"workloads = {e['workloads']}",
                f"from = [{files}]",
            ]
            lines += [f"{k} = {e[k]}" for k in ("held_out_checks", "held_out_decidable", "held_out_held") if k in e]
    return "\n".join(lines) + "\n"


def rewrite(text: str, derived: dict) -> str:
    """calibration.toml's text with the part below the mark replaced by `derived` (the method above it kept)."""
    head = text.split(DERIVED_MARK, 1)[0]
    out = head + render(derived)
    tomllib.loads(out)  # what is written reads back
    return out


def judged(docs: list[tuple[str, dict]], data: dict) -> list[dict]:
    """Every check of `docs` with `range` (its finding's range now), `held`, `decidable` under it, the same under
    the model's own range (`model_held`, `model_decidable`), `held_out`, and the document's model, batch and file
    name."""
    rows = []
    for name, doc in docs:
        for c in doc["checks"]:
            model = _model_range(c)
            rng, how = widened(c["finding"], _kind(doc), model, c.get("time_us"), data)
            rng = bounded({"saving_us": rng, "time_us": c.get("time_us"), "per": "step"}, doc.get("step_time_us"))[
                "saving_us"
            ]
            by_model = judge(model, c)  # the same verdict under the model's own range: what the widening bought
            rows.append(
                c
                | {
                    "model": doc["model"],
                    "batch": doc["batch"],
                    "file": name,
                    "kind": _kind(doc),
                    "range": rng,
                    "widened": how is not None and rng != model,
                    **judge(rng, c),
                    "model_held": by_model["held"],
                    "model_decidable": by_model["decidable"],
                    "held_out": held_out(doc["model"], data),
                }
            )
    return rows


def summary(rows: list[dict]) -> dict:
    """The calibration's figures over judged rows: checks, workloads, decidable and held (all, derivation,
    held out), and the median width of the ranges over their expected value."""

    def tally(rs: list[dict]) -> dict:
        decided = [r for r in rs if r["decidable"]]
        by_model = [r for r in rs if r["model_decidable"]]
        return {
            "checks": len(rs),
            "workloads": len({r["model"] for r in rs}),
            "decidable": len(decided),
            "held": sum(r["held"] for r in decided),
            "model_decidable": len(by_model),
            "model_held": sum(r["model_held"] for r in by_model),
        }

    widths = [
        (r["range"]["high"] - r["range"]["low"]) / abs(r["range"]["expected"]) for r in rows if r["range"]["expected"]
    ]
    return {
        "all": tally(rows),
        "derivation": tally([r for r in rows if not r["held_out"]]),
        "held_out": tally([r for r in rows if r["held_out"]]),
        "median_width_over_expected": statistics.median(widths) if widths else None,
    }
