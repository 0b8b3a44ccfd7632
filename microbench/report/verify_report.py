"""The checks of `dawnscope verify` in the terminal (the document: microbench/verify/verify.py, schema
dawnscope.verify/1): per finding its predicted range, the measured saving, the A/A spread and the verdict, then the
fixes not applied and why."""

from __future__ import annotations

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
