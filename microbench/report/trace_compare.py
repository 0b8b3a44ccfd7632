"""One workload on several machines: trace reports (`dawnscope trace --json`, schema dawnscope.trace/1)
side by side, per kernel class and per operator: time, share of kernel time, achieved TFLOP/s, the GPU's idle
time, and the ratio to the baseline (baseline time / this time: 2.00x is twice as fast). Used by
`dawnscope compare` when its inputs are trace reports."""

from __future__ import annotations

from pathlib import Path

from microbench.core.errors import InputError
from microbench.core.jsonio import load_json, number, of_type, text
from microbench.report import html as H
from microbench.report.cells import LeftOut, fit_columns, kept_in
from microbench.report.cells import or_dash as _f
from microbench.report.compare import unique_labels
from microbench.report.figures import pyplot

SCHEMA = "dawnscope.trace_compare/1"
# Where a column a narrow terminal drops is: compare writes the comparison's JSON and HTML page when asked.
KEPT_IN = kept_in(what="comparison")
TABLE_NAMES = ("classes", "operators", "GPU time")  # tables()'s, in the one line of what narrow tables left out
# Why a table has no row: said in its place
EMPTY = {
    "classes": "no kernels in any trace",
    "operators": "no trace recorded operator shapes (record_shapes=True)",
    "GPU time": "no GPU activity in any trace",
}
TRACE_SCHEMA = "dawnscope.trace/1"
GPU_FIELDS = ("gpu_span_us", "busy_us", "computation_us", "exposed_comm_us", "exposed_memcpy_us", "idle_us")
# What a person reads for each key of the trace report's GPU time (the HTML glossary gives the key beside it).
GPU_LABELS = {
    "gpu_span_us": "GPU span (first to last GPU activity)",
    "busy_us": "GPU busy",
    "computation_us": "computation",
    "exposed_comm_us": "exposed communication",
    "exposed_memcpy_us": "exposed copies (memcpy / memset)",
    "idle_us": "GPU idle",
}


def load_trace_reports(paths: list[Path], analyzed: dict | None = None) -> list[tuple[Path, dict]] | None:
    """The documents when every input is a trace report, None when none is; a mix is an error naming the first
    input of another kind than the first's. `analyzed`: the reports of inputs that are profiler traces themselves
    (compare analyses them as `trace --json` would)."""
    analyzed = analyzed or {}
    docs = []
    for p in paths:
        doc = analyzed.get(p)
        doc = load_json(p) if doc is None else doc
        is_trace = isinstance(doc, dict) and str(doc.get("schema", "")).startswith("dawnscope.trace/")
        docs.append((Path(p), doc if is_trace else None))
    traces = [d for d in docs if d[1] is not None]
    if not traces:
        return None
    if len(traces) != len(docs):
        first_is_trace = docs[0][1] is not None
        other = next(p for p, d in docs if (d is not None) != first_is_trace)
        what = (
            "not a profiler trace or a trace report (microbench.trace.cli --json), and the first input is one"
            if first_is_trace
            else f"{'a profiler trace' if other in analyzed else 'a trace report'}, and the first input is not"
        )
        raise InputError(other, what + ": compare traces with traces, results with results")
    return traces


def _machine(path: Path, doc: dict) -> dict:
    """The fields of one trace report the comparison reads, each checked for its type and domain."""
    if doc.get("schema") != TRACE_SCHEMA:
        raise InputError(
            path,
            f"unsupported trace report schema (this version reads {TRACE_SCHEMA})",
            key="schema",
            value=doc.get("schema"),
        )
    s = of_type(doc.get("summary"), dict, path, "summary")
    by_class = of_type(s.get("time_by_class_us"), dict, path, "summary.time_by_class_us")
    time_by_class = {c: number(v, path, f"summary.time_by_class_us.{c}") or 0.0 for c, v in by_class.items()}
    gpu_time = of_type(s.get("gpu_time"), dict, path, "summary.gpu_time", {})
    name = None
    for i, d in enumerate(of_type(doc.get("devices"), list, path, "devices", [])):
        d = of_type(d, dict, path, f"devices[{i}]")
        if d.get("kernels_ran_here", True):
            name = name or text(d.get("name"), path, f"devices[{i}].name")
    flops_by_class: dict[str, float] = {}
    for i, k in enumerate(of_type(doc.get("kernels"), list, path, "kernels", [])):
        p = of_type(of_type(k, dict, path, f"kernels[{i}]").get("params"), dict, path, f"kernels[{i}].params", {})
        flops = number(p.get("model_flops"), path, f"kernels[{i}].params.model_flops")
        if flops is not None:
            c = text(p.get("class", k.get("op")), path, f"kernels[{i}].params.class")
            flops_by_class[c] = flops_by_class.get(c, 0.0) + flops
    ops = {}
    for i, o in enumerate(of_type(doc.get("ops"), list, path, "ops", [])):
        o = of_type(o, dict, path, f"ops[{i}]")
        key = tuple(
            text(o.get(f), path, f"ops[{i}].{f}", optional=f == "dtype") or "" for f in ("op", "shape", "dtype")
        )
        ops[key] = {
            "kernel_time_us": number(o.get("kernel_time_us"), path, f"ops[{i}].kernel_time_us") or 0.0,
            "flops": number(o.get("flops"), path, f"ops[{i}].flops"),
        }
    mfu = of_type(doc.get("mfu"), dict, path, "mfu", {})
    labels = of_type(doc.get("classes"), dict, path, "classes", {})
    return {
        "label": name or Path(path).name,
        "file": str(path),
        "class_labels": {str(k): str(v) for k, v in labels.items() if isinstance(v, str)},
        "kernel_time_us": number(s.get("kernel_time_us"), path, "summary.kernel_time_us") or 0.0,
        "time_by_class_us": time_by_class,
        "flops_by_class": flops_by_class,
        "ops": ops,
        "gpu_time": {f: number(gpu_time.get(f), path, f"summary.gpu_time.{f}") for f in GPU_FIELDS},
        "mfu": number(mfu.get("mfu"), path, "mfu.mfu"),
        "tensor_core_share": number(s.get("tensor_core_share"), path, "summary.tensor_core_share"),
    }


def _ratio(base, this):
    return base / this if base and this else None


def _cell(time_us, total_us, flops, base_time):
    return {
        "time_us": time_us,
        "share": time_us / total_us if time_us is not None and total_us else None,
        "achieved_tflops": flops / (time_us * 1e6) if flops and time_us else None,
        "ratio_to_baseline": _ratio(base_time, time_us),
    }


def compare_traces(docs: list[tuple[Path, dict]], baseline: str | None = None) -> dict:
    ms = [_machine(p, d) for p, d in docs]
    for m, label in zip(ms, unique_labels([m["label"] for m in ms])):
        m["label"] = label
    base = ms[0]
    if baseline is not None:
        hits = [m for m in ms if baseline.lower() in m["label"].lower() or baseline in m["file"]]
        if len(hits) != 1:
            raise InputError(
                None, f"matches {'several' if hits else 'no'} trace reports", key="--baseline", value=baseline
            )
        base = hits[0]
    classes = list(dict.fromkeys(c for m in ms for c in m["time_by_class_us"]))
    class_rows = []
    for c in sorted(classes, key=lambda c: -base["time_by_class_us"].get(c, 0.0)):
        bt = base["time_by_class_us"].get(c)
        class_rows.append(
            {
                "class": c,
                "cells": {
                    m["label"]: _cell(m["time_by_class_us"].get(c), m["kernel_time_us"], m["flops_by_class"].get(c), bt)
                    for m in ms
                },
            }
        )
    op_keys = list(dict.fromkeys(k for m in ms for k in m["ops"]))
    op_rows = []
    for k in sorted(op_keys, key=lambda k: -(base["ops"].get(k) or {}).get("kernel_time_us", 0.0)):
        bt = (base["ops"].get(k) or {}).get("kernel_time_us")
        cells = {}
        for m in ms:
            o = m["ops"].get(k)
            cells[m["label"]] = (
                None if o is None else _cell(o.get("kernel_time_us"), m["kernel_time_us"], o.get("flops"), bt)
            )
        op_rows.append({"op": k[0], "shape": k[1], "dtype": k[2], "cells": cells})
    gpu = {m["label"]: {f: m["gpu_time"].get(f) for f in GPU_FIELDS} for m in ms}
    return {
        "schema": SCHEMA,
        "baseline": base["label"],
        "machines": [
            {
                "label": m["label"],
                "file": m["file"],
                "kernel_time_us": m["kernel_time_us"],
                "tensor_core_share": m["tensor_core_share"],
                "mfu": m["mfu"],
            }
            for m in ms
        ],
        "classes": class_rows,
        "ops": op_rows,
        "gpu_time": gpu,
        "class_labels": {k: v for m in ms for k, v in m["class_labels"].items()},
        "gpu_time_ratio": {
            m["label"]: {f: _ratio(gpu[base["label"]].get(f), gpu[m["label"]].get(f)) for f in GPU_FIELDS} for m in ms
        },
    }


def _cells_for(row_cells: dict, labels: list[str]) -> list[str]:
    out = []
    for lab in labels:
        c = row_cells.get(lab)
        if c is None or c["time_us"] is None:
            out += ["missing", "", "", ""]
            continue
        r = c["ratio_to_baseline"]
        out += [
            _f(c["time_us"], ",.1f"),
            _f(None if c["share"] is None else 100 * c["share"], ".1f"),
            _f(c["achieved_tflops"], ".3g"),
            "-" if r is None else f"{r:.2f}x",
        ]
    return out


def tables(cmp: dict) -> list[tuple[str, list[tuple[str, str]], list[list[str]]]]:
    """(title, columns, rows) for the kernel classes, the operators and the GPU time: one set of cells for
    the terminal and the HTML page."""
    labels = [m["label"] for m in cmp["machines"]]
    per = []
    for i, _ in enumerate(labels):
        t = f"[{i + 1}]"
        # "[1] us", as the GPU time table's: a narrow terminal then has room for two machines' times
        per += [(f"{t} us", "right"), (f"{t} share %", "right"), (f"{t} TFLOP/s", "right"), (f"{t} vs base", "right")]
    names = cmp.get("class_labels") or {}
    cls = [[names.get(r["class"], r["class"])] + _cells_for(r["cells"], labels) for r in cmp["classes"]]
    ops = [[r["op"], r["shape"], r["dtype"]] + _cells_for(r["cells"], labels) for r in cmp["ops"]]
    gcols = [("GPU time", "left")] + [
        c for i in range(len(labels)) for c in ((f"[{i + 1}] us", "right"), (f"[{i + 1}] vs base", "right"))
    ]
    base = cmp["gpu_time"][cmp["baseline"]]
    g = []
    for f in GPU_FIELDS:
        cells = [GPU_LABELS[f]]
        for lab in labels:
            v = cmp["gpu_time"][lab].get(f)
            r = _ratio(base.get(f), v)
            cells += [_f(v, ",.1f"), "-" if r is None else f"{r:.2f}x"]
        g.append(cells)
    g.append(
        ["MFU %"] + [c for m in cmp["machines"] for c in (_f(None if m["mfu"] is None else 100 * m["mfu"], ".2f"), "")]
    )
    return [
        ("kernel time by class", [("class", "left")] + per, cls),
        (
            "operators (GEMM, convolution, attention; recorded shapes)",
            [("op", "left"), ("shape", "left"), ("dtype", "left")] + per,
            ops,
        ),
        ("GPU time over the whole trace (kernel intervals merged across streams)", gcols, g),
    ]


def print_trace_compare(cmp: dict, console=None, kept_in: str = KEPT_IN) -> None:
    """The comparison's tables; `kept_in`: where the columns a narrow terminal leaves out are (the files written)."""
    from rich.markup import escape

    from microbench.report.roofline_report import rich_table, wide_console

    console = console or wide_console()  # piped: 120 columns or COLUMNS
    for i, m in enumerate(cmp["machines"]):
        base = " (baseline)" if m["label"] == cmp["baseline"] else ""
        console.print(
            f"[bold]{escape(f'[{i + 1}]')}[/] {escape(m['label'])}{base}: kernel time "
            f"{m['kernel_time_us']:,.1f} us  [dim]{escape(m['file'])}[/]"
        )
    left = LeftOut(kept_in)
    for (title, cols, rows), name in zip(tables(cmp), TABLE_NAMES):
        if not rows:  # a table of headers alone reads as a failure: say what is missing
            console.print(f"{escape(title)}: none ({EMPTY[name]})")
            continue
        # a narrow terminal drops the per-machine numbers least needed first, never the class, op, shape or dtype
        fit = left.add(
            name,
            fit_columns(cols, [(r, None) for r in rows], console.width, compare_drop_order(cols, _base_index(cmp))),
        )
        console.print(rich_table(fit.columns, fit.rows, title=f"{title}; vs base: baseline time / this time"))
    if line := left.line():
        console.print(f"[dim]{escape(line)}[/]")


def _base_index(cmp: dict) -> int:
    return next(i for i, m in enumerate(cmp["machines"]) if m["label"] == cmp["baseline"])


def compare_drop_order(cols: list[tuple[str, str]], base: int = 0) -> list[str]:
    """Columns a narrow terminal drops first: the baseline's own "vs base" (always 1.00x), every machine's share,
    then its TFLOP/s, then the other machines' ratios (last machine first), then the times (last machine first):
    the times stay longest, since a ratio without them says how much but not of what."""
    names = [c for c, _ in cols]
    order = [n for n in names if n == f"[{base + 1}] vs base"]
    order += [n for n in names if n.endswith("share %")] + [n for n in names if n.endswith("TFLOP/s")]
    order += [n for n in reversed(names) if n.endswith("vs base") and n not in order]
    order += [n for n in reversed(names) if n.endswith(" us") and n not in order]
    return order


def class_time_figure(cmp: dict):
    """Kernel time by class per machine: one stacked bar per machine (the same workload on each), so where the
    time goes on each chip shows at a glance. The caller closes it."""
    plt = pyplot()
    labels = [m["label"] for m in cmp["machines"]]
    names = cmp.get("class_labels") or {}
    fig, ax = plt.subplots(figsize=(10, 1.5 + 0.6 * len(labels)))
    left = [0.0] * len(labels)
    for k, row in enumerate(cmp["classes"]):
        widths = [((row["cells"].get(lab) or {}).get("time_us") or 0.0) / 1e3 for lab in labels]
        ax.barh(range(len(labels)), widths, left=left, color=f"C{k % 10}", label=names.get(row["class"], row["class"]))
        left = [a + b for a, b in zip(left, widths)]
    ax.set_yticks(range(len(labels)))
    ax.set_yticklabels([f"[{i + 1}] {lab}"[:40] for i, lab in enumerate(labels)], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("kernel time (ms) by class")
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.25), ncol=4)
    fig.tight_layout()
    return fig


def trace_compare_html(cmp: dict) -> str:
    items = "".join(
        f"<li><b>[{i + 1}] {H.esc(m['label'])}</b>{' (baseline)' if m['label'] == cmp['baseline'] else ''}"
        f": {H.esc(m['file'])}, kernel time {m['kernel_time_us']:,.1f} us</li>"
        for i, m in enumerate(cmp["machines"])
    )
    parts = [
        f"<h2>machines</h2><ul>{items}</ul><p>vs base: baseline time / this time (2.00x = twice as fast as "
        "the baseline); TFLOP/s: model FLOPs (recorded shapes) over kernel time.</p>"
    ]

    fig = class_time_figure(cmp)
    try:
        parts.append("<h2>time by class per machine</h2>" + H.figure_img(fig, "kernel time by class per machine"))
    finally:
        pyplot().close(fig)
    for title, cols, rows in tables(cmp):
        parts.append(f"<h2>{H.esc(title)}</h2>" + H.table(cols, [(r, None) for r in rows]))
    keys = [(label, key) for key, label in (cmp.get("class_labels") or {}).items() if label != key]
    keys += [(label, key) for key, label in GPU_LABELS.items()]
    parts.append(
        "<h2>glossary</h2><dl>"
        + "".join(
            f"<dt>{H.esc(label)}</dt><dd>the trace report's key <code>{H.esc(key)}</code></dd>" for label, key in keys
        )
        + "</dl>"
    )
    return H.page(
        f"dawnscope: one workload on {len(cmp['machines'])} machines, baseline {cmp['baseline']}", "\n".join(parts)
    )
