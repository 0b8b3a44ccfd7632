"""The checks of `dawnscope verify` in the terminal (the document: microbench/verify/verify.py, schema
dawnscope.verify/1): per finding its predicted range, the measured saving, the A/A spread and the verdict, then the
fixes not applied and why."""

from __future__ import annotations

COLUMNS = [
    ("finding", "left"),
    ("fix", "left"),
    ("predicted us (low - expected - high)", "right"),
    ("measured us", "right"),
    ("processes low - high", "right"),
    ("A/A spread us", "right"),
    ("verdict", "left"),
]


# what a narrow terminal gives up first (cells.fit_columns); the finding, its range, the measured median and the
# verdict are the row's key and stay
DROP_ORDER = ("processes low - high", "A/A spread us", "fix")


def verdict(c: dict) -> str:
    if not c["decidable"]:
        return "cannot tell"
    return "held" if c["held"] else "missed"


def check_cells(c: dict) -> list[str]:
    """One check's cells under COLUMNS (the terminal's table and the HTML page's)."""
    p, m = c["predicted"], c["measured_us"]
    return [
        c["finding"],
        c["fix"] + (f" (timed in {c['measured_by']})" if c.get("measured_by") else ""),
        f"{p['low']:,.0f} - {p['expected']:,.0f} - {p['high']:,.0f}" + (" *" if c.get("predicted_model") else ""),
        f"{m['median']:,.0f}",
        f"{m['low']:,.0f} - {m['high']:,.0f}",
        f"{c['aa_spread_us']:,.0f}",
        verdict(c),
    ]


def widened_lines(doc: dict) -> list[str]:
    """What each range marked * was before calibration widened it (findings/calibration.py)."""
    out = []
    for c in doc["checks"]:
        q = c.get("predicted_model")
        if q:
            out.append(
                f"* {c['finding']}: the model's own range {q['low']:,.0f} - {q['high']:,.0f} us, widened by what "
                "verify measured of the rule on other workloads (data/calibration.toml; docs/findings.md, Calibration)"
            )
    return out


def print_verify(doc: dict, console=None, kept_in: str = "verify --json OUT") -> None:
    from rich.markup import escape

    from microbench.report.roofline_report import rich_table, wide_console

    console = console or wide_console()
    m = doc["method"]
    console.print(
        f"[bold]{escape(doc['model'])}[/], batch {doc['batch']}, {doc['dtype']}, on {escape(doc['device'])}: "
        f"step {doc['step_time_us'] or 0:,.0f} us ({escape(doc.get('step_time_what') or 'the findings step')}); "
        f"each fix timed in {m['processes']} process(es) of {m['blocks']} alternating blocks of {m['steps_per_block']} steps"
    )
    rows = [(check_cells(c), None if c["held"] or not c["decidable"] else "red") for c in doc["checks"]]
    if rows:
        title = "findings checked (held: the measured saving within the predicted range; cannot tell: the A/A spread could change that)"
        console.print(
            rich_table(COLUMNS, rows, title=title, width=console.width, drop_order=DROP_ORDER, kept_in=kept_in)
        )
    for line in widened_lines(doc):
        console.print(escape(line))
    for n in doc["not_applied"]:
        console.print(f"[yellow]not applied:[/] {escape(n['finding'])}: {escape(n['why'])}")
    console.print(f"{doc['held']} of {doc['decidable']} decidable checks held ({len(doc['checks'])} checked)")


TABLE_BEGIN = "<!-- verify-table: generated from docs/verify/*.json by scripts/verify-table; do not edit -->"
TABLE_END = "<!-- /verify-table -->"


def _rng(r: dict) -> str:
    return f"{r['low']:,.0f} - {r['expected']:,.0f} - {r['high']:,.0f}"


def _tally(t: dict) -> str:
    def pct(held: int, of: int) -> str:
        return f" ({held / of:.0%})" if of else ""

    return (
        f"{t['checks']} checks on {t['workloads']} workloads, {t['decidable']} decidable, {t['held']} of them "
        f"held{pct(t['held'], t['decidable'])} (under the model's own ranges: {t['model_held']} of "
        f"{t['model_decidable']} decidable{pct(t['model_held'], t['model_decidable'])})"
    )


def markdown_table(rows: list[dict], summary: dict, machines: list[str]) -> str:
    """The kept checks as the markdown table docs/findings.md carries, judged against each finding's range now
    (verify/calibrate.judged: `range`, `held`, `decidable`, `held_out`), with the totals (calibrate.summary): what
    scripts/verify-table writes between TABLE_BEGIN and TABLE_END."""
    lines = [
        "| workload | batch | finding | set | the model's range, us (low - expected - high) | the range now, us "
        "| measured us (processes) | A/A us | verdict |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in sorted(rows, key=lambda r: (r["held_out"], r["model"], r["finding"])):
        m = r["measured_us"]
        procs = ", ".join(f"{x:,.0f}" for x in m.get("processes") or [m["low"], m["high"]])
        model = r.get("predicted_model") or r["predicted"]
        now = _rng(r["range"]) if r["range"] != model else "the model's"
        lines.append(
            f"| `{r['model']}` | {r['batch']} | {r['finding']} | {'held out' if r['held_out'] else 'derivation'} | "
            f"{_rng(model)} | {now} | {m['median']:,.0f} ({procs}) | {r['aa_spread_us']:,.0f} | {verdict(r)} |"
        )
    width = summary["median_width_over_expected"]
    lines += [
        "",
        f"- Derivation (in-sample: the band is drawn to hold these): {_tally(summary['derivation'])}.",
        f"- Held out (never used to derive a range): {_tally(summary['held_out'])}.",
        f"- All: {_tally(summary['all'])}; the ranges' median width "
        + (f"{width:.2f} times their expected saving." if width is not None else "unknown (no expected saving)."),
        f"- Measured on {'; '.join(machines)}.",
    ]
    return "\n".join(lines)
