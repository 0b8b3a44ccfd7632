"""The findings a trace (or decompose) report opens with, for the terminal and for HTML: the document's `findings`
(microbench/findings/engine.py) drawn, nothing computed here. What is not checked is grouped by its reason:
one line per reason, with the findings it stops."""

from __future__ import annotations

from microbench.core.kernel_names import distinct_labels
from microbench.report.cells import fit_columns


def saving_text(s: dict, per: str) -> str:
    return f"saves {s['expected']:,.0f} us per {per} (range {s['low']:,.0f} - {s['high']:,.0f})"


def evidence_text(ev: dict, per: str = "step") -> str:
    """The evidence in one line; `per`: what the counts are per (the finding's: step, or trace without steps)."""
    bits = [ev.get("layer", "")]
    if ev.get("kernels"):
        k = ev["kernels"][0]
        more = f" and {len(ev['kernels']) - 1} more" if len(ev["kernels"]) > 1 else ""
        bits.append(
            f"largest {ev.get('unit', 'kernel')} {distinct_labels([k['kernel']], 70)[0]} ({k['time_us']:,.0f} us){more}"
        )
    if ev.get("ops"):
        bits.append("ops: " + ", ".join(f"{o['op']} ({o['reason']})" for o in ev["ops"][:2]))
    if "kernels_per_step" in ev:
        launches = ev.get("launches_per_step")
        graphs = (
            f" from {launches:,.0f} launches ({ev.get('graph_kernel_share', 0.0):.0%} from graphs)"
            if launches is not None and round(launches) != round(ev["kernels_per_step"])
            else ""
        )
        bits.append(f"{ev['kernels_per_step']:,.0f} kernels per {per}{graphs}")
    return "; ".join(b for b in bits if b)


def not_checked_lines(doc: dict) -> list[str]:
    """One line per reason: `not checked (REASON): id, id` (a reason shared by several rules is said once)."""
    by_why: dict[str, list[str]] = {}
    for n in doc.get("findings_not_checked") or []:
        if n["id"] == "all":
            continue  # said in the headline
        by_why.setdefault(n["why"], []).append(n["id"])
    return [f"not checked ({len(ids)}: {', '.join(ids)}): {why}" for why, ids in by_why.items()]


def headline(doc: dict) -> str:
    n = len(doc.get("findings") or [])
    whole = [x["why"] for x in doc.get("findings_not_checked") or [] if x["id"] == "all"]
    if whole:
        return f"no finding checked: {whole[0]}"
    if not n:
        of = "a step" if doc.get("findings_per", "step") == "step" else "the GPU span"
        return f"no finding: no rule of data/findings.toml that this trace supports would save 2 % of {of}"
    what = doc.get("findings_step_time_what")
    return (
        f"findings ({n}, ranked by the time the fix would save per {doc.get('findings_per', 'step')}; "
        f"{doc.get('findings_per', 'step')} time {doc.get('findings_step_time_us', 0.0):,.0f} us"
        + (f", {what}" if what else "")
        + "; ranges: the prediction's alternative assumptions or the trace's own "
        "intervals)"
    )


def below_line(doc: dict) -> str | None:
    """The rules that were checked and found a saving too small to be a finding, in one line."""
    below = doc.get("findings_below_threshold") or []
    if not below:
        return None
    per = doc.get("findings_per", "step")
    share = doc.get("findings_min_saving_share", 0.02)
    return f"checked, under the {share:.0%} of the {per} a finding needs ({len(below)}): " + ", ".join(
        f"{b['id']} {b['saving_us']['expected']:,.0f} us" + _up_to(b["saving_us"], b.get("expected_why")) for b in below
    )


def _up_to(s: dict, why: str | None = None) -> str:
    """The range's high side where it is above the expected, with the rule's reason for the gap where it gives one."""
    return f" (up to {s['high']:,.0f}" + (f": {why}" if why else "") + ")" if s["high"] > s["expected"] else ""


DEVICE_WORDS = {"cpu": "a CPU", "gpu": "a GPU"}


def validation_line(finding: dict) -> str:
    """How often this finding's rule's range held on the checks in the docs, on the report's kind of device."""
    v = finding.get("validation") or {}
    on = DEVICE_WORDS.get(v.get("on"), "this device")
    others = "; ".join(
        f"on {DEVICE_WORDS[d]} {t['held']} of {t['checks']} held" for d, t in (v.get("elsewhere") or {}).items()
    )
    where = f" ({v['where']})" if v.get("where") else ""
    ver = v.get("verify")
    verified = (
        f"; dawnscope verify: the range derived from {ver['derived_from']} checks, then held {ver['held_out_held']} "
        f"of {ver['held_out_decidable']} decidable checks on workloads kept out (docs/findings.md, Calibration)"
        if ver
        else ""
    )
    if v.get("checks"):
        return (
            f"its range held the measured saving in {v['held']} of {v['checks']} checks on {on}"
            + (f"; {others}" if others else "")
            + where
            + verified
        )
    if others:
        return f"its range is not yet checked against a fix's measured saving on {on} ({others}){where}" + verified
    return "its range is not yet checked against a fix's measured saving (docs/findings.md)" + verified


def print_findings(console, doc: dict) -> None:
    from rich.markup import escape

    if "findings" not in doc:
        return
    console.print(f"[bold]{escape(headline(doc))}[/]")
    for i, f in enumerate(doc["findings"], 1):
        console.print(f"{i}. [bold]{escape(f['id'])}[/]: {escape(f['what'])}")
        console.print(f"   {escape(saving_text(f['saving_us'], f['per']))}")
        console.print(f"   fix: {escape(f['fix'])}")
        console.print(f"   evidence: {escape(evidence_text(f['evidence'], f['per']))}")
        console.print(f"   checked: {escape(validation_line(f))}")
    if line := below_line(doc):
        console.print(escape(line))
    for line in not_checked_lines(doc):
        console.print(f"[yellow]{escape(line)}[/]")


BREAKDOWN_COLUMNS = ("kernel", "memcpy", "memset", "runtime", "dataloader", "cpu_exec", "other")


def breakdown_steps(doc: dict) -> list[dict]:
    """The steps with a breakdown; a trace without steps: the one its findings read it as (`findings_window`,
    the whole trace), so that the figures they quote are on the page."""
    steps = [st for st in doc.get("steps") or [] if "breakdown_us" in st]
    return steps or ([doc["findings_window"]] if doc.get("findings_window") else [])


def print_step_breakdown(console, doc: dict, kept_in: str, left=None) -> None:
    """Per step, the TensorBoard plugin's categories (adding up to the step) and the GPU idle time spent in a
    synchronize, apart (docs/findings.md, "Where idle time comes from"). `left`: the report's cells.LeftOut, which
    says the columns a narrow terminal left out once under the report (else this table says its own)."""
    from microbench.report.roofline_report import rich_table

    steps = breakdown_steps(doc)
    if not steps:
        return
    cols = (
        [("step", "left"), ("step us", "right")]
        + [(c, "right") for c in BREAKDOWN_COLUMNS]
        + [("idle in sync", "right")]
    )
    rows = [
        (
            [st["name"], f"{st['breakdown_span_us']:,.1f}"]
            + [f"{st['breakdown_us'][c]:,.1f}" for c in BREAKDOWN_COLUMNS]
            + [f"{st['idle_by_host_us']['sync']:,.1f}"],
            None,
        )
        for st in steps
    ]
    order = ("idle in sync", "memset", "memcpy")
    if left is not None:
        fit = left.add("step breakdown", fit_columns(cols, rows, console.width, order))
        cols, rows = fit.columns, fit.rows
    console.print(
        rich_table(
            cols,
            rows,
            width=None if left is not None else console.width,
            kept_in=kept_in,
            drop_order=order,
            title="step time by what ran (us; each instant to the first active: GPU kernel, "
            "memcpy, memset, then the host's runtime calls, data loading, CPU operators, "
            "other: the TensorBoard plugin's categories; "
            + (
                "runtime ... other are GPU idle time)"
                if (doc.get("summary") or {}).get("gpu_span_us")
                else "no GPU activity in the trace: runtime ... other are the host's own time)"
            ),
        )
    )
