"""The terminal report of a trace analysis (microbench.timeline): devices, kernel time by class, top kernels,
steps and annotations."""
from __future__ import annotations

def _pct(v) -> str:
    return "-" if v is None else f"{v:.1%}"


def _short(name: str, width: int = 96) -> str:
    return name if len(name) <= width else name[: width - 3] + "..."


def print_trace_report(doc: dict, top: int = 15, console=None) -> None:
    from rich.markup import escape
    from rich.table import Table

    from microbench.reports.report import wide_console

    console = console or wide_console()
    s = doc["summary"]
    console.print(f"[bold]trace[/] {escape(doc['file'])}")
    for d in doc["devices"]:
        ds = d.get("datasheet") or {}
        peaks = ""
        if ds.get("entry"):
            p = ds["peaks_tflops"]
            peaks = " | datasheet " + ", ".join(f"{k} {v:g}" for k, v in p.items()) + " TFLOP/s"
            if ds.get("memory_tbs"):
                peaks += f", {ds['memory_tbs']:g} TB/s"
        console.print(f"device {d['id']}: {escape(d['name'] or '?')}{peaks}")
        if ds.get("note") and not ds.get("entry"):
            console.print(f"  [yellow]note:[/] {escape(ds['note'])}")
    dist = doc["trace"].get("distributed")
    if dist:
        console.print("distributed: " + ", ".join(f"{k} {v}" for k, v in dist.items()))
    console.print(
        f"{s['kernel_count']} kernels, kernel time {s['kernel_time_us']:,.1f} us; Tensor Core share "
        f"{_pct(s['tensor_core_share'])} (unknown {_pct(s['tensor_core_unknown_share'])}); communication "
        f"{_pct(s['comm_share'])} of kernel time; exposed communication {s['exposed_comm_us']:,.1f} us = "
        f"{_pct(s['exposed_comm_share'])} of the traced span {s['wall_span_us']:,.1f} us; GPU busy "
        f"{_pct(s['gpu_busy_share'])} of it")

    labels = doc.get("classes", {})
    t = Table(title="kernel time by class", header_style="bold")
    for c, j in (("class", "left"), ("kernels", "right"), ("time us", "right"), ("share", "right")):
        t.add_column(c, justify=j)
    for cls, tm in s["time_by_class_us"].items():
        t.add_row(labels.get(cls, cls), str(s["count_by_class"][cls]), f"{tm:,.1f}", _pct(s["share_by_class"][cls]))
    console.print(t)

    t = Table(title=f"top {min(top, len(doc['kernels']))} kernels", header_style="bold")
    for c, j in (("kernel", "left"), ("class", "left"), ("TC", "left"), ("rule", "left"), ("calls", "right"),
                 ("time us", "right"), ("share", "right")):
        t.add_column(c, justify=j, no_wrap=c != "kernel")
    for k in doc["kernels"][:top]:
        p = k["params"]
        t.add_row(escape(_short(p["kernel"])), p["class"], k["tensor_cores"], p["rule"].split(" ")[0], str(p["calls"]),
                  f"{p['kernel_time_us']:,.1f}", _pct(p["share"]))
    console.print(t)

    if doc["steps"]:
        t = Table(title="profiler steps", header_style="bold")
        for c in ("step", "wall us", "kernels", "kernel time us", "GPU span us"):
            t.add_column(c, justify="left" if c == "step" else "right")
        for st in doc["steps"]:
            t.add_row(st["name"], f"{st['wall_us']:,.1f}", str(st["kernel_count"]), f"{st['kernel_time_us']:,.1f}",
                      f"{st['gpu_span_us']:,.1f}")
        console.print(t)
    if doc["annotations"]:
        t = Table(title="user annotations (record_function ranges; kernels by launch time, any thread)",
                  header_style="bold")
        for c in ("annotation", "calls", "wall us", "kernels", "kernel time us", "GPU annotation us"):
            t.add_column(c, justify="left" if c == "annotation" else "right")
        for a in doc["annotations"][:top]:
            g = a.get("gpu_annotation_us")
            t.add_row(escape(_short(a["name"], 60)), str(a["calls"]), f"{a['wall_us']:,.1f}", str(a["kernel_count"]),
                      f"{a['kernel_time_us']:,.1f}", "-" if g is None else f"{g:,.1f}")
        console.print(t)
    for n in doc["notes"]:
        console.print(f"[yellow]note:[/] {escape(n)}")
