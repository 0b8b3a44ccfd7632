"""One self-contained HTML page for a trace document (`trace FILE --html OUT`, and the same page for `decompose`):
the findings, the GPU summary, the step breakdown as a stacked bar chart, kernels by class with their Tensor Core
verdict and evidence, the top operators with FLOPs, achieved TFLOP/s and % of peak, the operators' roofline,
communication and overlap, and the integrity notes. Charts are inline SVG drawn by matplotlib (no script, no
font, no image fetched from anywhere); every string from the trace is escaped. Laid out for 1280 px."""

from __future__ import annotations

import io
import re

import numpy as np

from microbench.report.figures import pyplot
from microbench.report.findings_report import (
    below_line,
    breakdown_steps,
    evidence_text,
    headline,
    not_checked_lines,
    saving_text,
    validation_line,
)
from microbench.report.html import esc, notes_html, page, table, write
from microbench.report.trace_report import host_only, no_gpu_activity_line

# The plugin's categories, in its order and colours close to its own (tb_plugin's overview chart).
BREAKDOWN = (
    ("kernel", "#4e79a7"),
    ("memcpy", "#f28e2b"),
    ("memset", "#e15759"),
    ("runtime", "#76b7b2"),
    ("dataloader", "#59a14f"),
    ("cpu_exec", "#edc948"),
    ("other", "#bab0ac"),
)
TOP = 20
_CSS = """
body { max-width: 1240px; } .finding { border-left: 4px solid #4e79a7; padding: 0.2em 0.8em; margin: 0.6em 0; }
.finding .save { font-weight: bold; } svg { max-width: 100%; height: auto; } td { overflow-wrap: anywhere; } td.r { white-space: nowrap; }
"""


def svg_of(fig) -> str:
    """A matplotlib figure as inline <svg>: its XML prolog, doctype, metadata and namespace declarations (none
    needed inside HTML) removed, so the page names no address at all."""
    buf = io.StringIO()
    with pyplot().rc_context({"svg.fonttype": "none"}):  # text stays text: smaller, selectable
        fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None, "Format": None, "Type": None})
    text = buf.getvalue()
    text = text[text.index("<svg") :]
    text = re.sub(r"<metadata>.*?</metadata>", "", text, flags=re.DOTALL)
    return re.sub(r'\s+xmlns(:\w+)?="[^"]*"', "", text)


def _pct(v) -> str:
    return "-" if v is None else f"{v:.1%}"


def _num(v, spec: str = ",.1f") -> str:
    return "-" if v is None else format(v, spec)


def findings_html(doc: dict) -> str:
    parts = [f"<p><b>{esc(headline(doc))}</b></p>"]
    for i, f in enumerate(doc.get("findings") or [], 1):
        parts.append(
            f'<div class="finding"><p><b>{i}. {esc(f["id"])}</b>: {esc(f["what"])}<br>'
            f'<span class="save">{esc(saving_text(f["saving_us"], f["per"]))}</span><br>'
            f"fix: <code>{esc(f['fix'])}</code><br>evidence: {esc(evidence_text(f['evidence'], f['per']))}<br>"
            f"checked: {esc(validation_line(f))}</p></div>"
        )
    below = below_line(doc)
    return "".join(parts) + notes_html(([below] if below else []) + not_checked_lines(doc))


def summary_html(doc: dict) -> str:
    s, g = doc["summary"], doc["summary"].get("gpu_time") or {}
    dev = ", ".join(d.get("name") or f"device {d['id']}" for d in doc.get("devices") or []) or "unnamed device"
    rows = [
        ("device", dev),
        ("kernels", f"{s['kernel_count']:,}"),
        ("kernel time us", _num(s["kernel_time_us"])),
        ("GPU span us", _num(g.get("gpu_span_us"))),
        ("GPU busy", _pct(s.get("gpu_busy_share"))),
        ("idle us", _num(g.get("idle_us"))),
        ("Tensor Core share of kernel time", _pct(s["tensor_core_share"])),
        ("MFU", _pct((doc.get("mfu") or {}).get("mfu"))),
    ]
    by = s.get("gpu_time_by_device") or {}
    if len(by) > 1:
        rows[3] = (f"GPU span us (summed over {len(by)} devices)", rows[3][1])
        rows[5] = (f"idle us (summed over {len(by)} devices)", rows[5][1])
    out = table([("quantity", "left"), ("value", "right")], [([k, v], None) for k, v in rows])
    return out + (_devices_html(by) if len(by) > 1 else "")


def _devices_html(by: dict) -> str:
    """Each device's own GPU time, where the trace has several (one process driving them): the summary adds them."""
    cols = [("device", "left")] + [(c, "right") for c in ("kernels", "GPU span us", "busy us", "idle us", "busy")]
    rows = [
        (
            [
                f"GPU {d}",
                f"{g['kernel_count']:,}",
                _num(g["gpu_span_us"]),
                _num(g["busy_us"]),
                _num(g["idle_us"]),
                _pct(g["busy_us"] / g["gpu_span_us"] if g["gpu_span_us"] else None),
            ],
            None,
        )
        for d, g in by.items()
    ]
    return table(cols, rows)


def breakdown_figure(steps: list[dict]):
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(11, 0.5 + 0.45 * max(len(steps), 2)))
    names = [st["name"] for st in steps]
    if len(set(names)) < len(names):  # decompose's steps are all "step": number them
        names = [f"{n} {i + 1}" for i, n in enumerate(names)]
    left = [0.0] * len(steps)
    for cat, colour in BREAKDOWN:
        vals = [st["breakdown_us"][cat] / 1000.0 for st in steps]
        ax.barh(names, vals, left=left, color=colour, label=cat)
        left = [a + b for a, b in zip(left, vals)]
    ax.invert_yaxis()
    ax.set_xlabel("ms (each instant to the first category active: GPU kernel, memcpy, memset, then the host)")
    ax.legend(ncol=len(BREAKDOWN), loc="lower center", bbox_to_anchor=(0.5, 1.0), fontsize=8, frameon=False)
    fig.tight_layout()
    return fig


# the host's kinds (the keys of a step's idle_by_host_us, in gpu_time.HOST_CATEGORIES' order) in the table's words
HOST_KIND_LABELS = {"setup": "one-off set-up", "cpu_ops": "CPU ops"}


def steps_html(doc: dict) -> str:
    steps = breakdown_steps(doc)
    if not steps:
        return "<p>no steps in the trace: no step breakdown (ProfilerStep# ranges, or --steps NAME)</p>"
    fig = breakdown_figure(steps)
    try:
        svg = svg_of(fig)
    finally:
        pyplot().close(fig)
    # while no GPU activity is in the trace (a CPU run), the host's time is the work itself, not the GPU's idle time
    gpu = bool((doc.get("summary") or {}).get("gpu_span_us"))
    head = "idle: " if gpu else "host: "
    kinds = list(steps[0]["idle_by_host_us"])
    cols = (
        [("step", "left"), ("step us", "right")]
        + [(c, "right") for c, _ in BREAKDOWN]
        + [(head + HOST_KIND_LABELS.get(k, k), "right") for k in kinds]
    )
    rows = [
        (
            [st["name"], _num(st["breakdown_span_us"])]
            + [_num(st["breakdown_us"][c]) for c, _ in BREAKDOWN]
            + [_num(st["idle_by_host_us"].get(k, 0.0)) for k in kinds],
            None,
        )
        for st in steps
    ]
    return f'<figure class="chart">{svg}</figure>' + table(cols, rows)


def kernels_html(doc: dict) -> str:
    s, labels = doc["summary"], doc.get("classes") or {}
    by_class = table(
        [("class", "left"), ("kernels", "right"), ("time us", "right"), ("share", "right")],
        [
            ([labels.get(c, c), str(s["count_by_class"][c]), _num(t), _pct(s["share_by_class"][c])], None)
            for c, t in s["time_by_class_us"].items()
        ],
    )
    cols = [
        ("kernel", "left"),
        ("class", "left"),
        ("Tensor Cores", "left"),
        ("evidence", "left"),
        ("calls", "right"),
        ("time us", "right"),
        ("share", "right"),
    ]
    rows = [
        (
            [
                k["params"]["kernel"][:160],
                k["params"]["class"],
                k["tensor_cores"],
                _evidence(k.get("tensor_core_evidence") or ""),
                str(k["params"]["calls"]),
                _num(k["params"]["kernel_time_us"]),
                _pct(k["params"]["share"]),
            ],
            None,
        )
        for k in doc["kernels"][:TOP]
    ]
    return by_class + table(cols, rows)


def _evidence(text: str) -> str:
    """A kernel's Tensor Core evidence without the rule's regular expression (its name and note stay)."""
    return re.sub(r" /.*/: ", ": ", text)[:240]


def ops_html(doc: dict) -> str:
    ops = doc.get("ops") or []
    if not ops:
        return "<p>no operator with a work model (the trace has no recorded shapes)</p>"
    cols = [
        ("op", "left"),
        ("shape", "left"),
        ("dtype", "left"),
        ("calls", "right"),
        ("GFLOP", "right"),
        ("time us", "right"),
        ("TFLOP/s", "right"),
        ("% of peak", "right"),
    ]
    rows = [
        (
            [
                o["op"],
                o["shape"],
                o["dtype"] or "?",
                str(o["calls"]),
                _num(None if o["flops"] is None else o["flops"] / 1e9, ",.3f"),
                _num(o["kernel_time_us"] if o.get("kernels", 1) else None),  # no kernel launched: no time, not 0.0
                _num(o["op_tflops"], ".3g"),
                _num(o["pct_of_datasheet"]),
            ],
            None,
        )
        for o in ops[:TOP]
    ]
    return table(cols, rows)


def _peaks(doc: dict) -> tuple[dict, float | None]:
    for d in doc.get("devices") or []:
        ds = d.get("datasheet") or {}
        if ds.get("entry"):
            return dict(ds["peaks_tflops"]), ds.get("memory_tbs")
    return {}, None


def roofline_figure(doc: dict, ops: list[dict]):
    """The operators on the device's datasheet roofline: FLOPs / bytes against achieved TFLOP/s."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(9, 5))
    x = np.array([o["flops"] / o["bytes"] for o in ops])
    y = np.array([o["op_tflops"] for o in ops])
    peaks, mem_tbs = _peaks(doc)
    xs = np.logspace(np.log10(max(x.min() / 4, 1e-2)), np.log10(x.max() * 4), 100)
    for prec in sorted({o.get("precision") or o.get("dtype") for o in ops} & set(peaks)):
        roof = np.minimum(peaks[prec], xs * mem_tbs) if mem_tbs else np.full(len(xs), peaks[prec])
        ax.plot(xs, roof, label=f"{prec} datasheet roof")
    for dt in sorted({o["dtype"] or "?" for o in ops}):
        on = [i for i, o in enumerate(ops) if (o["dtype"] or "?") == dt]
        ax.scatter(x[on], y[on], label=f"ops, {dt}", zorder=3)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity, FLOP / byte (the work model's bytes)")
    ax.set_ylabel("achieved TFLOP/s (FLOPs / the op's kernel time)")
    ax.legend(fontsize=8)
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    return fig


def _no_roofline_why(doc: dict) -> str:
    """Why no operator can be drawn, from what the trace has: never 'record shapes' to a trace that recorded them."""
    missing = {m["what"]: m["detail"] for m in (doc.get("integrity") or {}).get("missing", [])}
    for what in ("operators", "shapes", "device activity"):
        if what in missing:
            return missing[what]
    if not (doc.get("summary") or {}).get("kernel_count"):
        return "no GPU kernel time to divide the operators' FLOPs by"
    if any(o.get("flops") for o in doc.get("ops") or []):
        return "the operators with FLOPs have no kernel time of their own, or their rates are withheld (FLOP coverage)"
    return (
        "shapes were recorded, but no operator's FLOPs could be counted from them (a GEMM, convolution or attention "
        "whose arguments are all recorded)"
    )


def roofline_html(doc: dict) -> str:
    ops = [o for o in doc.get("ops") or [] if o.get("flops") and o.get("bytes") and o.get("op_tflops")]
    if not ops:
        return f"<p>no operator with FLOPs, bytes and time: no roofline ({esc(_no_roofline_why(doc))})</p>"
    fig = roofline_figure(doc, ops[:60])
    try:
        return f'<figure class="chart">{svg_of(fig)}</figure>'
    finally:
        pyplot().close(fig)


def comm_html(doc: dict) -> str:
    s, g = doc["summary"], doc["summary"].get("gpu_time") or {}
    rows = [
        ("communication kernel time us", _num(s.get("comm_time_us"))),
        ("share of kernel time", _pct(s.get("comm_share"))),
        ("overlapped with computation us", _num(g.get("overlapped_comm_us"))),
        ("exposed (nothing hides it) us", _num(s.get("exposed_comm_us"))),
        ("exposed share of the GPU span", _pct(s.get("exposed_comm_share"))),
    ]
    per = table(
        [("step", "left"), ("comm us", "right"), ("overlapped us", "right"), ("exposed us", "right")],
        [
            (
                [
                    st["name"],
                    _num(st.get("comm_us")),
                    _num(st.get("overlapped_comm_us")),
                    _num(st.get("exposed_comm_us")),
                ],
                None,
            )
            for st in doc.get("steps") or []
        ],
    )
    return table([("quantity", "left"), ("value", "right")], [([k, v], None) for k, v in rows]) + per


def trace_page(doc: dict, title: str | None = None, job_lines: list[str] | None = None) -> str:
    """The whole page of one trace document (trace.analysis + findings.engine); `job_lines`: a job's
    cross-rank lines (straggler, outliers), shown first where the page is one rank's of a job."""
    sections = [("the job", notes_html(job_lines, "job"))] if job_lines else []
    gpu = [("GPU summary", summary_html(doc))]
    kernels = [("kernels by class, Tensor Cores and evidence", kernels_html(doc))]
    comm = [("communication and overlap", comm_html(doc))]
    if host_only(doc["summary"]):  # tables of zeros read as measurements: one line instead
        gpu = [("GPU summary", f"<p>{esc(no_gpu_activity_line(doc))}</p>")]
        kernels = comm = []
    sections += [
        ("findings", findings_html(doc)),
        *gpu,
        ("step breakdown", steps_html(doc)),
        *kernels,
        ("top operators", ops_html(doc)),
        ("roofline of the operators", roofline_html(doc)),
        *comm,
        ("integrity notes", notes_html(doc.get("notes") or []) or "<p>none</p>"),
    ]
    body = f"<style>{_CSS}</style>" + "\n".join(f"<h2>{esc(h)}</h2>\n{b}" for h, b in sections)
    return page(title or f"dawnscope trace: {doc.get('file', '?')}", body)


def write_trace_page(path, doc: dict, title: str | None = None):
    return write(path, trace_page(doc, title))


def decompose_page(doc: dict, results_doc: dict | None = None) -> str:
    """decompose's report.html: the same page, over the analysis of its own profiler trace (`trace_analysis`),
    with the decomposition's findings first; on a CPU, the CPU's page (its roofline from `results_doc`, the
    results.json document)."""
    t = doc.get("trace_analysis") or {}
    tdoc = {
        "file": (doc.get("files") or {}).get("trace", "trace.json.gz"),
        "annotations": [],
        **t,
        **{k: doc[k] for k in doc if k.startswith("findings")},
    }
    run = doc.get("run") or {}
    title = (
        f"dawnscope decompose: {doc['model']['name']}, batch {run.get('batch')} {run.get('dtype', '')} on "
        f"{run.get('device', '?')}"
    )
    if (doc.get("hardware") or {}).get("kind") == "cpu":
        return cpu_decompose_page(doc, tdoc, title, results_doc)
    return trace_page(tdoc, title)


def cpu_decompose_page(doc: dict, tdoc: dict, title: str, results_doc: dict | None = None) -> str:
    """A CPU decomposition's page: the CPU is the device and its operators its work, so the GPU sections of a trace
    page (kernels, Tensor Cores, the trace's operators without shapes, communication) give way to the
    decomposition's own: its summary, time by class, its roofline and layer table, and its notes and flags (the
    trace's GPU-side integrity notes do not apply)."""
    s = doc["summary"]
    sections = [
        ("findings", findings_html(tdoc)),
        ("CPU summary", _cpu_summary_html(doc)),
        ("step breakdown", steps_html(tdoc)),
        ("time by class", _cpu_classes_html(s)),
        ("layers, their FLOPs and the ceilings", _results_roofline_html(results_doc) + _cpu_layers_html(doc)),
        (
            "notes and flags",
            notes_html(list(s.get("step_flags") or []) + list(doc.get("notes") or [])) or "<p>none</p>",
        ),
    ]
    body = f"<style>{_CSS}</style>" + "\n".join(f"<h2>{esc(h)}</h2>\n{b}" for h, b in sections)
    return page(title, body)


def _cpu_summary_html(doc: dict) -> str:
    s, hw = doc["summary"], doc.get("hardware") or {}
    threads = (hw.get("extra") or {}).get("torch_threads")
    rows = [
        (
            "device",
            f"{hw.get('name') or 'CPU'}, {hw.get('units', '?')} cores"
            + (f", {threads} torch thread(s)" if threads else ""),
        ),
        ("step time ms (median, without the profiler)", _num(s.get("step_time_ms"), ",.2f")),
        ("profiled step ms (with the profiler's cost)", _num(s.get("profiled_step_ms"), ",.2f")),
        ("GFLOP per step", _num((s.get("flops_per_step") or 0) / 1e9, ",.3f")),
        ("achieved TFLOP/s", _num(s.get("achieved_tflops"), ".3g")),
        ("matrix-unit share of operator time", _pct(s.get("tensor_core_time_share"))),
        (
            "GEMM/conv ms (at the ceilings)",
            f"{_num(s.get('gemm_time_ms'), ',.2f')} ({_num(s.get('gemm_time_at_ceiling_ms'), ',.2f')})",
        ),
    ]
    return table([("quantity", "left"), ("value", "right")], [([k, v], None) for k, v in rows])


def _cpu_classes_html(s: dict) -> str:
    by = s.get("time_by_class_ms") or {}
    share = s.get("share_by_class") or {}
    return table(
        [("class", "left"), ("ms per step", "right"), ("share", "right")],
        [([c, _num(ms, ",.2f"), _pct(share.get(c))], None) for c, ms in by.items()],
    )


def _cpu_layers_html(doc: dict) -> str:
    layers = sorted(doc.get("layers") or [], key=lambda x: -(x.get("time_ms") or 0.0))[:TOP]
    cols = [
        ("layer", "left"),
        ("phase", "left"),
        ("dtype", "left"),
        ("ms", "right"),
        ("GFLOP", "right"),
        ("TFLOP/s", "right"),
        ("% of ceiling", "right"),
        ("matrix unit", "left"),
    ]
    rows = [
        (
            [
                x["name"],
                x["phase"],
                x.get("dtype") or "?",
                _num(x.get("time_ms"), ",.2f"),
                _num((x.get("flops") or 0) / 1e9, ",.3f"),
                _num(x.get("tflops"), ".3g"),
                _num(x.get("pct_of_ceiling")),
                x.get("tensor_cores") or "-",
            ],
            None,
        )
        for x in layers
    ]
    return table(cols, rows)


def _results_roofline_html(results_doc: dict | None) -> str:
    """The decomposition's roofline as decompose draws roofline.png (reports/report.roofline_figure over its
    results.json: the layers and the replayed cases, numbered as in that file, on the CPU's ceilings)."""
    from microbench.report.roofline_report import roofline_figure

    if not results_doc:
        return "<p>no results document: no roofline (roofline.png in the output folder where it was drawn)</p>"
    fig = roofline_figure(results_doc)
    try:
        return f'<figure class="chart">{svg_of(fig)}</figure>'
    finally:
        pyplot().close(fig)
