"""The findings a trace report opens with (docs/findings.md): at most five, ranked by the time each fix would save
per step. Each says what (the time and its share of the step), the evidence (kernels or operators, and which layer
of evidence: counters, kernel-name rule, recorded shapes, host ranges), the fix (the concrete setting) and the saving
per step {low, expected, high}, computed by the one prediction model on the same chip (microbench/predict/estimate.py:
the matrix kernels at the Tensor Core rate of the new dtype, with the model's alternative assumptions as the range)
or from the trace's own intervals (an idle gap removed, exposed communication overlapped, a transpose kernel
removed), never by a fixed percentage. The rules, what each needs and the thresholds: data/findings.toml. A rule
whose input the trace lacks (no steps, no launches, no shapes) is not made: it is listed in `not_checked` with why.

The engine: every rule over the facts of one analysis, in rank order (facts.py, rules.py); the findings layer
sits above the trace analysis and the prediction estimate, and extends the analysis (analysis.py)."""

from __future__ import annotations

from microbench.core.documents import Finding, FindingsResult
from microbench.findings.calibration import calibrated, calibration
from microbench.findings.facts import CpuCommFacts, CpuFacts, WholeTraceFacts, gpu_facts, rules, threshold
from microbench.findings.rules import RULES, not_checked_amp
from microbench.trace import gpu_time, integrity


def _no_gpu_activity_why(ta) -> str:
    """Why no finding is checked on a trace without GPU activity: its device records were lost, or it is the
    host's alone."""
    lost = integrity.lost_device_launches(ta.tl)
    return rules()["lost_device"]["why"].format(n=lost) if lost else rules()["host_only"]["why"]


def bounded(finding: Finding, step_us: float) -> Finding:
    """A fix saves at most the time it acts on (`acts_on_us` where the saving also comes from activities the
    finding's `time_us` does not quote: amp's halved activations; else `time_us`) and at most the step (or trace)
    it is per: a range past either is cut there, and says so. The estimate's alternative
    assumptions can reach past it (a CNN's amp range reached 419,882 us over 332,353 us of operators)."""
    acts_on = finding.get("acts_on_us", finding.get("time_us"))
    limits = [x for x in (acts_on, step_us) if x]
    if not limits:
        return finding
    cap = min(limits)
    s = finding["saving_us"]
    if s["high"] <= cap:
        return finding
    cut = {k: min(v, cap) for k, v in s.items()}
    what = "the time it acts on" if cap == acts_on else f"the {finding['per']}"
    return finding | {"saving_us": cut, "saving_cut": f"the range's high end ({s['high']:,.0f} us) cut to {what}"}


# what a finding under the threshold keeps: enough to say it, and for verify to check it (its fix and what it acts on)
BELOW_KEYS = (
    "id",
    "saving_us",
    "saving_model_us",
    "what",
    "expected_why",
    "time_us",
    "acts_on_us",
    "fix",
    "fix_setting",
)


def findings_of(ta, cfg=None, source: str | None = None, cpu_doc: dict | None = None) -> FindingsResult:
    """The findings of one analysis (module docstring): `findings` in rank order, `not_checked` (id, why), the step
    time the shares are of, and whether the savings are per step or for the whole trace. `source`: the chip the
    trace ran on where the trace does not name it. `cpu_doc`: a CPU decomposition's document, whose operators are
    the activities where the trace has no GPU activity (CpuFacts; the rules with a `cpu_why` are not checked)."""
    cpu = cpu_doc is not None and not len(ta.tl.activities)
    cpu_trace = not cpu and not len(ta.tl.activities) and gpu_time.has_cpu_collectives(ta.tl)
    f = (
        CpuFacts(ta, cfg, source, cpu_doc)
        if cpu
        else CpuCommFacts(ta, cfg, source)
        if cpu_trace
        else gpu_facts(ta, cfg, source)
    )
    kind = "cpu" if cpu or cpu_trace else "gpu"
    made, not_checked, below = [], [], []
    if not len(ta.tl.activities) and not cpu and not cpu_trace:
        return {
            "findings": [],
            "not_checked": [{"id": "all", "why": _no_gpu_activity_why(ta)}],
            "step_time_us": 0.0,
            "per": f.per,
        }
    if ta.tl.meta.get("counter_ranges"):
        why = rules()["counter_ranges"]["why"].format(n=ta.tl.meta["counter_ranges"])
        return {"findings": [], "not_checked": [{"id": "all", "why": why}], "step_time_us": 0.0, "per": f.per}
    on_cpu_trace = rules()["cpu_trace"]
    for rid, fn in RULES.items():
        rule = rules()["rules"][rid]
        if cpu_trace:
            if rid not in on_cpu_trace["rules"]:
                not_checked.append({"id": rid, "why": on_cpu_trace["why"]})
                continue
            rule = rule | {"needs": on_cpu_trace["needs"]}
        elif cpu and "cpu_why" in rule:
            not_checked.append({"id": rid, "why": "a CPU run: " + rule["cpu_why"]})
            continue
        if not cpu and "gpu_why" in rule:
            not_checked.append({"id": rid, "why": rule["gpu_why"]})
            continue
        lacking = [n for n in rule.get("needs", []) if n in f.missing]
        if lacking:
            why = (
                not_checked_amp(f)
                if rid in ("amp", "tf32") and lacking == ["shapes"]
                else "; ".join(f.missing[n] for n in lacking)
            )
            not_checked.append({"id": rid, "why": why})
            continue
        out = fn(f, rule)
        if isinstance(out, dict):  # widened by what verify measured of the rule (calibration.py), then cut
            out = bounded(calibrated(out, kind), f.step_us)
        if isinstance(out, str):
            not_checked.append({"id": rid, "why": out})
        elif out is not None and out["saving_us"]["expected"] >= threshold("min_saving_share") * f.step_us:
            made.append(out)
        elif out is not None:  # checked, and the fix would save too little: said, so that a flag is not left open
            below.append({k: out[k] for k in BELOW_KEYS if k in out})
    made.sort(key=lambda x: -x["saving_us"]["expected"])
    made = [x | {"validation": validation_of(x["id"], kind)} for x in made]
    return {
        "findings": made[: int(threshold("max_findings"))],
        "not_checked": not_checked,
        "below": below,
        "step_time_us": f.step_us,
        "step_time_what": f.step_time_what,
        "per": f.per,
        "window": f.steps[0] if isinstance(f, WholeTraceFacts) else None,
        "validation": rules().get("validation"),
    }


def validation_of(rid: str, on: str) -> dict:
    """How often `rid`'s range held a fix's measured saving on the checks of docs/findings.md (findings.toml
    [validation.RID]): on the report's kind of device (`on`: cpu or gpu) and on the others, with where they are."""
    v = (rules().get("validation") or {}).get(rid) or {}
    tally = lambda d: {"held": int((v.get(d) or {}).get("held", 0)), "checks": int((v.get(d) or {}).get("checks", 0))}  # noqa: E731
    verified = ((calibration().get("derived") or {}).get(rid) or {}).get(on) or {}
    return {
        "on": on,
        **tally(on),
        "elsewhere": {d: tally(d) for d in ("cpu", "gpu") if d != on and v.get(d)},
        "where": v.get("where", ""),
        # dawnscope verify's kept checks of the rule on this kind of device: those its range was derived from, and
        # the held-out ones judged against it (data/calibration.toml)
        **(
            {
                "verify": {
                    "derived_from": verified["checks"],
                    "held_out_decidable": verified.get("held_out_decidable", 0),
                    "held_out_held": verified.get("held_out_held", 0),
                }
            }
            if verified
            else {}
        ),
    }


def with_findings(doc: dict, result: FindingsResult) -> dict:
    """The trace document with the findings first (after its schema and file): `findings` in rank order,
    `findings_not_checked`, and the step time and unit (`per`) the savings and shares are of."""
    head = {k: doc[k] for k in ("schema", "file") if k in doc}
    return (
        head
        | {
            "findings": result["findings"],
            "findings_not_checked": result["not_checked"],
            "findings_below_threshold": result.get("below", []),
            "findings_min_saving_share": threshold("min_saving_share"),
            "findings_step_time_us": result["step_time_us"],
            "findings_per": result["per"],
            "findings_step_time_what": result.get("step_time_what", ""),
            # a trace without steps read as one: that step's breakdown (the reports' 'whole trace' row)
            **({"findings_window": result["window"]} if result.get("window") else {}),
            "findings_validation": result.get("validation"),
        }
        | doc
    )
