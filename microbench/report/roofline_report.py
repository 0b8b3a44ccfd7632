"""Reports from result rows: the terminal table (rich) and the roofline plot (matplotlib)."""

from __future__ import annotations

import math
import os
import re
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from microbench.core import dtypes, ops
from microbench.core.args import digits
from microbench.core.conditions import busy_advice
from microbench.core.fingerprint import fingerprint_line
from microbench.core.results import rows_of
from microbench.core.stats import spreads_overlap
from microbench.core.verdict import is_above_roof, is_noisy, untrusted_word
from microbench.report.cells import fit_columns
from microbench.report.cells import or_dash as _fmt
from microbench.report.figures import pyplot

DTYPE_COLORS = {d.name: d.color for d in dtypes.TABLE}
PROVIDER_MARKERS = ["o", "s", "^", "D", "v", "P", "X", "*"]


def _dicts(rows) -> list[dict]:
    """Rows of any kind as a results file's flat dicts (op, shape, dtype, provider, baseline, flags, ...)."""
    return [r.as_dict() for r in rows_of(rows)]


_noisy, _above = is_noisy, is_above_roof  # the judge's verdicts (core.verdict), as a results file holds them


def baseline_ratios(rows) -> dict[int, str]:
    """Row index -> its speed relative to the baseline provider's row of the same case (baseline time / this
    time), as text: \"same\" where the two rows' p20-p80 spreads overlap, \"noise\" where either is noisy."""
    rows = _dicts(rows)
    base = {}
    for r in rows:
        if r.get("baseline") and r.get("time_ms"):
            base[(r["op"], r["shape"], r["dtype"], r.get("layer"), r.get("phase"))] = r
    out = {}
    for i, r in enumerate(rows):
        b = base.get((r["op"], r["shape"], r["dtype"], r.get("layer"), r.get("phase")))
        if b is None or not r.get("time_ms") or b is r:
            continue
        if (word := untrusted_word(r) or untrusted_word(b)) is not None:
            out[i] = word
        elif spreads_overlap(b["time_ms"], r["time_ms"]):
            out[i] = "same"
        else:
            out[i] = f"{b['time_ms']['median'] / r['time_ms']['median']:.2f}x"
    return out


# What each column of the results table means (the HTML report prints this under the table).
GLOSSARY = {
    "#": "row number; the same number marks the row's point on the roofline plot",
    "op": "gemm, or a convolution direction: conv fwd, conv bwd_data (input gradient), conv bwd_weight",
    "shape": "gemm: MxNxK (batch x [..] when batched, A^T / B^T when stored transposed); conv: batch n, input "
    "channels c, height x width, output channels k, filter, stride s, padding p, dilation d, groups g",
    "dtype": "fp32 (IEEE, TF32 forbidden), tf32 (fp32 storage, TF32 math allowed), fp16, bf16, fp8_e4m3",
    "provider": "who computed it: torch (the vendor library: cuBLAS/cuDNN, hipBLASLt/MIOpen, MKL/oneDNN), "
    "cupy_blas, our triton and cupy kernels",
    "status": "ok; noisy (timed, but its repeats disagree: see flags, no verdict drawn); ok ! (flagged); "
    "untimed (correct, not timed here); skipped, wrong (failed the float64 check), failed",
    "time ms (cov)": "median time of one call over the repeats, and the coefficient of variation (std / mean)",
    "TFLOP/s": "FLOPs of the case (2 per multiply-add) / median time",
    "% measured": "of the measured compute ceiling of this dtype (the best vendor GEMM the ceiling search found)",
    "% est.": "of the CPU's estimated compute peak (cores x clock x FLOPs per cycle of its widest vector unit): "
    "an upper bound, not a datasheet value",
    "% datasheet": "of the datasheet compute peak of this dtype",
    "% roof": "of the measured roofline at the row's arithmetic intensity: min(compute ceiling, memory "
    "bandwidth x intensity)",
    "bound": "which roof limits the row at its intensity: compute or memory",
    "TC": "did Tensor Cores (CPU: matrix units such as AMX or AVX-512 BF16 dot products) do the work: yes, no, "
    "unknown; the evidence (SASS, kernel name, oneDNN implementation) is in results.json",
    "vs base": "speed against the baseline provider's row of the same case (baseline time / this time); same: "
    "their p20-p80 spreads overlap; noise: either row is noisy; flagged: either row's number cannot be "
    "right (its flag says why)",
}


def _status(r: dict) -> str:
    status = r["status"]
    if status == "ok" and not r.get("time_ms"):
        return "untimed"
    if status == "ok" and _noisy(r):
        return "noisy"
    return status + (" !" if r.get("flags") else "")


def results_cells(doc: dict) -> tuple[list[tuple[str, str]], list[tuple[list[str], str | None]]]:
    """The results table as text: columns (name, justification) and rows (cells, style). The terminal
    table and the HTML report both draw it; "#" numbers the rows as the roofline plot does. Rows of every kind:
    their subject's flat view, their measurement."""
    rows = _dicts(doc["results"])
    ratios = baseline_ratios(rows)
    ds_label = "% est." if doc.get("hardware", {}).get("kind") == "cpu" else "% datasheet"
    columns = [
        ("#", "right"),
        ("op", "left"),
        ("shape", "left"),
        ("dtype", "left"),
        ("provider", "left"),
        ("status", "left"),
        ("time ms (cov)", "right"),
        ("TFLOP/s", "right"),
        ("% measured", "right"),
        (ds_label, "right"),
        ("% roof", "right"),
        ("bound", "left"),
        ("TC", "left"),
        ("vs base", "right"),
    ]
    out = []
    for i, r in enumerate(rows):
        tm = r.get("time_ms") or {}
        style = {"wrong": "red", "failed": "red", "skipped": "dim"}.get(r["status"])
        if r["status"] == "ok" and _noisy(r):
            style = "yellow"
        timing = f"{tm['median']:.4g} ({tm['cov']:.0%})" if tm else "-"
        out.append(
            (
                [
                    str(i + 1),
                    ops.short_op(r["op"] or ""),
                    r["shape"] or "",
                    r["dtype"] or "",
                    r["provider"] or "",
                    _status(r),
                    timing,
                    _fmt(r.get("tflops"), ".3g"),
                    _fmt(r.get("pct_of_measured"), ".0f"),
                    _fmt(r.get("pct_of_datasheet"), ".0f"),
                    _fmt(r.get("pct_of_ceiling"), ".0f"),
                    r.get("bound") or "-",
                    r.get("tensor_cores", "unknown"),
                    ratios.get(i, "-"),
                ],
                style,
            )
        )
    return columns, out


# Columns a narrow terminal drops first (the HTML report and results.json keep them all).
DROP_ORDER = ("bound", "% est.", "% datasheet", "% measured", "TC", "TFLOP/s")


def _table(columns, rows, title: str | None = None) -> Table:
    from rich import box
    from rich.markup import escape

    t = Table(
        title=title, header_style="bold", box=box.SIMPLE_HEAD, padding=0
    )  # the box puts one space between columns
    for col, just in columns:
        t.add_column(escape(col), justify=just, no_wrap=True)
    for cells, style in rows:
        t.add_row(*[escape(c) for c in cells], style=style)
    return t


def _natural_width(t: Table) -> int:
    return Console(width=100_000).measure(t).maximum


def rich_table(
    columns,
    rows,
    title: str | None = None,
    width: int | None = None,
    drop_order=DROP_ORDER,
    kept_in: str = "report.html and results.json",
):
    """A compact rich table (no vertical rules) of text cells. At `width`, the least important columns
    (drop_order) go first, so that op, shape, dtype and provider are never cut. The title is a wrapped
    line above the table (a title wider than the columns would make rich squeeze them). Returns the table,
    or a group of the title, the table and a line naming the dropped columns."""
    from rich.console import Group
    from rich.text import Text

    fit = fit_columns(columns, rows, width, drop_order)  # the one rule of what a narrow table keeps (cells.py)
    t = _table(fit.columns, fit.rows)
    parts = ([Text(title, style="bold")] if title else []) + [t]
    said = []
    if fit.dropped:  # a caption wider than the columns would squeeze them too
        said.append(f"columns {', '.join(fit.dropped)} are in {kept_in}")
    if fit.empty:
        said.append(f"columns with no value in any row left out: {', '.join(fit.empty)}")
    if said:
        parts.append(Text("narrow terminal: " + "; ".join(said), style="dim"))
    return Group(*parts) if len(parts) > 1 else t


def providers_that_cannot_run(doc: dict) -> dict[str, tuple[int, str]]:
    """Providers every row of which was skipped (a GPU provider on a CPU, a library that is not installed):
    provider -> (rows, the reason, or the first of them). The terminal table shows them as one line each, so that
    it shows what was measured."""
    by: dict[str, list[dict]] = {}
    for r in _dicts(doc["results"]):
        by.setdefault(r.get("provider") or "", []).append(r)
    return {
        p: (len(rs), rs[0].get("reason") or "skipped")
        for p, rs in by.items()
        if p and len(rs) > 1 and all(r["status"] == "skipped" for r in rs)
    }


def results_table(
    doc: dict,
    title: str | None = None,
    width: int | None = None,
    group_skipped: bool = False,
    kept_in: str = "report.html and results.json",
):
    """The results table; with `group_skipped`, without the rows of providers_that_cannot_run (the caller says
    them in one line each). The row numbers stay those of the file and the plot."""
    columns, rows = results_cells(doc)
    if group_skipped and (gone := providers_that_cannot_run(doc)):
        prov = [c[0] for c in columns].index("provider")
        rows = [(cells, style) for cells, style in rows if cells[prov] not in gone]
    return rich_table(columns, rows, title, width, kept_in=kept_in)


PIPED_WIDTH = 120  # columns of a pipe or a file unless COLUMNS says otherwise: a log viewer, a CI page


def piped_width() -> int:
    """The width tables are laid out for when not on a terminal: COLUMNS if set to a number, else 120."""
    text = os.environ.get("COLUMNS", "")
    return int(text) if digits(text) and int(text) >= 40 else PIPED_WIDTH


class _ReportConsole(Console):
    """rich's Console, but a reader that goes away (`| head`) ends the command through core.errors.run_command
    (quietly, exit 141, like every other command's output) instead of rich's own SystemExit(1)."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        raise BrokenPipeError


def wide_console(stderr: bool = False) -> Console:
    """A terminal keeps its width; a pipe or a file gets piped_width() (tables drop their least important
    columns to fit it, never the key ones)."""
    stream = sys.stderr if stderr else sys.stdout
    return _ReportConsole(stderr=stderr) if stream.isatty() else _ReportConsole(stderr=stderr, width=piped_width())


def busy_line(doc: dict) -> str | None:
    """The warning a busy run's report starts with (results.json `conditions`), or None."""
    cond = doc.get("conditions") or {}
    return busy_advice(cond) if cond.get("busy") else None


def print_report(doc: dict, console: Console | None = None) -> None:
    from rich.markup import escape

    console = console or wide_console()
    if warn := busy_line(doc):
        console.print(f"[bold red]warning:[/] {escape(warn)}")
    console.print(
        results_table(
            doc,
            title=f"dawnscope: {fingerprint_line(doc['hardware'], doc['software'])}",
            width=console.width,
            group_skipped=True,
        )
    )
    if gone := providers_that_cannot_run(doc):
        console.print(
            f"[dim]not in the table: the {sum(n for n, _ in gone.values())} rows of "
            f"{', '.join(gone)}, which cannot run here (why: the lines below)[/]"
        )
    cols = [("name", "left"), ("value", "right"), ("unit", "left"), ("source", "left"), ("note", "left")]
    crow = [
        (
            [
                c["name"],
                f"{c['value']:.4g}",
                c["unit"],
                c["source"],
                (c.get("note") or "") + ("; NOISY: " + "; ".join(c["noise"]) if c.get("noise") else ""),
            ],
            "yellow" if c.get("noise") else None,
        )
        for c in doc.get("ceilings", [])
    ]
    ct = rich_table(cols, crow)
    ct.columns[-1].no_wrap = False  # the notes wrap; names and values do not
    console.print("[bold]ceilings[/]")
    console.print(ct)
    for note in doc.get("notes", []):
        console.print(f"[yellow]note:[/] {escape(note)}")
    for msg, n in reason_counts(doc["results"]).items():
        console.print(f"[dim]{n} row(s): {escape(msg)}[/]")
    if doc.get("replay"):
        print_replay(doc, console)


def _us(v) -> str:
    return "-" if v is None else f"{v:,.1f}"


def replay_cells(doc: dict) -> tuple[list[tuple[str, str]], list[tuple[list[str], str | None]]]:
    """Side by side with the trace (roofline --from-trace): per timed row of a trace's case, our time per call,
    the trace's, and ours / trace where the trace ran on this chip ("ref" where it did not: the trace's time is
    shown for reference)."""
    columns = [
        ("#", "right"),
        ("op", "left"),
        ("shape", "left"),
        ("dtype", "left"),
        ("provider", "left"),
        ("us/call here", "right"),
        ("trace us/call", "right"),
        ("here / trace", "right"),
        ("calls", "right"),
        ("trace operators", "left"),
    ]
    out = []
    for i, r in enumerate(_dicts(doc["results"])):
        src = r.get("trace_source")
        if not src or r["status"] != "ok" or not r.get("time_ms"):
            continue
        ratio = src.get("ratio_vs_trace")
        out.append(
            (
                [
                    str(i + 1),
                    ops.short_op(r["op"] or ""),
                    r["shape"] or "",
                    r["dtype"] or "",
                    r["provider"] or "",
                    _us(src.get("ours_us_per_call")),
                    _us(src.get("trace_us_per_call")),
                    f"{ratio:.2f}x" if ratio is not None else "ref",
                    str(src.get("calls")),
                    ", ".join(f"{k} x{v}" for k, v in (src.get("operators") or {}).items()),
                ],
                None,
            )
        )
    return columns, out


def replay_summary_cells(rp: dict) -> tuple[list[tuple[str, str]], list[tuple[list[str], str | None]]]:
    """Per case group of the trace: the best provider here and the trace's calls of it, here and in the trace."""
    columns = [
        ("case", "left"),
        ("calls", "right"),
        ("best here", "left"),
        ("us/call here", "right"),
        ("trace us/call", "right"),
        ("here / trace", "right"),
        ("total here us", "right"),
        ("total trace us", "right"),
    ]
    rows = [
        (
            [
                g["group"],
                str(g["calls"]),
                " + ".join(b or "none correct" for b in g["best"]),
                _us(g["ours_us_per_call"]),
                _us(g["trace_us_per_call"]),
                f"{g['ratio_vs_trace']:.2f}x" if g.get("ratio_vs_trace") is not None else "ref",
                _us(g["ours_us"]),
                _us(g["trace_us"]),
            ],
            None if g["ours_us"] is not None else "dim",
        )
        for g in rp["groups"]
    ]
    return columns, rows


def replay_lines(rp: dict) -> list[str]:
    """The summary's sentences: the comparison, the whole trace's matrix time with the best providers, what was
    left out."""
    dev = rp.get("trace_device") or "a device it does not name"
    lines = [(f"trace {rp['trace']} ({dev}): {len(rp['groups'])} case group(s), {rp['selection']}; {rp['comparison']}")]
    here = rp.get("matrix_here_us")
    total = f"{here:,.1f} us here" if here is not None else "not placed here as a whole"
    lines.append(
        f"the trace's matrix time {rp['trace_matrix_us']:,.1f} us; with the best provider here: {total} "
        f"(replayed cases {_us(rp.get('replayed_here_us'))} us here vs {_us(rp['replayed_trace_us'])} us in "
        f"the trace; the other matrix kernels {_us(rp.get('rest_here_us'))} us here vs "
        f"{_us(rp['rest_trace_us'])} us in the trace: {rp['rest_how']})"
    )
    if rp.get("below_selection"):
        b = rp["below_selection"]
        lines.append(
            f"below the selection: {len(b)} case group(s), {sum(g['trace_us'] for g in b):,.1f} us "
            "in the trace (--top / --min-share to measure them)"
        )
    for lo in rp.get("left_out", []):
        calls = f"{lo['calls']} call(s), " if lo.get("calls") else ""
        lines.append(
            f"left out: {lo['op']} {lo['shape']} {lo.get('dtype') or ''}: {calls}{lo['time_us']:,.1f} us "
            f"in the trace: {lo['why']}"
        )
    return lines


def print_replay(doc: dict, console: Console) -> None:
    from rich.markup import escape

    rp = doc["replay"]
    console.print("[bold]side by side with the trace[/]")
    console.print(rich_table(*replay_cells(doc), width=console.width, drop_order=("trace operators", "calls")))
    console.print("[bold]per case: the best provider here[/]")
    console.print(rich_table(*replay_summary_cells(rp), width=console.width))
    for line in replay_lines(rp):
        console.print(escape(line))


_NUMBER = r"(?<![\w.])\d+(\.\d+)?(e[+-]?\d+)?(?![\w.])"  # not the 32 of fp32


def reason_counts(rows) -> dict[str, int]:
    """Why rows were not timed, or were flagged, counted by reason. Numbers in a reason (sizes, percentages,
    estimates) differ from row to row: one cause is one line, each number shown as the range it took."""
    groups: dict[str, list[list[str]]] = {}
    for r in _dicts(rows):
        if r["status"] != "ok" or r.get("flags"):
            msg = f"{r['provider']} {_status(r)}: {r['reason'] or '; '.join(r.get('flags', []))}"
        elif not r.get("time_ms") and r.get("reason"):
            msg = f"{r['provider']} untimed: {r['reason']}"
        else:
            continue
        template = re.sub(_NUMBER, "\x00", msg)
        groups.setdefault(template, []).append([m.group(0) for m in re.finditer(_NUMBER, msg)])
    out = {}
    for template, values in groups.items():
        text = template
        for slot in zip(*values):
            nums = sorted(set(slot), key=float)
            rng = nums[0] if len(nums) == 1 else f"{nums[0]}-{nums[-1]}"
            text = text.replace("\x00", rng, 1)
        out[text] = len(values)
    return out


SOURCE_STYLES = {"measured": "-", "estimate": "--", "datasheet": ":"}


def _roofs(doc: dict, rows: list[dict]) -> tuple[dict, list[dict]]:
    """Memory roofs by source, and the compute roofs of the dtypes the rows have (all without rows)."""
    ceilings = doc.get("ceilings", [])
    dtypes = {r["dtype"] for r in rows}
    mems = {c["source"]: c for c in ceilings if c["kind"] == "memory"}
    comps = [c for c in ceilings if c["kind"] == "compute" and (not dtypes or c["dtype"] in dtypes)]
    return mems, comps


def _dashes(comps: list[dict]) -> tuple[dict[int, object], list[list[int]]]:
    """A line style per compute roof, and the groups of roofs at the same value and source (the fp32 and
    fp16 estimates of a CPU): those take turns along one dashed line, so every color shows."""
    groups: dict[tuple, list[int]] = {}
    for i, c in enumerate(comps):
        groups.setdefault((c["source"], round(math.log10(c["value"]) * 100) if c["value"] > 0 else 0), []).append(i)
    out = {}
    for idx in groups.values():
        for j, i in enumerate(idx):
            base = SOURCE_STYLES.get(comps[i]["source"], "-.")
            out[i] = base if len(idx) == 1 else (6 * j, (6, 6 * (len(idx) - 1)))
    return out, list(groups.values())


LABEL_PT = 9.0  # a 7-point label's height with its gap
PLOT_HEIGHT_PT = 430.0  # the axes' height in the 11 x 7 inch figure, in points


def label_lifts(values: list[float], y_lo: float, y_hi: float) -> list[float]:
    """Points to raise each roof's label (placed just above its line at the right end) so that no two overlap:
    on the log axis from y_lo to y_hi, labels closer than LABEL_PT are stacked upwards, lowest roof first
    ("bf16 estimate" no longer sits on "bf16 measured")."""
    if not values or y_hi <= y_lo or y_lo <= 0:
        return [0.0] * len(values)
    per_decade = PLOT_HEIGHT_PT / math.log10(y_hi / y_lo)
    at = [math.log10(max(v, y_lo)) * per_decade for v in values]
    lifts = [0.0] * len(values)
    last = -math.inf
    for i in sorted(range(len(values)), key=lambda k: at[k]):
        y = max(at[i], last + LABEL_PT)
        lifts[i], last = y - at[i], y
    return lifts


PLOT_WIDTH_PT = 720.0  # the axes' width in the same figure
POINT_LABEL_PT = 10.0  # points nearer than this share one label: "29,35,41" instead of three numbers on one spot


def point_label_groups(
    points: list[tuple[float, float]], x_range: tuple[float, float], y_range: tuple[float, float]
) -> list[list[int]]:
    """Indices of the points grouped so that each group gets one label: on the log-log axes, a point within
    POINT_LABEL_PT of a group's first point joins that group (rows of one shape by several providers sit on
    one spot), so no two numbers are drawn on top of each other."""
    sx = PLOT_WIDTH_PT / math.log10(x_range[1] / x_range[0])
    sy = PLOT_HEIGHT_PT / math.log10(y_range[1] / y_range[0])
    at = [(math.log10(x) * sx, math.log10(y) * sy) for x, y in points]
    groups: list[list[int]] = []
    for i, (x, y) in enumerate(at):
        home = next((g for g in groups if math.dist(at[g[0]], (x, y)) < POINT_LABEL_PT), None)
        if home is None:
            groups.append([i])
        else:
            home.append(i)
    return groups


def roofline_figure(doc: dict):
    """The roofline as a matplotlib figure: log-log, the memory roof and one compute roof per dtype present
    (color: dtype; line: measured solid, estimate dashed, datasheet dotted; each labelled at its right end),
    one point per timed row numbered as in the table (marker: provider; hollow: noisy; red ring: above its
    roof, flagged). The caller closes it."""
    plt = pyplot()

    numbered = [(i + 1, r) for i, r in enumerate(_dicts(doc["results"])) if r.get("tflops") and r.get("intensity")]
    rows = [r for _, r in numbered]
    xs = [r["intensity"] for r in rows] or [1.0]
    x_lo, x_hi = min(xs + [0.1]) / 2, max(xs + [1000.0]) * 4
    fig, ax = plt.subplots(figsize=(11, 7))
    ax.set_xscale("log")
    ax.set_yscale("log")
    mems, comps = _roofs(doc, rows)
    ridges = [
        c["value"] * 1e12 / (m["value"] * 1e9)
        for c in comps
        for m in [mems.get(c["source"]) or mems.get("measured")]
        if m and m["value"] > 0
    ]
    x_hi = max([x_hi] + [4 * r for r in ridges])  # every roof visible past its ridge, none an orphaned label
    grid = [x_lo * (x_hi / x_lo) ** (i / 200) for i in range(201)]
    top = max([c["value"] for c in comps] + [r["tflops"] for r in rows] + [1e-3])
    for src, c in mems.items():
        ys = [c["value"] * 1e9 * x / 1e12 for x in grid]
        ax.plot(
            grid,
            ys,
            color="black",
            ls=SOURCE_STYLES.get(src, "-."),
            lw=1.5,
            label=f"memory {c['value']:.4g} GB/s ({src})",
        )
    styles, groups = _dashes(comps)
    for i, c in enumerate(comps):
        color = DTYPE_COLORS.get(c["dtype"], "gray")
        mem = mems.get(c["source"]) or mems.get("measured")
        x0 = max(c["value"] * 1e12 / (mem["value"] * 1e9) if mem else x_lo, x_lo)  # the ridge point
        ax.plot(
            [x0, x_hi],
            [c["value"]] * 2,
            color=color,
            ls=styles[i],
            lw=1.6,
            label=f"{c['dtype']} {c['value']:.4g} TFLOP/s ({c['source']})",
        )
    bottom = min([r["tflops"] for r in rows] + [top]) / 10
    lifts = label_lifts([comps[idx[0]]["value"] for idx in groups], bottom, top * 3)
    for idx, lift in zip(groups, lifts):  # one label per line: "fp32 / fp16 estimate", none on another
        c = comps[idx[0]]
        ax.annotate(
            f"{' / '.join(comps[i]['dtype'] for i in idx)} {c['source']}",
            (x_hi, c["value"]),
            xytext=(-4, 2 + lift),
            textcoords="offset points",
            ha="right",
            va="bottom",
            fontsize=7,
            color=DTYPE_COLORS.get(c["dtype"], "gray") if len(idx) == 1 else "black",
        )
    _points(ax, numbered, (x_lo, x_hi), (bottom, top * 3))
    ax.set_xlim(x_lo, x_hi)
    ax.set_ylim(bottom, top * 3)
    ax.set_xlabel("arithmetic intensity (FLOP / byte of minimum traffic)")
    ax.set_ylabel("TFLOP/s")
    hw = doc.get("hardware", {})
    ax.set_title(
        f"roofline: {hw.get('name', '?')} ({hw.get('arch', '?')}), profile "
        f"{doc.get('config', {}).get('profile', '?')}; numbers: rows of the table"
    )
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(fontsize=7, loc="lower right", ncol=2)
    fig.tight_layout()
    return fig


def _points(ax, numbered: list[tuple[int, dict]], x_range, y_range) -> None:
    providers = sorted({r["provider"] for _, r in numbered})
    for _n, r in numbered:
        m = PROVIDER_MARKERS[providers.index(r["provider"]) % len(PROVIDER_MARKERS)]
        color = DTYPE_COLORS.get(r["dtype"], "gray")
        ax.scatter(
            r["intensity"],
            r["tflops"],
            marker=m,
            s=30,
            facecolors="none" if _noisy(r) else color,
            edgecolors=color if _noisy(r) else "black",
            linewidths=0.8,
            zorder=3,
        )
        if _above(r):
            ax.scatter(
                r["intensity"],
                r["tflops"],
                marker="o",
                s=150,
                facecolors="none",
                edgecolors="red",
                linewidths=1.4,
                zorder=4,
            )
    for g in point_label_groups([(r["intensity"], r["tflops"]) for _, r in numbered], x_range, y_range):
        r = numbered[g[0]][1]
        ax.annotate(
            ",".join(str(numbered[i][0]) for i in g),
            (r["intensity"], r["tflops"]),
            xytext=(3, 3),
            textcoords="offset points",
            fontsize=6,
        )
    for p in providers:
        m = PROVIDER_MARKERS[providers.index(p) % len(PROVIDER_MARKERS)]
        ax.scatter([], [], marker=m, color="white", edgecolors="black", label=f"provider {p}")
    if any(_noisy(r) for _, r in numbered):
        ax.scatter([], [], marker="o", facecolors="none", edgecolors="gray", label="hollow: noisy (no verdict)")
    if any(_above(r) for _, r in numbered):
        ax.scatter([], [], marker="o", s=150, facecolors="none", edgecolors="red", label="above its roof (flagged)")


def plot_roofline(doc: dict, out_stem: Path) -> list[Path]:
    """roofline.png and roofline.svg (roofline_figure)."""
    import matplotlib.pyplot as plt

    fig = roofline_figure(doc)
    paths = [out_stem.with_suffix(".png"), out_stem.with_suffix(".svg")]
    for p in paths:
        fig.savefig(p, dpi=130)
    plt.close(fig)
    return paths
