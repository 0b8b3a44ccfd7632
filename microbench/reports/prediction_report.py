"""The prediction's report (microbench.prediction; docs/predict.md): the source and the prediction side by side by
class, the totals with their range and dominant assumption, the kernels not placed. Terminal and HTML from the
same tables."""
from __future__ import annotations

from microbench.reports.cells import or_dash
from microbench.reports.html import esc, notes_html, page, table


def _us(v) -> str:
    return or_dash(v, ",.1f")


def _ratio(v) -> str:
    return or_dash(v, ".2f") + ("x" if v is not None else "")


def figures(chip: dict | None) -> str:
    """The target's achievable figures with where each came from."""
    if not chip:
        return "-"
    src = chip.get("sources", {})
    parts = [f"{p} {v:,.1f} TFLOP/s ({src.get(p, '?')})" for p, v in chip["tflops"].items() if p in ("bf16", "fp16", "fp32", "tf32")]
    parts.append(f"memory {chip['memory_tbs']:.2f} TB/s ({src.get('memory', '?')})")
    parts.append(f"floor {chip['floor_us']:.2f} us ({src.get('floor', '?')})")
    parts.append(f"{chip['compute_units']} SMs/CUs" if chip.get("compute_units") else "SM/CU count unknown")
    return "; ".join(parts)


def headline(doc: dict) -> list[str]:
    s, t, r = doc["source"], doc["target"], doc["range"]
    dom = next((a for a in r["assumptions"] if a["name"] == r["dominant"]), None)
    lines = [f"source {s['device']}: GPU busy {_us(s['busy_us'])} us (kernels {_us(s['kernel_time_us'])} us), idle "
             f"{_us(s['idle_us'])} us, {s['steps']} step(s)",
             f"target {t['device']}: GPU busy {_us(t['busy_us'])} us, range {_us(t['busy_us_low'])} - "
             f"{_us(t['busy_us_high'])} us; idle held at {_us(t['idle_us'])} us"]
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
        lines.append(f"{len(doc['unplaced'])} kernel name(s) not placed, kept at the source's time: "
                     f"{_us(doc['unplaced_us'])} us")
    if doc.get("above_roof_kernels"):
        lines.append(f"flag: {doc['above_roof_kernels']} kernel(s) predicted faster than the target's datasheet "
                     "roofline allows: impossible, raised to it (check the inputs)")
    return lines


def tables(doc: dict) -> list[tuple[str, list[tuple[str, str]], list[list[str]]]]:
    """(title, columns, rows) of each table of the report."""
    s_dev, t_dev = doc["source"]["device"], doc["target"]["device"]
    cls = ("by class (us)", [("class", "left"), ("kernels", "right"), (f"source {s_dev}", "right"),
                             (f"target {t_dev}", "right"), ("target / source", "right")],
           [[c["label"], "-" if c["kernels"] is None else str(c["kernels"]), _us(c["source_us"]), _us(c["target_us"]),
             _ratio(c["ratio"])] for c in doc["classes"]])
    rng = ("the range: each assumption replaced by its alternative", [("assumption", "left"), ("alternative", "left"),
                                                                     ("busy us", "right"), ("move us", "right")],
           [[a["name"], a["what"], _us(a["busy_us"]), f"{a['delta_us']:+,.1f}"] for a in doc["range"]["assumptions"]])
    top = ("top kernels by source time", [("kernel", "left"), ("class", "left"), ("calls", "right"),
                                          ("source us", "right"), ("target us", "right")],
           [[k["kernel"][:90], k["class"], str(k["calls"]), _us(k["source_us"]), _us(k["target_us"])]
            for k in doc["kernels"]])
    ops = ("modelled operators (their kernels' time)", [("op", "left"), ("kernels", "right"), ("source us", "right"),
                                                          ("target us", "right")],
           [[o["op"], str(o["kernels"]), _us(o["source_us"]), _us(o["target_us"])] for o in doc.get("ops", [])])
    steps = ("per step (busy us over each step's own activities)", [("step", "left"), ("source", "right"),
                                                                  ("target", "right"), ("idle (held)", "right")],
             [[st["name"], _us(st["source_busy_us"]), _us(st["target_busy_us"]), _us(st["idle_us"])]
              for st in doc.get("steps", [])])
    out = [cls, rng] + ([steps] if len(doc.get("steps", [])) > 1 else []) + ([top] if doc["kernels"] else []) \
        + ([ops] if doc.get("ops") else [])
    if doc.get("unplaced"):
        out.append(("not placed (kept at the source's time)", [("kernel", "left"), ("why", "left"),
                                                                ("calls", "right"), ("time us", "right")],
                    [[u["kernel"][:90], u["why"], str(u["calls"]), _us(u["time_us"])] for u in doc["unplaced"]]))
    return out


def print_prediction(doc: dict, console=None) -> None:
    from rich.markup import escape
    from rich.table import Table

    from microbench.reports.report import wide_console

    console = console or wide_console()
    for line in headline(doc):
        console.print(escape(line))
    for title, cols, rows in tables(doc):
        t = Table(title=title, header_style="bold")
        for c, j in cols:
            t.add_column(c, justify=j)
        for r in rows:
            t.add_row(*[escape(x) for x in r])
        console.print(t)
    for n in doc.get("notes", []):
        console.print(f"[yellow]note:[/] {escape(n)}")


def prediction_html(doc: dict) -> str:
    body = "".join(f"<p>{esc(line)}</p>" for line in headline(doc))
    for title, cols, rows in tables(doc):
        body += f"<h2>{esc(title)}</h2>" + table(cols, [(r, None) for r in rows])
    body += notes_html(doc.get("notes", []))
    return page(f"{doc['source']['device']} -> {doc['target']['device']}: predicted", body)
