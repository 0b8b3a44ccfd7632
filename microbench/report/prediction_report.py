"""The prediction's report (microbench.predict; docs/predict.md): the source and the prediction side by side by
class, the totals with their range and dominant assumption, the kernels not placed. Terminal and HTML from the
same tables."""

from __future__ import annotations

from microbench.core.kernel_names import distinct_labels
from microbench.report.cells import KERNEL_WIDTH, LeftOut, fit_columns, or_dash
from microbench.report.cells import kept_in as kept_in_text
from microbench.report.html import esc, notes_html, page, table

KEPT_IN = kept_in_text(what="prediction")
# The kernel table's columns a narrow terminal drops first: the kernel's label and its two times stay.
KERNEL_DROP_ORDER = ("calls", "class")


def _us(v) -> str:
    return or_dash(v, ",.1f")


def _ratio(v) -> str:
    return or_dash(v, ".2f") + ("x" if v is not None else "")


def figures(chip: dict | None) -> str:
    """The target's achievable figures with where each came from."""
    if not chip:
        return "-"
    src = chip.get("sources", {})
    parts = [
        f"{p} {v:,.1f} TFLOP/s ({src.get(p, '?')})"
        for p, v in chip["tflops"].items()
        if p in ("bf16", "fp16", "fp32", "tf32")
    ]
    parts.append(f"memory {chip['memory_tbs']:.2f} TB/s ({src.get('memory', '?')})")
    parts.append(f"floor {chip['floor_us']:.2f} us ({src.get('floor', '?')})")
    parts.append(f"{chip['compute_units']} SMs/CUs" if chip.get("compute_units") else "SM/CU count unknown")
    return "; ".join(parts)


def headline(doc: dict) -> list[str]:
    s, t, r = doc["source"], doc["target"], doc["range"]
    dom = next((a for a in r["assumptions"] if a["name"] == r["dominant"]), None)
    lines = [
        f"source {s['device']}: GPU busy {_us(s['busy_us'])} us (kernels {_us(s['kernel_time_us'])} us), idle "
        f"{_us(s['idle_us'])} us, {s['steps']} step(s)",
        f"target {t['device']}: GPU busy {_us(t['busy_us'])} us, range {_us(t['busy_us_low'])} - "
        f"{_us(t['busy_us_high'])} us; idle held at {_us(t['idle_us'])} us",
    ]
    v = r.get("validation")
    if v:  # a range is read with how often it held
        lines[-1] += f" (the range held the measured time in {v['held']} of {v['checks']} checks, {v['where']})"
    lines.append("target figures: " + figures(t.get("chip")))
    if dom is not None:
        lines.append(f"dominant assumption: {dom['name']} ({dom['what']}: {dom['delta_us']:+,.1f} us)")
    sc = doc.get("scenario") or {}
    if sc.get("dtype") or sc.get("batch_scale", 1.0) != 1.0:
        lines.append(f"what-if: dtype {sc.get('dtype') or 'as traced'}, work x {sc.get('batch_scale', 1.0):g}")
    if doc.get("unplaced"):
        lines.append(
            f"{len(doc['unplaced'])} kernel name(s) not placed, kept at the source's time: {_us(doc['unplaced_us'])} us"
        )
    if doc.get("above_roof_kernels"):
        lines.append(
            f"flag: {doc['above_roof_kernels']} kernel(s) predicted faster than the target's datasheet "
            "roofline allows: impossible, raised to it (check the inputs)"
        )
    return lines


def _html_names(rows: list[dict]) -> list[str]:
    return [r["kernel"][:90] for r in rows]


def terminal_labels(rows: list[dict]) -> list[str]:
    """Kernel names as the trace report labels them (core.kernel_names: no `void`, namespaces or parameter list,
    look-alikes apart; a copy keeps its name)."""
    return distinct_labels([r["kernel"] for r in rows], KERNEL_WIDTH)


def tables(doc: dict, labels=_html_names) -> list[tuple[str, list[tuple[str, str]], list[list[str]]]]:
    """(title, columns, rows) of each table of the report; `labels`: kernel rows -> the kernel column's cells."""
    s_dev, t_dev = doc["source"]["device"], doc["target"]["device"]
    cls = (
        "by class (us)",
        [
            ("class", "left"),
            ("kernels", "right"),
            (f"source {s_dev}", "right"),
            (f"target {t_dev}", "right"),
            ("target / source", "right"),
        ],
        [
            [
                c["label"],
                "-" if c["kernels"] is None else str(c["kernels"]),
                _us(c["source_us"]),
                _us(c["target_us"]),
                _ratio(c["ratio"]),
            ]
            for c in doc["classes"]
        ],
    )
    rng = (
        "the range: each assumption replaced by its alternative",
        [("assumption", "left"), ("alternative", "left"), ("busy us", "right"), ("move us", "right")],
        [[a["name"], a["what"], _us(a["busy_us"]), f"{a['delta_us']:+,.1f}"] for a in doc["range"]["assumptions"]],
    )
    top = (
        "top kernels by source time",
        [("kernel", "left"), ("class", "left"), ("calls", "right"), ("source us", "right"), ("target us", "right")],
        [
            [label, k["class"], str(k["calls"]), _us(k["source_us"]), _us(k["target_us"])]
            for k, label in zip(doc["kernels"], labels(doc["kernels"]))
        ],
    )
    ops = (
        "modelled operators (their kernels' time)",
        [("op", "left"), ("kernels", "right"), ("source us", "right"), ("target us", "right")],
        [[o["op"], str(o["kernels"]), _us(o["source_us"]), _us(o["target_us"])] for o in doc.get("ops", [])],
    )
    steps = (
        "per step (busy us over each step's own activities)",
        [("step", "left"), ("source", "right"), ("target", "right"), ("idle (held)", "right")],
        [
            [st["name"], _us(st["source_busy_us"]), _us(st["target_busy_us"]), _us(st["idle_us"])]
            for st in doc.get("steps", [])
        ],
    )
    out = (
        [cls, rng]
        + ([steps] if len(doc.get("steps", [])) > 1 else [])
        + ([top] if doc["kernels"] else [])
        + ([ops] if doc.get("ops") else [])
    )
    if doc.get("unplaced"):
        out.append(
            (
                "not placed (kept at the source's time)",
                [("kernel", "left"), ("why", "left"), ("calls", "right"), ("time us", "right")],
                [
                    [label, u["why"], str(u["calls"]), _us(u["time_us"])]
                    for u, label in zip(doc["unplaced"], labels(doc["unplaced"]))
                ],
            )
        )
    return out


def print_prediction(doc: dict, console=None, kept_in: str = KEPT_IN) -> None:
    """The report; `kept_in`: where the columns a narrow terminal leaves out are (the files the command wrote)."""
    from rich.markup import escape
    from rich.table import Table

    from microbench.report.roofline_report import rich_table, wide_console

    console = console or wide_console()
    for line in headline(doc):
        console.print(escape(line))
    left = LeftOut(kept_in)
    for title, cols, rows in tables(doc, terminal_labels):
        if cols[0][0] == "kernel" and cols[1][0] == "class":  # labels never wrap: the table drops columns instead
            fit = left.add(
                "top kernels", fit_columns(cols, [(r, None) for r in rows], console.width, KERNEL_DROP_ORDER)
            )
            console.print(rich_table(fit.columns, fit.rows, title=title))
            continue
        t = Table(title=title, header_style="bold")
        for c, j in cols:
            t.add_column(c, justify=j, no_wrap=c == "kernel")
        for r in rows:
            t.add_row(*[escape(x) for x in r])
        console.print(t)
    for n in doc.get("notes", []):
        console.print(f"[yellow]note:[/] {escape(n)}")
    if line := left.line():
        console.print(f"[dim]{escape(line)}[/]")


def prediction_html(doc: dict) -> str:
    body = "".join(f"<p>{esc(line)}</p>" for line in headline(doc))
    for title, cols, rows in tables(doc):
        body += f"<h2>{esc(title)}</h2>" + table(cols, [(r, None) for r in rows])
    body += notes_html(doc.get("notes", []))
    return page(f"{doc['source']['device']} -> {doc['target']['device']}: predicted", body)
