"""The checks of `dawnscope verify` in the terminal (the document: microbench/verify/verify.py, schema
dawnscope.verify/1): per finding its predicted range, the measured saving, the A/A spread and the verdict, then the
fixes not applied and why."""

from __future__ import annotations

from microbench.report.html import fingerprint_text

COLUMNS = [
    ("finding", "left"),
    ("fix", "left"),
    ("predicted us (low - high)", "right"),
    ("measured us", "right"),
    ("processes low - high", "right"),
    ("A/A spread us", "right"),
    ("held", "left"),
]


def _verdict(c: dict) -> str:
    if not c["decidable"]:
        return "cannot tell"
    return "held" if c["held"] else "missed"


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
    rows = [
        (
            [
                c["finding"],
                c["fix"],
                f"{c['predicted']['low']:,.0f} - {c['predicted']['high']:,.0f}",
                f"{c['measured_us']['median']:,.0f}",
                f"{c['measured_us']['low']:,.0f} - {c['measured_us']['high']:,.0f}",
                f"{c['aa_spread_us']:,.0f}",
                _verdict(c),
            ],
            None if c["held"] or not c["decidable"] else "red",
        )
        for c in doc["checks"]
    ]
    if rows:
        title = "findings checked (held: the measured saving within the predicted range; cannot tell: the A/A spread could change that)"
        console.print(rich_table(COLUMNS, rows, title=title, width=console.width, kept_in=kept_in))
    for n in doc["not_applied"]:
        console.print(f"[yellow]not applied:[/] {escape(n['finding'])}: {escape(n['why'])}")
    console.print(f"{doc['held']} of {doc['decidable']} decidable checks held ({len(doc['checks'])} checked)")


TABLE_BEGIN = "<!-- verify-table: generated from docs/verify/*.json by scripts/verify-table; do not edit -->"
TABLE_END = "<!-- /verify-table -->"


def markdown_table(docs: list[dict]) -> str:
    """The checks of several `verify --json` documents as the markdown table docs/findings.md carries, with the
    totals: what scripts/verify-table writes between TABLE_BEGIN and TABLE_END."""
    lines = [
        "| workload | batch | finding | fix | predicted us (low - expected - high) | measured us (processes) | A/A us | verdict |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    held = decided = checked = 0
    for doc in docs:
        for c in doc["checks"]:
            p, m = c["predicted"], c["measured_us"]
            procs = ", ".join(f"{x:,.0f}" for x in m.get("processes") or [m["low"], m["high"]])
            lines.append(
                f"| `{doc['model']}` | {doc['batch']} | {c['finding']} | {c['fix']} | {p['low']:,.0f} - "
                f"{p['expected']:,.0f} - {p['high']:,.0f} | {m['median']:,.0f} ({procs}) | {c['aa_spread_us']:,.0f} | "
                f"{_verdict(c)} |"
            )
            checked += 1
            decided += c["decidable"]
            held += c["held"] and c["decidable"]
    machines = sorted({fingerprint_text(doc["fingerprint"], doc["software"]) for doc in docs})
    lines.append("")
    lines.append(f"{held} of {decided} decidable checks held ({checked} checked); measured on {'; '.join(machines)}.")
    return "\n".join(lines)
