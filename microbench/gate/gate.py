"""The regression gate: a baseline and a current capture of one workload on one machine, compared where they can be
and refused where they cannot. Exit codes (EXIT): 0 nothing got slower beyond the noise floor, 1 something did, 2
the two captures cannot be compared (another device, other software, another profile or configuration, a run the
judge measured on a busy machine, another workload's shapes or dtypes, a trace whose integrity says every figure is
unreliable), each with its reason.

Inputs are what `compare` reads: our results files (or a `roofline --out` folder) and pytest-benchmark JSON, whose
cases and noise verdicts come from report/compare.py (one owner of "same within noise": the rows' p20-p80 spreads
overlap; a row the judge flagged noisy or impossible is not judged); or profiler traces and their reports
(`trace --json`), compared per step: the median step time (its noise: the steps' own p20-p80 spread), each kernel
class's and each operator's kernel time per step, and the Tensor Core share.

A row is slower when its change exceeds its noise floor: the larger of the threshold (thresholds.toml
gate_min_slowdown, or --max-slowdown for the whole gate, a metric kind, an op family or one row) and the rows' own
relative spread. A case that ran in the baseline and fails in the current, or that lost its Tensor Cores, is a
regression whatever its time. Definitions: docs/gate.md."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from pathlib import Path

from microbench.core import thresholds
from microbench.core.errors import InputError
from microbench.core.jsonio import load_json
from microbench.core.verdict import is_impossible
from microbench.findings.analysis import TRACE_SCHEMA_PREFIX, trace_report
from microbench.report.compare import Machine, compare_machines, differences, load_machine, resolve_results
from microbench.trace.analysis import is_profiler_trace

SCHEMA = "dawnscope.gate/1"
EXIT = {"pass": 0, "regression": 1, "incomparable": 2}
REGRESSIONS = ("slower", "failed", "lost Tensor Cores")


@dataclass
class Limits:
    """Allowed slowdown (a fraction: 0.05 is 5 %) per row: `by_key` maps a row's name, its op family or its metric
    kind (case, step, class, op, tensor_core_share) to its own; `default` for the rest (thresholds.toml
    gate_min_slowdown unless --max-slowdown gives one)."""

    default: float | None = None
    by_key: dict[str, float] = field(default_factory=dict)
    default_from: str = "--max-slowdown"

    def __post_init__(self):
        if self.default is None:
            self.default, self.default_from = thresholds.value("gate_min_slowdown"), "thresholds.toml gate_min_slowdown"

    def of(self, metric: str, name: str, family: str | None = None) -> tuple[float, str]:
        """The allowed slowdown of a row and where it comes from: its name, its op family, its metric kind, else
        the default."""
        for key in (name, family, metric):
            if key is not None and key in self.by_key:
                return self.by_key[key], f"--max-slowdown {key}=..."
        return self.default, self.default_from


def _row(metric, name, unit, base, cur, floor, limit_from, verdict, why, family=None) -> dict:
    change = cur / base - 1 if base and cur is not None else None
    return {
        "metric": metric,
        "name": name,
        "family": family,
        "unit": unit,
        "baseline": base,
        "current": cur,
        "change": change,
        "noise_floor": floor,
        "floor_from": limit_from,
        "verdict": verdict,
        "why": why,
    }


def _judge_change(base: float, cur: float, floor: float) -> str:
    change = cur / base - 1
    if change > floor:
        return "slower"
    if change < -floor / (1 + floor):  # as far below as `floor` is above: 1 / (1 + floor) of the time
        return "faster"
    return "unchanged"


def _spread(p20, p80, median) -> float:
    """The relative spread of a row's repeats ((p80 - p20) / median), 0 where not recorded."""
    if None in (p20, p80) or not median:
        return 0.0
    return max(0.0, (p80 - p20) / median)


# ------------------------------------------------------------------------------------------------- results files


def _machine_incomparable(base: Machine, cur: Machine, allow_software: bool, allow_busy: bool) -> list[dict]:
    out = []
    if (base.name, base.hardware_kind) != (cur.name, cur.hardware_kind):
        out.append(
            {
                "what": "device",
                "detail": f"the baseline ran on {base.name} ({base.hardware_kind or '?'}), the current on "
                f"{cur.name} ({cur.hardware_kind or '?'}): compare machines with `dawnscope compare`",
            }
        )
    for d in differences([base, cur]):
        if d["what"] == "software" and allow_software:
            continue
        out.append({"what": d["what"], "detail": d["detail"]})
    for which, m in (("baseline", base), ("current", cur)):
        if m.conditions.get("busy") and not allow_busy:
            why = "; ".join(m.conditions.get("reasons") or []) or "its conditions say busy"
            out.append(
                {
                    "what": "conditions",
                    "detail": f"the {which} run was measured on a busy machine ({why}): its times are not comparable "
                    "with another run's (rerun on a quiet machine, or --allow-busy to compare anyway)",
                }
            )
    return out


def gate_results(
    base_path: Path, cur_path: Path, limits: Limits, allow_software: bool = False, allow_busy: bool = False
) -> dict:
    """Two results files (ours or pytest-benchmark's) of one machine, case by case."""
    base, cur = load_machine(base_path), load_machine(cur_path)
    incomparable = _machine_incomparable(base, cur, allow_software, allow_busy)
    cmp = compare_machines([base, cur])
    bl, cl = cmp["machines"][0]["label"], cmp["machines"][1]["label"]
    rows, missing = [], []
    for case in cmp["cases"]:
        b, c = case["cells"].get(bl), case["cells"].get(cl)
        name = " ".join(x for x in (case["op"], case["shape"], case["dtype"], case["provider"]) if x)
        if case["layer"]:
            name += f" {case['layer']}/{case['phase']}"
        if b is None or c is None:
            missing.append({"name": name, "missing_in": "current" if c is None else "baseline"})
            continue
        rows.append(_case_row(name, case["op"], b, c, limits))
    if not rows and not incomparable:
        incomparable.append({"what": "cases", "detail": "no case is in both files: nothing to compare"})
    return _document("results", base_path, cur_path, base.fingerprint, cur.fingerprint, rows, missing, incomparable)


def _case_row(name: str, family: str, b: dict, c: dict, limits: Limits) -> dict:
    limit, limit_from = limits.of("case", name, family)
    bt, ct = b.get("time_ms"), c.get("time_ms")

    def out(verdict: str, why: str, floor: float = limit, floor_from: str = limit_from) -> dict:
        return _row("case", name, "ms", bt, ct, floor, floor_from, verdict, why, family)

    if b["status"] == "ok" and c["status"] != "ok":
        return out("failed", f"ok in the baseline, {c['status']} now")
    if b["status"] != "ok" or not bt or not ct:
        return out("not judged", "no time in both")
    if b.get("tensor_cores") == "yes" and c.get("tensor_cores") == "no":
        return out("lost Tensor Cores", "tensor_cores yes -> no")
    if is_impossible(b) or is_impossible(c):
        return out("not judged", "the judge flagged a row impossible")
    bs, cs = _spread(b.get("p20_ms"), b.get("p80_ms"), bt), _spread(c.get("p20_ms"), c.get("p80_ms"), ct)
    if c.get("verdict") == "noise":
        # repeats that disagree: judged only beyond both spreads together, else the gate cannot tell
        floor, src = max(limit, bs + cs), "both noisy rows' spreads (p20-p80)"
        verdict = _judge_change(bt, ct, floor) if bs and cs else "unchanged"
        if verdict == "unchanged":
            return out("not judged", "the judge flagged a row noisy: the change is within their spread", floor, src)
        return out(verdict, "beyond both noisy rows' spreads together", floor, src)
    floor = max(limit, bs, cs)
    src = "the rows' own spread (p20-p80)" if floor > limit else limit_from
    if c.get("verdict") == "same within noise":
        return out("unchanged", "the rows' p20-p80 spreads overlap", floor, src)
    verdict = _judge_change(bt, ct, floor)
    return out(verdict, "within the noise floor" if verdict == "unchanged" else "beyond the noise floor", floor, src)


# ------------------------------------------------------------------------------------------------- traces


def _trace_document(path: Path, cache: dict | None = None) -> dict:
    """The trace's report (findings.analysis.trace_report), once per path of one gate."""
    if cache is None:
        return trace_report(path)
    if path not in cache:
        cache[path] = trace_report(path)
    return cache[path]


def _devices(doc: dict) -> list[str]:
    return sorted(str(d.get("name") or "?") for d in doc.get("devices") or [] if d.get("kernels_ran_here", True))


def _steps(doc: dict) -> list[float]:
    return [float(s["wall_us"]) for s in doc.get("steps") or [] if isinstance(s.get("wall_us"), (int, float))]


def _main_ops(doc: dict, share: float) -> dict[tuple, float]:
    total = (doc.get("summary") or {}).get("kernel_time_us") or 0.0
    ops = {}
    for o in doc.get("ops") or []:
        t = o.get("kernel_time_us") or 0.0
        if total and t >= share * total:
            ops[(o.get("op"), str(o.get("shape")), o.get("dtype"))] = t
    return ops


def _trace_incomparable(bdoc: dict, cdoc: dict) -> tuple[list[dict], list[str]]:
    out, notes = [], []
    if _devices(bdoc) != _devices(cdoc):
        out.append(
            {
                "what": "device",
                "detail": f"the baseline ran on {', '.join(_devices(bdoc)) or 'no named device'}, the current on "
                f"{', '.join(_devices(cdoc)) or 'no named device'}: compare chips with `dawnscope compare`",
            }
        )
    for which, doc in (("baseline", bdoc), ("current", cdoc)):
        integ = doc.get("integrity") or {}
        if "every figure" in (integ.get("unreliable") or []):
            what = [m for m in integ.get("missing") or [] if "every figure" in m.get("unreliable", [])]
            detail = "; ".join(f"{m['what']}: {m['detail']}" for m in what[:2])
            out.append({"what": "integrity", "detail": f"the {which} trace: {detail} (every figure unreliable)"})
    if bool(_steps(bdoc)) != bool(_steps(cdoc)):
        out.append(
            {
                "what": "steps",
                "detail": f"the baseline has {len(_steps(bdoc))} steps, the current {len(_steps(cdoc))}: per-step "
                "figures of one cannot meet the other's whole-trace figures (record both with the same schedule)",
            }
        )
    share = thresholds.value("gate_min_share")
    bops, cops = _main_ops(bdoc, share), _main_ops(cdoc, share)
    if bops and cops:
        gone = {k: t for k, t in bops.items() if k not in cops}
        kept = 1 - sum(gone.values()) / sum(bops.values())
        if kept < thresholds.value("gate_workload_overlap_min"):
            (op, shape, dtype), _ = max(gone.items(), key=lambda kv: kv[1])
            out.append(
                {
                    "what": "shapes",
                    "detail": f"the current trace lacks operators that hold {1 - kept:.0%} of the baseline's main "
                    f"operators' kernel time (e.g. {op} {shape} {dtype}): another batch, shape or dtype",
                }
            )
    else:
        notes.append("no operator shapes in one of the traces (record_shapes=True): shapes and dtypes not checked")
    return out, notes


def gate_traces(base_path: Path, cur_path: Path, limits: Limits, cache: dict | None = None) -> dict:
    """Two traces (or their reports) of one workload on one machine, per step."""
    bdoc, cdoc = _trace_document(base_path, cache), _trace_document(cur_path, cache)
    incomparable, notes = _trace_incomparable(bdoc, cdoc)
    rows = []
    bsteps, csteps = _steps(bdoc), _steps(cdoc)
    bn, cn = max(len(bsteps), 1), max(len(csteps), 1)
    per = "step" if bsteps else "trace"
    if bsteps and csteps:
        rows.append(_step_row(bsteps, csteps, limits))
    share = thresholds.value("gate_min_share")
    for metric, bvals, cvals, total in (
        ("class", _by_class(bdoc), _by_class(cdoc), (bdoc.get("summary") or {}).get("kernel_time_us") or 0.0),
        ("op", _by_op(bdoc), _by_op(cdoc), (bdoc.get("summary") or {}).get("kernel_time_us") or 0.0),
    ):
        for name, bt in sorted(bvals.items(), key=lambda kv: -kv[1]):
            ct = cvals.get(name)
            if ct is None or not total or max(bt, ct) < share * total:
                continue  # a small part of the kernel time: no gate on it (thresholds.toml gate_min_share)
            b, c = bt / bn, ct / cn
            limit, limit_from = limits.of(metric, name)
            verdict = _judge_change(b, c, limit) if b else "not judged"
            rows.append(_row(metric, name, f"us per {per}", b, c, limit, limit_from, verdict, f"kernel time per {per}"))
    rows.append(_tensor_core_row(bdoc, cdoc, limits))
    bfp = "; ".join(_devices(bdoc)) or "no named device"
    cfp = "; ".join(_devices(cdoc)) or "no named device"
    doc = _document("traces", base_path, cur_path, bfp, cfp, rows, [], incomparable)
    doc["notes"] += notes
    return doc


def _by_class(doc: dict) -> dict[str, float]:
    return {str(k): float(v or 0.0) for k, v in ((doc.get("summary") or {}).get("time_by_class_us") or {}).items()}


def _by_op(doc: dict) -> dict[str, float]:
    out: dict[str, float] = {}
    for o in doc.get("ops") or []:
        name = " ".join(str(x) for x in (o.get("op"), o.get("shape"), o.get("dtype")) if x)
        out[name] = out.get(name, 0.0) + float(o.get("kernel_time_us") or 0.0)
    return out


def _step_row(bsteps: list[float], csteps: list[float], limits: Limits) -> dict:
    """The median step time; its noise: the steps' p20-p80 spread where each trace has three steps or more."""
    b, c = statistics.median(bsteps), statistics.median(csteps)
    limit, limit_from = limits.of("step", "step")
    floor = limit
    if len(bsteps) >= 3 and len(csteps) >= 3:
        bq, cq = _quantiles(bsteps), _quantiles(csteps)
        spread = max(_spread(*bq, b), _spread(*cq, c))
        if spread > floor:
            floor, limit_from = spread, "the steps' own spread (p20-p80)"
        if bq[0] <= cq[1] and cq[0] <= bq[1]:
            return _row(
                "step", "step", "us", b, c, floor, limit_from, "unchanged", "the steps' p20-p80 spreads overlap"
            )
    verdict = _judge_change(b, c, floor)
    return _row(
        "step", "step", "us", b, c, floor, limit_from, verdict, f"median of {len(bsteps)} and {len(csteps)} steps"
    )


def _quantiles(xs: list[float]) -> tuple[float, float]:
    q = statistics.quantiles(xs, n=5, method="inclusive")
    return q[0], q[3]


def _tensor_core_row(bdoc: dict, cdoc: dict, limits: Limits) -> dict:
    """The share of kernel time on Tensor Cores: a drop beyond thresholds.toml gate_tensor_core_share_drop (points)
    is a regression whatever the times say."""
    b = (bdoc.get("summary") or {}).get("tensor_core_share")
    c = (cdoc.get("summary") or {}).get("tensor_core_share")
    drop = thresholds.value("gate_tensor_core_share_drop")
    if b is None or c is None:
        return _row(
            "tensor_core_share", "Tensor Core share", "share", b, c, drop, "threshold", "not judged", "not in both"
        )
    verdict = "lost Tensor Cores" if b - c > drop else "unchanged"
    why = f"{b:.1%} -> {c:.1%} of kernel time ({(c - b) * 100:+.1f} points; a drop over {drop * 100:.0f} fails)"
    return {
        **_row("tensor_core_share", "Tensor Core share", "share", b, c, drop, "threshold", verdict, why),
        "change": c - b,
    }


# ------------------------------------------------------------------------------------------------- the verdict


def _document(kind, base_path, cur_path, bfp, cfp, rows, missing, incomparable) -> dict:
    counts = {v: sum(r["verdict"] == v for r in rows) for v in ("slower", "faster", "unchanged", "not judged")}
    regressions = [r for r in rows if r["verdict"] in REGRESSIONS]
    verdict = "incomparable" if incomparable else "regression" if regressions else "pass"
    return {
        "schema": SCHEMA,
        "kind": kind,
        "verdict": verdict,
        "exit_code": EXIT[verdict],
        "baseline": {"file": str(base_path), "fingerprint": bfp},
        "current": {"file": str(cur_path), "fingerprint": cfp},
        "incomparable": incomparable,
        "regressions": len(regressions),
        "counts": counts,
        "rows": rows,
        "missing": missing,
        "notes": [],
    }


def kind_of(path: Path) -> str:
    """ "traces" for a profiler trace or a trace report, else "results" (ours or pytest-benchmark's)."""
    path = resolve_results(path)
    if is_profiler_trace(path):
        return "traces"
    doc = load_json(path)
    return (
        "traces" if isinstance(doc, dict) and str(doc.get("schema", "")).startswith(TRACE_SCHEMA_PREFIX) else "results"
    )


def fingerprint_of(path: str | Path) -> str:
    """The machine a capture was measured on, as the gate reads it (kept beside a saved baseline)."""
    path = resolve_results(Path(path))
    if kind_of(path) == "traces":
        return "; ".join(_devices(_trace_document(path))) or "no named device"
    return load_machine(path).fingerprint


def gate(
    baseline: str | Path,
    current: str | Path,
    limits: Limits | None = None,
    allow_software: bool = False,
    allow_busy: bool = False,
) -> dict:
    """The gate's document (schema dawnscope.gate/1) for two captures of one kind."""
    limits = limits or Limits()
    base, cur = resolve_results(Path(baseline)), resolve_results(Path(current))
    kinds = kind_of(base), kind_of(cur)
    if kinds[0] != kinds[1]:
        raise InputError(
            cur,
            f"a {kinds[1][:-1]} file against a {kinds[0][:-1]} baseline: gate traces with traces, results with results",
        )
    if kinds[0] == "traces":
        return gate_traces(base, cur, limits)
    return gate_results(base, cur, limits, allow_software, allow_busy)
