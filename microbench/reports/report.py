"""Reports from result rows: the terminal table (rich) and the roofline plot (matplotlib)."""
from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.table import Table

from microbench.core import dtypes, ops
from microbench.core.results import ResultRow, rows_of

DTYPE_COLORS = {d.name: d.color for d in dtypes.TABLE}
PROVIDER_MARKERS = ["o", "s", "^", "D", "v", "P", "X", "*"]


def _fmt(v, spec: str = ".3g", none: str = "-") -> str:
    return none if v is None else format(v, spec)


def _case_of(r: ResultRow) -> tuple:
    """A row's case without its provider: the rows a baseline ratio compares."""
    op, shape, dtype, _provider, layer, phase = r.key()
    return op, shape, dtype, layer, phase


def baseline_ratios(rows) -> dict[int, float]:
    """Row index -> its speed relative to the baseline provider's row of the same case (time ratio)."""
    rows = rows_of(rows)
    base = {_case_of(r): r.time_ms["median"] for r in rows if r.is_baseline and r.time_ms}
    out = {}
    for i, r in enumerate(rows):
        t = base.get(_case_of(r))
        if t and r.time_ms:
            out[i] = t / r.time_ms["median"]
    return out


def results_cells(doc: dict) -> tuple[list[tuple[str, str]], list[tuple[list[str], str | None]]]:
    """The results table as text: columns (name, justification) and rows (cells, style). The terminal
    table and the HTML report both draw it. Rows of every kind: their subject's flat view, their measurement."""
    rows = rows_of(doc["results"])
    ratios = baseline_ratios(rows)
    ds_label = "% est." if doc.get("hardware", {}).get("kind") == "cpu" else "% datasheet"
    columns = [("op", "left"), ("shape", "left"), ("dtype", "left"), ("provider", "left"),
               ("status", "left"), ("time ms (cov)", "right"), ("TFLOP/s", "right"),
               ("% measured", "right"), (ds_label, "right"), ("% roof", "right"), ("bound", "left"),
               ("TC", "left"), ("vs base", "right")]
    out = []
    for i, r in enumerate(rows):
        tm = r.time_ms or {}
        status = r.status
        style = {"wrong": "red", "failed": "red", "skipped": "dim"}.get(status)
        if status == "ok" and not tm:
            status = "ok (untimed)"
        if r.flags:
            status += " !"
        timing = f"{tm['median']:.4g} ({tm['cov']:.0%})" if tm else "-"
        f = r.flat()
        out.append(([ops.short_op(f["op"]), f["shape"], f["dtype"], f["provider"], status, timing,
                     _fmt(r.tflops, ".3g"), _fmt(r.pct_of_measured, ".0f"),
                     _fmt(r.pct_of_datasheet, ".0f"), _fmt(r.pct_of_ceiling, ".0f"),
                     r.bound or "-", r.tensor_cores,
                     _fmt(ratios.get(i), ".2f") + ("x" if i in ratios else "")], style))
    return columns, out


def results_table(doc: dict, title: str | None = None) -> Table:
    columns, rows = results_cells(doc)
    t = Table(title=title, show_lines=False, header_style="bold")
    for col, just in columns:
        t.add_column(col, justify=just, no_wrap=col not in ("shape",))
    for cells, style in rows:
        t.add_row(*cells, style=style)
    return t


def wide_console() -> Console:
    """A terminal keeps its width; a pipe or file gets room for the whole table."""
    import sys

    return Console() if sys.stdout.isatty() else Console(width=200)


def print_report(doc: dict, console: Console | None = None) -> None:
    console = console or wide_console()
    from microbench.core.fingerprint import fingerprint_line

    console.print(results_table(doc, title=f"dawnscope: {fingerprint_line(doc['hardware'], doc['software'])}"))
    ceil = Table(title="ceilings", header_style="bold")
    for col in ("name", "kind", "dtype", "value", "unit", "source", "note"):
        ceil.add_column(col)
    for c in doc.get("ceilings", []):
        ceil.add_row(c["name"], c["kind"], c.get("dtype") or "-", f"{c['value']:.4g}", c["unit"], c["source"],
                     c.get("note", ""))
    console.print(ceil)
    for note in doc.get("notes", []):
        console.print(f"[yellow]note:[/] {note}")
    for msg, n in reason_counts(doc["results"]).items():
        console.print(f"[dim]{n} row(s): {msg}[/]")


def reason_counts(rows) -> dict[str, int]:
    """Why rows were not timed, or were flagged, counted by reason. Numbers in a reason (sizes, percentages,
    estimates) differ from row to row; they are folded so that one cause is one line."""
    import re

    counts: dict[str, int] = {}
    for r in rows_of(rows):
        who = r.flat()["provider"]
        if r.status != "ok" or r.flags:
            msg = f"{who} {r.status}: {r.reason or '; '.join(r.flags)}"
        elif not r.time_ms and r.reason:
            msg = f"{who} untimed: {r.reason}"
        else:
            continue
        msg = re.sub(r"(?<![\w.])\d+(\.\d+)?(e[+-]?\d+)?(?![\w.])", "N", msg)  # not the 32 of fp32
        counts[msg] = counts.get(msg, 0) + 1
    return counts


def roofline_figure(doc: dict):
    """The roofline as a matplotlib figure: log-log, the memory roof and one compute roof per precision
    (measured solid, datasheet or estimate dashed), one point per timed row. The caller closes it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ceilings = doc.get("ceilings", [])
    rows = [r for r in rows_of(doc["results"]) if r.tflops and r.intensity]
    xs = [r.intensity for r in rows] or [1.0]
    x_lo, x_hi = min(xs + [0.1]) / 2, max(xs + [1000.0]) * 2
    fig, ax = plt.subplots(figsize=(10, 6.5))
    ax.set_xscale("log")
    ax.set_yscale("log")
    mems = {c["source"]: c for c in ceilings if c["kind"] == "memory"}
    comps = [c for c in ceilings if c["kind"] == "compute"]
    grid = [x_lo * (x_hi / x_lo) ** (i / 200) for i in range(201)]
    top = max([c["value"] for c in comps] + [r.tflops for r in rows] + [1e-3])
    for src, c in mems.items():
        ls = "-" if src == "measured" else "--"
        ys = [c["value"] * 1e9 * x / 1e12 for x in grid]
        ax.plot(grid, ys, color="black", ls=ls, lw=1.5, label=f"memory {c['value']:.4g} GB/s ({src})")
        # Compute roofs meet the memory roof at their ridge points.
    for c in comps:
        ls = "-" if c["source"] == "measured" else "--"
        color = DTYPE_COLORS.get(c["dtype"], "gray")
        mem = mems.get("measured" if c["source"] == "measured" else "datasheet") or mems.get("measured")
        x0 = c["value"] * 1e12 / (mem["value"] * 1e9) if mem else x_lo
        ax.plot([max(x0, x_lo), x_hi], [c["value"]] * 2, color=color, ls=ls, lw=1.2,
                label=f"{c['dtype']} {c['value']:.4g} TFLOP/s ({c['source']})")
    providers = sorted({r.flat()["provider"] for r in rows})
    for r in rows:
        f = r.flat()
        m = PROVIDER_MARKERS[providers.index(f["provider"]) % len(PROVIDER_MARKERS)]
        ax.scatter(r.intensity, r.tflops, marker=m, s=28, color=DTYPE_COLORS.get(f["dtype"], "gray"),
                   edgecolors="black", linewidths=0.4, zorder=3)
    for p in providers:
        m = PROVIDER_MARKERS[providers.index(p) % len(PROVIDER_MARKERS)]
        ax.scatter([], [], marker=m, color="white", edgecolors="black", label=f"provider {p}")
    ax.set_xlim(x_lo, x_hi)
    bottom = min([r.tflops for r in rows] + [top]) / 10
    ax.set_ylim(bottom, top * 3)
    ax.set_xlabel("arithmetic intensity (FLOP / byte of minimum traffic)")
    ax.set_ylabel("TFLOP/s")
    hw = doc.get("hardware", {})
    ax.set_title(f"roofline: {hw.get('name', '?')} ({hw.get('arch', '?')}), profile {doc.get('config', {}).get('profile', '?')}")
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(fontsize=7, loc="lower right", ncol=2)
    fig.tight_layout()
    return fig


def plot_roofline(doc: dict, out_stem: Path) -> list[Path]:
    """roofline.png and roofline.svg (roofline_figure)."""
    import matplotlib.pyplot as plt

    fig = roofline_figure(doc)
    paths = [out_stem.with_suffix(".png"), out_stem.with_suffix(".svg")]
    for p in paths:
        fig.savefig(p, dpi=130)
    plt.close(fig)
    return paths
