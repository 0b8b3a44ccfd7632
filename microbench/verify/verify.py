"""`dawnscope verify`: the findings of a model's step checked against what their fixes really save.

The model's step is decomposed (decompose.pipeline) and its findings made (findings.decomposition), as `decompose`
does. For each finding whose fix verify can apply to this model on this device (fixes.py, data/verify.toml), the
step is timed before and after the fix in alternating blocks, in `processes` fresh processes (pair.py); so is the
step against itself (A/A): the saving a null fix shows, the measurement's noise. Per finding (a check):

- `predicted`: the finding's saving_us {low, expected, high};
- `measured_us`: the median over the processes of each one's saving (the median of its paired block differences),
  with the lowest and highest process (one process: its paired differences' quartiles);
- `aa_spread_us`: the largest saving an A/A process showed, either sign (one process: the larger quartile);
- `held`: the measured median within [low, high];
- `decidable`: whether the measurement could tell: the measured median, moved either way by its noise, stays on the
  same side of each edge of the range. Its noise: the larger of the A/A spread and half the spread of the check's
  own processes (one process: half its paired differences' quartile range), since processes of one build run at
  speeds of their own and a fix's saving differs between them by more than a null fix's does.

A fix that acts from a process's start (glibc's malloc thresholds, read from the environment at start-up) is timed
in pairs of fresh processes instead (pair.process_pairs; `measured_by`), against its own null fix, pairs of
processes of the same setting (`aa_process_pairs`). A fix not applied is listed with its reason. The document: schema dawnscope.verify/1 (docs/findings.md,
"Checked by verify")."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from microbench import kernels
from microbench.core import device as devmod
from microbench.core.conditions import Conditions
from microbench.core.config import load_config
from microbench.core.errors import InputError
from microbench.decompose.pipeline import DecomposeOptions, run_decomposition
from microbench.findings.decomposition import with_decomposition_findings
from microbench.findings.facts import rules

from .fixes import Plan, plan
from .pair import Setting, process_pairs, run_in_process

SCHEMA = "dawnscope.verify/1"


@dataclass(frozen=True)
class VerifyOptions:
    batch: int | None = None  # None: the model's own (decompose's default)
    dtype: str = "fp32"
    device: str = "cpu"
    fixes: tuple[str, ...] | None = None  # the findings to check by id; None: every finding that has a fix
    processes: int = 3
    blocks: int = 12
    steps: int = 3
    config: str | None = None


def decidable(low: float, high: float, measured: float, spread: float) -> bool:
    """The verdict (measured within [low, high]) is the same for every value within `spread` of the measured one."""
    lo, hi = measured - spread, measured + spread
    return (low <= lo and hi <= high) or hi < low or lo > high


def _measured(runs: list[dict]) -> dict:
    each = [r["saving_us"]["median"] for r in runs]
    if len(runs) == 1:
        s = runs[0]["saving_us"]
        return {"median": s["median"], "low": s["q1"], "high": s["q3"], "processes": each}
    return {"median": statistics.median(each), "low": min(each), "high": max(each), "processes": each}


def _aa_spread(runs: list[dict]) -> float:
    if len(runs) == 1:
        s = runs[0]["saving_us"]
        return max(abs(s["q1"]), abs(s["q3"]))
    return max(abs(r["saving_us"]["median"]) for r in runs)


def noise(processes: list[float], aa_spread: float) -> float:
    """A check's noise: the larger of the A/A spread and half the processes' spread (module docstring)."""
    return max(aa_spread, (max(processes) - min(processes)) / 2 if processes else 0.0)


def _spread(m: dict) -> list[float]:
    """What a check's processes' spread is read from: the processes' savings, or one process's quartiles."""
    return m["processes"] if len(m.get("processes") or ()) > 1 else [m["low"], m["high"]]


def noise_us(c: dict) -> float:
    """The noise of a check (`measured_us`, `aa_spread_us`) as `check` made it."""
    return noise(_spread(c["measured_us"]), c["aa_spread_us"])


def judge(rng: dict, c: dict) -> dict:
    """`held` (the check's measured median within `rng`'s low - high) and `decidable` (that verdict within its
    noise): the one verdict, of a check as measured and of a kept check against a range derived since."""
    median = c["measured_us"]["median"]
    return {
        "held": rng["low"] <= median <= rng["high"],
        "decidable": decidable(rng["low"], rng["high"], median, noise_us(c)),
    }


def could_tell(low: float, high: float, median: float, processes: list[float], aa_spread: float) -> bool:
    """The verdict on the median holds within its noise (module docstring)."""
    return decidable(low, high, median, noise(processes, aa_spread))


def check(finding: dict, p: Plan, runs: list[dict], aa_spread_us: float) -> dict:
    """One finding against its fix's measured saving (module docstring)."""
    s = finding["saving_us"]
    m = _measured(runs)
    out = {
        "finding": finding["id"],
        "fix": p.fix,
        "after": {k: v for k, v in p.after.__dict__.items() if v is not None and k != "spec"}
        | ({"env": p.env} if p.env else {}),
        "predicted": {k: s[k] for k in ("low", "expected", "high")},
        # the model's own range where calibration widened it (findings/calibration.py): what a derivation reads
        **({"predicted_model": finding["saving_model_us"]} if "saving_model_us" in finding else {}),
        # the time the finding acts on: the scale calibration/derive.py measures a rule's misses in
        "time_us": finding.get("acts_on_us", finding.get("time_us")),
        "measured_us": m,
        "aa_spread_us": aa_spread_us,
    }
    return out | judge(s, out)


def verify(spec: str, opts: VerifyOptions | None = None, progress=print) -> dict:
    """The checks of a model's findings (module docstring). `spec`: a model name or `module:factory`."""
    opts = opts or VerifyOptions()
    if opts.processes < 1 or opts.blocks < 2 or opts.steps < 1:
        raise InputError(None, "expected --processes and --steps at least 1, --blocks at least 2", key="verify")
    cfg = load_config(opts.config)
    kernels.load_all()  # the providers the ceilings are measured with register on import
    _known_rules(opts.fixes)
    progress("decomposing the step and making its findings")
    d = run_decomposition(
        spec,
        DecomposeOptions(
            batch=opts.batch, dtype=opts.dtype, device=opts.device, config=opts.config, replay=False, plot=False
        ),
    )
    doc = with_decomposition_findings(d)
    findings = doc.get("findings", []) + doc.get("findings_below_threshold", [])
    unmade = _unmade(opts.fixes, findings, doc)
    if opts.fixes is not None:
        findings = [f for f in findings if f["id"] in opts.fixes]
    dev = d.dev
    batch = d.batch  # the model's own where --batch is not given (decompose chose it)
    base = Setting(spec, opts.dtype)
    plans = [(f, plan(f, base, dev)) for f in findings]
    look = Conditions(cfg.conditions).start()
    checks, not_applied, aa_runs, aa_process_runs = [], list(unmade), [], []
    applicable = [(f, p) for f, p in plans if p.after is not None]
    if any(p.env is None for _, p in applicable):
        progress(f"A/A: the step against itself, {opts.processes} process(es)")
        aa_runs = [_pair(base, base, batch, opts, dev) for _ in range(opts.processes)]
    if any(p.env is not None for _, p in applicable):  # its own null fix: pairs of processes of the same setting
        progress(f"A/A: pairs of fresh processes of the same setting, {opts.processes} pair(s)")
        aa_process_runs = process_pairs(base, {}, batch, opts.blocks, opts.steps, _kind(dev), opts.processes)
    aa = _aa_spread(aa_runs) if aa_runs else None
    aa_processes = _aa_spread(aa_process_runs) if aa_process_runs else None
    for f, p in plans:
        if p.after is None:
            not_applied.append({"finding": f["id"], "fix": p.fix, "why": p.why_not})
            continue
        try:  # a fix that fails to apply to this model is said, and the other checks are kept
            checks.append(_checked(f, p, base, batch, opts, dev, aa, aa_processes, progress))
        except InputError as e:
            not_applied.append({"finding": f["id"], "fix": p.fix, "why": f"applying it failed: {e}"})
    for f in doc.get("findings_not_checked", []):
        if opts.fixes is None or f["id"] in opts.fixes:
            not_applied.append(
                {"finding": f["id"], "fix": "-", "why": f"the finding itself was not checked: {f['why']}"}
            )
    decided = [c for c in checks if c["decidable"]]
    return {
        "schema": SCHEMA,
        "model": spec,
        "batch": batch,
        "dtype": opts.dtype,
        "device": dev.name,
        "fingerprint": devmod.fingerprint(dev),
        "software": devmod.software(),
        "step_time_us": doc.get("findings_step_time_us"),
        "step_time_what": doc.get("findings_step_time_what"),
        "method": {"processes": opts.processes, "blocks": opts.blocks, "steps_per_block": opts.steps},
        "aa": {"spread_us": aa, "processes": [r["saving_us"] for r in aa_runs]},
        # the null fix of the process-pair checks (their aa_spread_us), where there is one
        **({"aa_process_pairs": {"spread_us": aa_processes, "pairs": aa_process_runs}} if aa_process_runs else {}),
        "checks": checks,
        "not_applied": not_applied,
        "held": sum(c["held"] for c in decided),
        "decidable": len(decided),
        "conditions": look.stop(),
    }


def _known_rules(fixes: tuple[str, ...] | None) -> None:
    """--fixes names rules (findings.toml): a typo is said before minutes of measurement, not after."""
    unknown = [f for f in fixes or () if f not in rules()["rules"]]
    if unknown:
        names = ", ".join(sorted(rules()["rules"]))
        raise InputError(None, f"no such rule ({names})", key="--fixes", value=",".join(unknown))


def _unmade(fixes: tuple[str, ...] | None, findings: list[dict], doc: dict) -> list[dict]:
    """The rules asked for that found nothing on this run (their own condition not met): said, not an error."""
    known = {f["id"] for f in findings} | {f["id"] for f in doc.get("findings_not_checked", [])}
    why = "the rule found nothing to fix in this step on this run"
    return [{"finding": rid, "fix": "-", "why": why} for rid in fixes or () if rid not in known]


def _checked(f: dict, p: Plan, base: Setting, batch, opts: VerifyOptions, dev, aa, aa_processes, progress) -> dict:
    """One finding's check: its fix timed in alternating blocks, or in pairs of fresh processes (p.env)."""
    if p.env is not None:
        progress(f"{f['id']}: {p.fix}, {opts.processes} pair(s) of fresh processes")
        runs = process_pairs(base, p.env, batch, opts.blocks, opts.steps, _kind(dev), opts.processes)
        return check(f, p, runs, aa_processes) | {"measured_by": "process pairs"}
    progress(f"{f['id']}: {p.fix}, {opts.processes} process(es)")
    runs = [_pair(base, p.after, batch, opts, dev) for _ in range(opts.processes)]
    return check(f, p, runs, aa)


def _kind(dev) -> str:
    return "cuda" if dev.is_gpu else "cpu"


def _pair(before: Setting, after: Setting, batch, opts: VerifyOptions, dev) -> dict:
    return run_in_process(before, after, batch, opts.blocks, opts.steps, _kind(dev))
