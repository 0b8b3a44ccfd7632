"""The gate's verdict in the terminal (the document: microbench/gate/gate.py, schema dawnscope.gate/1): the two
captures, why they cannot be compared where they cannot, then what got slower, what got faster and what is
unchanged within its noise floor, and the verdict with its exit code."""

from __future__ import annotations

from microbench.report.cells import or_dash as _f

ORDER = ("failed", "lost Tensor Cores", "slower", "faster", "unchanged", "not judged")
STYLE = {"failed": "bold red", "lost Tensor Cores": "bold red", "slower": "bold red", "faster": "green"}
UNCHANGED_SHOWN = 15  # unchanged and not-judged rows beyond this are counted, not listed (all are in --json)
COLUMNS = [
    ("verdict", "left"),
    ("metric", "left"),
    ("name", "left"),
    ("baseline", "right"),
    ("current", "right"),
    ("unit", "left"),
    ("change", "right"),
    ("noise floor", "right"),
    ("why", "left"),
]
DROP_ORDER = ["why", "unit", "noise floor", "metric"]
VERDICT_LINE = {
    "pass": "[green]no regression[/] beyond the noise floor (exit 0)",
    "regression": "[bold red]regression[/] (exit 1)",
    "incomparable": "[bold yellow]the captures cannot be compared[/] (exit 2)",
}


def _value(r: dict, key: str) -> str:
    v = r[key]
    if v is None:
        return "-"
    return f"{v:.1%}" if r["unit"] == "share" else _f(v, ",.4g")


def _change(r: dict) -> str:
    if r["change"] is None:
        return "-"
    return f"{r['change'] * 100:+.1f} pt" if r["unit"] == "share" else f"{r['change']:+.1%}"


def print_gate(doc: dict, console=None, kept_in: str = "the gate's --json file") -> None:
    from rich.markup import escape

    from microbench.report.roofline_report import rich_table, wide_console

    console = console or wide_console()
    for which in ("baseline", "current"):
        console.print(f"[bold]{which}:[/] {escape(doc[which]['file'])}  [dim]{escape(doc[which]['fingerprint'])}[/]")
    for i in doc["incomparable"]:
        console.print(f"[bold yellow]cannot compare ({escape(i['what'])}):[/] {escape(i['detail'])}")
    rows = sorted(doc["rows"], key=lambda r: ORDER.index(r["verdict"]))
    shown = [r for r in rows if r["verdict"] not in ("unchanged", "not judged")]
    quiet = [r for r in rows if r["verdict"] in ("unchanged", "not judged")]
    shown += quiet[:UNCHANGED_SHOWN]
    cells = [
        (
            [
                r["verdict"],
                r["metric"],
                r["name"],
                _value(r, "baseline"),
                _value(r, "current"),
                r["unit"],
                _change(r),
                f"{r['noise_floor']:.1%}",
                r["why"],
            ],
            STYLE.get(r["verdict"]),
        )
        for r in shown
    ]
    if cells:
        title = "what changed (change: current against baseline; noise floor: the larger of the threshold and the rows' own spread)"
        console.print(
            rich_table(COLUMNS, cells, title=title, width=console.width, drop_order=DROP_ORDER, kept_in=kept_in)
        )
    if len(quiet) > UNCHANGED_SHOWN:
        console.print(f"[dim]{len(quiet) - UNCHANGED_SHOWN} more unchanged or not judged rows: {kept_in}[/]")
    for m in doc["missing"][:10]:
        console.print(f"[yellow]missing:[/] {escape(m['name'])} is not in the {m['missing_in']}")
    for n in doc["notes"]:
        console.print(f"[yellow]note:[/] {escape(n)}")
    c = doc["counts"]
    counts = (
        f"{doc['regressions']} regression(s), {c['faster']} faster, {c['unchanged']} unchanged within noise, "
        f"{c['not judged']} not judged"
    )
    if doc["verdict"] == "incomparable":  # the rows are there to read; no verdict is drawn from them
        counts = f"as read ({counts}), no verdict"
    console.print(f"{counts}: " + VERDICT_LINE[doc["verdict"]])
