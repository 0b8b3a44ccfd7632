"""The terminal report of a trace analysis (microbench.trace): devices, kernel time by class, top kernels,
steps and annotations."""

from __future__ import annotations

from microbench.core.kernel_names import distinct_labels
from microbench.report.cells import KERNEL_WIDTH, LeftOut, caption, fit_columns, kept_in, or_dash
from microbench.report.cells import or_dash as _num
from microbench.report.findings_report import print_step_breakdown


def _pct(v) -> str:
    return or_dash(v, ".1%")


def _short(name: str, width: int = 96) -> str:
    return name if len(name) <= width else name[: width - 3] + "..."


# Where a column a narrow terminal drops is kept: the trace command writes only what it is asked for (the
# command passes the files it writes: kept_in(json=..., html=...)).
KEPT_IN = kept_in()
# Columns a narrow terminal drops first: the kernel, its time and share, TC and TFLOP/s stay.
KERNEL_DROP_ORDER = ("counted GFLOP", "model GFLOP", "FLOP/B", "evidence", "calls", "class", "DRAM GB/s")
# With hardware counters the counted FLOPs and the evidence are the trace's point: calls and class go first.
COUNTER_KERNEL_DROP_ORDER = ("calls", "class", "FLOP/B", "DRAM GB/s", "model GFLOP", "evidence", "counted GFLOP")
# The evidence column's codes (below, from classify.py's rule ids SECTION[INDEX]): what each prefix means, said
# once under the table for the prefixes it shows.
EVIDENCE_CODES = {
    "kernel": "kernel[N] = rule N (from 0) of data/kernel_rules.toml's [[kernel]] name rules",
    "structure": "inferred: structure[N] = a [[structure]] rule, read in the name's structure",
    "launcher": "inferred: launcher[N] = a [[launcher]] rule, read in the launching operator's name",
    "counters": "counters = the hardware counters",
    "unknown": "unknown = no rule settles it",
}
# The analysis' notes that make the headline's times something else (timeline/analysis.perf_notes words them; a
# document gives notes no kind): said beside the headline, before the figures, not at the end.
HEADLINE_CAVEATS = ("not kernel run times", "of this serialized timeline mean nothing")


def headline_caveats(doc: dict) -> list[str]:
    return [n for n in doc["notes"] if n.endswith(HEADLINE_CAVEATS)]


def evidence_legend(codes: list[str]) -> str | None:
    """One line: what the evidence codes shown (`kernel[22]`, `inferred: structure[2]`, `counters`) mean."""
    seen = {c.removeprefix("inferred: ").split("[")[0] for c in codes}
    said = [text for prefix, text in EVIDENCE_CODES.items() if prefix in seen]
    return "evidence: " + "; ".join(said) if said else None


def _print_table(console, left: LeftOut, name: str, cols, cells, drop_order, title) -> set[str]:
    """One table at the console's width (cells.fit_columns decides what it keeps; `left` says it under the
    report); a title of (column, text) parts names no column it left out. Returns the columns shown."""
    from microbench.report.roofline_report import rich_table

    fit = left.add(name, fit_columns(cols, cells, console.width, drop_order))
    console.print(
        rich_table(fit.columns, fit.rows, title=title if isinstance(title, str) else caption(*title, fit.shown))
    )
    return fit.shown


def _kernel_cells(doc: dict, top: int):
    """The top kernels as text cells (columns, rows) for roofline_report.rich_table; with counters, the export's DRAM
    throughput and intensity (the kernel's place on the roofline)."""
    counted = any("counted_flops" in k["params"] for k in doc["kernels"])
    dram = any(k.get("gbps") for k in doc["kernels"])
    cols = [
        ("kernel", "left"),
        ("class", "left"),
        ("TC", "left"),
        ("evidence", "left"),
        ("calls", "right"),
        ("time us", "right"),
        ("share", "right"),
        ("TFLOP/s", "right"),
    ]
    cols += [("DRAM GB/s", "right"), ("FLOP/B", "right")] if dram else []
    cols += [("model GFLOP", "right"), ("counted GFLOP", "right")] if counted else []
    rows = []
    labels = distinct_labels([k["params"]["kernel"] for k in doc["kernels"][:top]], KERNEL_WIDTH)
    for k, label in zip(doc["kernels"][:top], labels):
        p = k["params"]
        ev = "counters" if p.get("evidence") == "counters" else p["rule"].split(" ")[0]
        if str(p.get("evidence", "")).endswith("(inferred)"):  # a structural verdict: labelled, never a rule's
            ev = "inferred: " + p["rule"].split(" + ")[-1].split(" ")[0]
        flops = [_num(None if p.get(f) is None else p[f] / 1e9, ",.3f") for f in ("model_flops", "counted_flops")]
        rows.append(
            (
                [
                    label,
                    p["class"],
                    k["tensor_cores"],
                    ev,
                    str(p["calls"]),
                    f"{p['kernel_time_us']:,.1f}",
                    _pct(p["share"]),
                    _num(p.get("achieved_tflops") or k.get("tflops"), ".3g"),
                    *([_num(k.get("gbps"), ",.1f"), _num(k.get("intensity"), ".3g")] if dram else []),
                    *(flops if counted else []),
                ],
                None,
            )
        )
    return cols, rows


def print_trace_report(doc: dict, top: int = 15, console=None, kept_in: str = KEPT_IN) -> None:
    """The report; `kept_in`: where the columns a narrow terminal leaves out are (the files the command wrote)."""
    from rich.markup import escape

    from microbench.report.roofline_report import wide_console

    console = console or wide_console()
    s = doc["summary"]
    console.print(f"[bold]trace[/] {escape(doc['file'])}")
    _print_devices(console, doc)
    _print_integrity(console, doc.get("integrity"))
    caveats = headline_caveats(doc)
    left = LeftOut(kept_in)
    if host_only(s):
        console.print(escape(no_gpu_activity_line(doc)))
    else:
        _print_gpu_tables(console, left, doc, top, caveats)
    print_step_breakdown(console, doc, kept_in, left)
    _print_ops(console, left, doc, top)
    if doc["annotations"]:
        _print_annotations(console, left, doc, top)
    _print_graphs(console, doc, top)
    _print_unknown(console, doc)
    for n in doc["notes"]:
        if n not in caveats:
            console.print(f"[yellow]note:[/] {escape(n)}")
    if line := left.line():
        console.print(f"[dim]{escape(line)}[/]")


def _print_devices(console, doc: dict) -> None:
    """A line per device with its datasheet entry (a note where it has none, once), and the job's ranks."""
    from rich.markup import escape

    said: set[str] = set()
    for d in doc["devices"]:
        ds = d.get("datasheet") or {}
        peaks = ""
        if ds.get("entry"):
            p = ds["peaks_tflops"]
            peaks = (
                f" | datasheet entry {ds['entry']} ({ds.get('name')}): "
                + ", ".join(f"{k} {v:g}" for k, v in p.items())
                + " TFLOP/s"
            )
            if ds.get("memory_tbs"):
                peaks += f", {ds['memory_tbs']:g} TB/s"
        console.print(f"device {d['id']}: {escape(d['name'] or '?')}{peaks}")
        # a device without an entry, or with a chip's peaks only (which SKU unsettled): once, not once per device
        if ds.get("note") and (not ds.get("entry") or ds.get("level") == "chip") and ds["note"] not in said:
            said.add(ds["note"])
            console.print(f"  [yellow]note:[/] {escape(ds['note'])}")
    dist = doc["trace"].get("distributed")
    if dist:
        console.print("distributed: " + ", ".join(f"{k} {v}" for k, v in dist.items()))


# A trace with no GPU activity at all (a CPU run, or one recorded without ProfilerActivity.CUDA): its kernel and
# GPU-time tables would be rows of zeros, which read as measurements.
HOST_ONLY = (
    "no GPU activity: a trace of the host alone ({span_us:,.1f} us traced); its kernel and GPU time tables "
    "are left out. The steps' time by what ran (below) is the host's; the CPU as a device, its operators "
    "on its own roofline, is what `decompose` measures (docs/models.md)"
)


def no_gpu_activity_line(doc: dict) -> str:
    """The one line that stands for the GPU tables of a trace without GPU activity: its device records lost
    (integrity's `device activity` entry), or a trace of the host alone."""
    lost = next((m for m in (doc.get("integrity") or {}).get("missing", []) if m["what"] == "device activity"), None)
    if lost:
        return f"no GPU activity recorded: {lost['detail']}; its kernel and GPU time tables are left out"
    return HOST_ONLY.format(span_us=doc["summary"]["wall_span_us"])


def host_only(s: dict) -> bool:
    """No kernel, memcpy or memset in the trace (the summary's counts)."""
    return not (s["kernel_count"] or s.get("memcpy_count") or s.get("memset_count"))


def _print_gpu_tables(console, left: LeftOut, doc: dict, top: int, caveats: list[str]) -> None:
    """The headline, kernel time by class, the top kernels and the GPU time per step."""
    from rich.markup import escape
    from rich.table import Table

    s = doc["summary"]
    console.print(escape(headline(s, bool(caveats))))
    for n in caveats:  # before the figures it makes something else
        console.print(f"[bold yellow]warning:[/] {escape(n)}")
    labels = doc.get("classes", {})
    t = Table(title="kernel time by class", header_style="bold")
    for c, j in (
        ("class", "left"),
        ("kernels", "right"),
        ("time us", "right"),
        ("share", "right"),
        ("on Tensor Cores", "right"),
    ):
        t.add_column(c, justify=j)
    on_tc = s.get("tensor_core_time_by_class_us") or {}  # the Tensor Core share, class by class: they add up to it
    for cls, tm in s["time_by_class_us"].items():
        t.add_row(
            labels.get(cls, cls),
            str(s["count_by_class"][cls]),
            f"{tm:,.1f}",
            _pct(s["share_by_class"][cls]),
            _pct(on_tc[cls] / tm) if on_tc.get(cls) and tm else "-",
        )
    console.print(t)
    cols, cells = _kernel_cells(doc, top)
    counters = any("counted_flops" in k["params"] for k in doc["kernels"])
    shown = _print_table(
        console,
        left,
        "top kernels",
        cols,
        cells,
        COUNTER_KERNEL_DROP_ORDER if counters else KERNEL_DROP_ORDER,
        f"top {min(top, len(doc['kernels']))} kernels (TC evidence: counters where the trace has "
        "them, else the name rule, else inferred from the name's structure or the launching operator)",
    )
    if "evidence" in shown and (legend := evidence_legend([c[cols.index(("evidence", "left"))] for c, _ in cells])):
        console.print(f"[dim]{escape(legend)}[/]")
    _print_steps(console, left, doc)


def headline(s: dict, ranges: bool = False) -> str:
    """The summary line; `ranges`: the trace's durations are not run times (the warning under it says what)."""
    caveat = " (the profiler's ranges, not run times: the warning below)" if ranges else ""
    return (
        f"{s['kernel_count']} kernels, kernel time {s['kernel_time_us']:,.1f} us{caveat}; Tensor Core share "
        f"{_pct(s['tensor_core_share'])} (unknown {_pct(s['tensor_core_unknown_share'])}); communication "
        f"{_pct(s['comm_share'])} of kernel time; over the GPU span (first to last GPU activity"
        f"{', summed over devices' if s.get('devices_with_kernels', 1) > 1 else ''}) of {s.get('gpu_span_us', 0.0):,.1f} us: "
        f"computation {_pct(s.get('computation_share'))}, copies {_pct(s.get('copy_share'))}, exposed communication "
        f"{_pct(s['exposed_comm_share'])} ({s['exposed_comm_us']:,.1f} us), idle {_pct(s.get('idle_share'))} "
        f"(busy {_pct(s['gpu_busy_share'])}: the first three); the traced span, CPU events included, is "
        f"{s['wall_span_us']:,.1f} us"
    )


def _print_annotations(console, left: LeftOut, doc: dict, top: int) -> None:
    """Time per user annotation: the name is the row's key, never cut; a narrow terminal drops figures first."""
    cols = [
        (c, "left" if c == "annotation" else "right")
        for c in ("annotation", "calls", "wall us", "kernels", "kernel time us", "GPU annotation us")
    ]
    cells = [
        (
            [
                _short(a["name"], 60),
                str(a["calls"]),
                f"{a['wall_us']:,.1f}",
                str(a["kernel_count"]),
                f"{a['kernel_time_us']:,.1f}",
                _num(a.get("gpu_annotation_us"), ",.1f"),
            ],
            None,
        )
        for a in doc["annotations"][:top]
    ]
    _print_table(
        console,
        left,
        "annotations",
        cols,
        cells,
        ("GPU annotation us", "calls", "wall us", "kernels"),
        "user annotations (record_function ranges; kernels by launch time, any thread)"
        + _unreliable(doc, "annotations"),
    )


def _unreliable(doc: dict, figure: str) -> str:
    """A table title's mark where the integrity lines name its figures unreliable."""
    ig = doc.get("integrity") or {}
    return (
        f" [unreliable: {', '.join(m['what'] for m in ig.get('missing', []) if figure in m['unreliable'])} missing]"
        if figure in ig.get("unreliable", [])
        else ""
    )


def _print_integrity(console, ig: dict | None) -> None:
    """What the trace lacks and which figures that makes unreliable or withholds: before any figure."""
    from rich.markup import escape

    if not ig:
        return
    for m in ig["missing"]:
        hurt = f" -> unreliable: {', '.join(m['unreliable'])}" if m["unreliable"] else ""
        console.print(f"[bold yellow]integrity:[/] missing {escape(m['what'])}: {escape(m['detail'])}{hurt}")
    cov = ig.get("flop_coverage") or {}
    if cov.get("share") is not None:
        verdict = f"withheld (under {cov['threshold']:.0%})" if cov.get("withheld") else "shown"
        console.print(
            f"[bold yellow]integrity:[/] the model's FLOPs cover {cov['share']:.1%} of matrix-kernel time "
            f"({cov['covered_us']:,.1f} of {cov['matrix_kernel_time_us']:,.1f} us): MFU, achieved TFLOP/s "
            f"and per-op totals {verdict}"
        )


def _print_steps(console, left: LeftOut, doc: dict) -> None:
    """Per step and over the whole trace: the GPU time breakdown (kernel intervals merged across streams) and
    MFU."""
    g, m = doc["summary"].get("gpu_time") or {}, doc.get("mfu") or {}
    cols = [
        (c, "left" if c == "step" else "right")
        for c in (
            "step",
            "CPU range",
            "kernels",
            "GPU span",
            "busy",
            "computation",
            "exposed comm",
            "exposed memcpy",
            "idle",
            "TFLOP/s",
            "MFU",
        )
    ]
    cells = []
    rows = [(st["name"], st["wall_us"], str(st["kernel_count"]), st) for st in doc["steps"]]
    out = doc.get("outside_steps") or {}
    for key, label in (("before_first_step", "before the first step"), ("outside_steps", "outside the steps")):
        if doc["steps"] and (out.get(key) or {}).get("activities"):
            rows.append((label, None, str(out[key]["kernel_count"]), out[key]))
    # the steps' CPU ranges, each instant once (overlapping steps, an integrity line, would add past the trace)
    cpu = out.get("steps_cpu_us", sum(st["wall_us"] for st in doc["steps"])) if doc["steps"] else None
    rows.append(
        (
            "whole trace",
            cpu,
            str(doc["summary"]["kernel_count"]),
            g | m | {"by_device": doc["summary"].get("gpu_time_by_device") or {}},
        )
    )
    for name, wall, n, st in _with_devices(rows):
        cells.append(
            (
                [
                    name,
                    _num(wall, ",.1f"),
                    n,
                    *(
                        _num(st.get(f), ",.1f")
                        for f in (
                            "gpu_span_us",
                            "busy_us",
                            "computation_us",
                            "exposed_comm_us",
                            "exposed_memcpy_us",
                            "idle_us",
                        )
                    ),
                    _num(st.get("achieved_tflops"), ".3g"),
                    _pct(st.get("mfu")),
                ],
                None,
            )
        )
    # the step's name never truncates: the least needed columns go first at a narrow width
    _print_table(
        console,
        left,
        "steps",
        cols,
        cells,
        ("kernels", "exposed memcpy", "CPU range", "MFU"),
        "GPU time per step (us; each GPU activity in the one step that launched it; CPU range = the step's "
        "ProfilerStep range on the host, which the GPU can outlast ('step us' below runs to its last GPU "
        "activity, and MFU is over that window); busy = computation + exposed communication + exposed "
        "memcpy/memset; idle = span - busy" + _devices_summed(doc) + ")" + _unreliable(doc, "per-step values"),
    )


def _with_devices(rows: list[tuple]) -> list[tuple]:
    """The steps table's rows, each followed by one row per device where the trace has several (`by_device`): the
    row itself adds the devices' spans, so its GPU span can exceed its CPU range."""
    out = []
    for name, wall, n, st in rows:
        out.append((name, wall, n, st))
        by = st.get("by_device") or {}
        if len(by) > 1:
            for d in sorted(by, key=int):  # device ids written as text (JSON's keys): gpu_time.per_step
                out.append((f"  GPU {d}", None, str(by[d]["kernel_count"]), by[d]))
    return out


def _devices_summed(doc: dict) -> str:
    n = len(doc["summary"].get("gpu_time_by_device") or {})
    return f"; {n} devices: a step's figures add theirs, each device's own on the rows under it" if n > 1 else ""


# The operator table's title: each part with the columns it explains (cells.caption says a part only beside them).
OPS_CAPTION = (
    ("op TFLOP/s", "op TFLOP/s = FLOPs / all the op's kernels' time"),
    ("kernel TFLOP/s", "kernel TFLOP/s = FLOPs / its math kernels' time"),
    (("% datasheet", "% measured"), "{cols}: op TFLOP/s as % of the peak"),
)


def _op_times(o: dict) -> tuple[str, str]:
    """An operator's kernel time and math-kernel time; "-" where it launched no kernel (an operator of a trace of
    the host alone): no kernel time, which 0.0 would read as a measured one."""
    if not o.get("kernels", 1):
        return "-", "-"
    return f"{o['kernel_time_us']:,.1f}", f"{o['math_kernel_time_us']:,.1f}"


def _print_ops(console, left: LeftOut, doc: dict, top: int) -> None:
    from rich.markup import escape

    if doc.get("ops"):
        cols = [
            (c, "left" if c in ("op", "shape", "dtype") else "right")
            for c in (
                "op",
                "shape",
                "dtype",
                "calls",
                "GFLOP",
                "op us",
                "math us",
                "op TFLOP/s",
                "kernel TFLOP/s",
                "% datasheet",
                "% measured",
            )
        ]
        cells = [
            (
                [
                    o["op"],
                    o["shape"],
                    o["dtype"] or "?",
                    str(o["calls"]),
                    _num(None if o["flops"] is None else o["flops"] / 1e9, ",.3f"),
                    *_op_times(o),
                    _num(o["op_tflops"], ".3g"),
                    _num(o["kernel_tflops"], ".3g"),
                    _num(o["pct_of_datasheet"], ".1f"),
                    _num(o["pct_of_measured"], ".1f"),
                ],
                None,
            )
            for o in doc["ops"][:top]
        ]
        # op and shape are the row's key: a narrow terminal drops the least needed figures, never cuts them
        _print_table(
            console,
            left,
            "operators",
            cols,
            cells,
            ("% measured", "math us", "GFLOP", "calls", "op TFLOP/s", "% datasheet", "op us"),
            ("operators with a work model (recorded shapes)" + _unreliable(doc, "per-op totals"), OPS_CAPTION),
        )
    el = doc.get("eligibility") or {}
    if el.get("findings"):
        s = doc["summary"]
        # two measures, both printed: say which this is, beside the other (the note below), so that where they
        # differ they do not read as one figure that contradicts itself
        by_op = s.get("eligible_unused_by_operator_share")
        other = f"; by launching operator, with or without shapes: {by_op:.1%}" if by_op else ""
        console.print(
            f"[bold]Tensor Core eligible but not used:[/] {el['eligible_unused_us']:,.1f} us of kernel time "
            f"({_pct(s['kernel_time_us'] and el['eligible_unused_us'] / s['kernel_time_us'])}: the "
            f"operators with recorded shapes{other})"
        )
        for f in el["findings"][:top]:
            console.print(
                f"  {f['time_us']:,.1f} us, {f['calls']} x {escape(f['op'])}: {escape(f['reason'])}; "
                f"remedy: {escape(f['remedy'])}"
            )


def _print_unknown(console, doc: dict) -> None:
    from rich.markup import escape

    u = doc.get("unknown_kernels")
    if not u:
        return
    console.print(
        f"[bold yellow]{u['share']:.1%} of kernel time is in kernels whose Tensor Core use no rule "
        "settles; the largest:[/]"
    )
    for k in u["top"]:
        console.print(
            f"  {k['kernel_time_us']:,.1f} us ({_pct(k['share'])}) {k['class']}: {escape(_short(k['kernel'], 110))}"
        )
    console.print(f"  to recognise them: {escape(u['how_to_add_a_rule'])}")


def _print_graphs(console, doc: dict, top: int) -> None:
    """Kernels replayed from CUDA/HIP graphs: how much time, how much of it attributed to capturing operators."""
    from rich.markup import escape
    from rich.table import Table

    s = doc["summary"]
    if not s.get("graph_kernel_count"):
        return
    share = s["kernel_time_us"] and s["graph_kernel_time_us"] / s["kernel_time_us"]
    attributed = s.get("graph_attributed_share")
    console.print(
        f"graph-launched kernels: {s['graph_kernel_count']} from {s['graph_launches']} graph launch(es), "
        f"{s['graph_kernel_time_us']:,.1f} us = {_pct(share)} of kernel time; attributed to the operator "
        f"that captured them: {'- (no --graph-capture)' if attributed is None else _pct(attributed)}"
    )
    g = doc.get("graphs")
    if not g or not g["ops"]:
        return
    t = Table(title=f"graph replays by capturing operator (capture: {escape(g['capture_file'])})", header_style="bold")
    for c in ("operator", "input dims", "calls", "kernels", "kernel time us", "TFLOP/s", "classes"):
        t.add_column(c, justify="right" if c in ("calls", "kernels", "kernel time us", "TFLOP/s") else "left")
    for o in g["ops"][:top]:
        classes = ", ".join(f"{k} {v:,.0f}" for k, v in sorted(o["classes"].items(), key=lambda kv: -kv[1]))
        t.add_row(
            escape(_short(o["op"], 50)),
            escape(_short(str(o["input_dims"]), 40)),
            str(o["calls"]),
            str(o["kernels"]),
            f"{o['kernel_time_us']:,.1f}",
            _num(o.get("achieved_tflops"), ".3g"),
            classes,
        )
    console.print(t)
