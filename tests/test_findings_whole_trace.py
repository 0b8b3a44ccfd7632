"""A GPU trace without steps (a few iterations profiled without prof.step()) read as one step for the step rules
(findings/engine.py WholeTraceFacts, trace/gpu_time.py trace_window): launch- and host-bound per trace,
graph replays counted as one launch each, and the traces it must not be read so (warm-up, several processes,
a graph capture)."""

from __future__ import annotations

import json

import pytest

from microbench.core.config import load_config
from microbench.findings import engine as F
from microbench.findings import facts as FX
from microbench.report.findings_report import print_step_breakdown
from microbench.trace import gpu_time
from microbench.trace.analysis import TraceAnalysis

KERNEL = "triton_poi_fused_addmm_gelu_1"  # an Inductor element-wise kernel


def _runtime(name: str, corr: int, ts: float, dur: float = 4.0, pid: int = 1) -> dict:
    return {
        "ph": "X",
        "cat": "cuda_runtime",
        "name": name,
        "pid": pid,
        "tid": 1,
        "ts": ts,
        "dur": dur,
        "args": {"correlation": corr},
    }


def _kernel(corr: int, ts: float, dur: float = 10.0) -> dict:
    return {
        "ph": "X",
        "cat": "kernel",
        "name": KERNEL,
        "pid": 0,
        "tid": 7,
        "ts": ts,
        "dur": dur,
        "args": {"device": 0, "stream": 7, "correlation": corr},
    }


def _op(ts: float, dur: float, pid: int = 1) -> dict:
    return {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": pid, "tid": 1, "ts": ts, "dur": dur}


def _eager(n: int = 20, gap_us: float = 60.0) -> list[dict]:
    """`n` kernels of 10 us, each launched after `gap_us` of a CPU operator: the GPU idles between them."""
    ev, t = [], 1000.0
    for i in range(1, n + 1):
        ev += [_op(t, gap_us - 5), _runtime("cudaLaunchKernel", i, t + gap_us - 5), _kernel(i, t + gap_us)]
        t += gap_us
    return ev


def _graphed(graphs: int = 4, per_graph: int = 5, gap_us: float = 150.0) -> list[dict]:
    """`graphs` graph launches of `per_graph` back-to-back kernels each (one correlation per launch), host work
    of `gap_us` between them."""
    ev, t = [], 1000.0
    for g in range(1, graphs + 1):
        ev += [_op(t, gap_us - 5), _runtime("cudaGraphLaunch", g, t + gap_us - 5)]
        ev += [_kernel(g, t + gap_us + 10.0 * k) for k in range(per_graph)]
        t += gap_us + 10.0 * per_graph
    return ev


def _findings(tmp_path, events: list[dict]) -> tuple[TraceAnalysis, dict]:
    path = tmp_path / "trace.json"
    path.write_text(
        json.dumps({"traceEvents": events, "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3"}]})
    )
    ta = TraceAnalysis.open(path, load_config())
    return ta, F.findings_of(ta, load_config())


def test_a_trace_without_steps_is_one_step_from_its_first_launch_to_its_last_gpu_activity(tmp_path):
    ta, r = _findings(tmp_path, _eager())
    assert not ta.steps and r["per"] == "trace"
    window = r["window"]
    assert window["name"] == gpu_time.WHOLE_TRACE
    # the first launch at 1,055, the last kernel ends at 1,000 + 20 x 60 + 10 = 2,210
    assert window["breakdown_span_us"] == pytest.approx(2210 - 1055) == r["step_time_us"]
    assert sum(window["breakdown_us"].values()) == pytest.approx(window["breakdown_span_us"])
    (lb,) = [f for f in r["findings"] if f["id"] == "launch_bound"]
    assert lb["per"] == "trace" and "of the 1,155 us trace" in lb["what"]
    # the GPU idles 50 us between each pair of its 20 kernels, while the host runs operators and launches
    assert lb["saving_us"]["expected"] == pytest.approx(19 * 50)
    assert lb["evidence"]["launches_per_step"] == 20 and lb["evidence"]["graph_kernel_share"] == 0
    assert "no steps" not in " ".join(n["why"] for n in r["not_checked"])


def test_the_reports_show_the_whole_trace_row_the_findings_quote(tmp_path, capsys):
    from rich.console import Console

    ta, r = _findings(tmp_path, _eager())
    doc = F.with_findings(ta.document(), r)
    assert doc["findings_window"] == r["window"] and not doc["steps"]
    console = Console(width=160, record=True, file=open("/dev/null", "w"))
    print_step_breakdown(console, doc, "")
    row = next(line for line in console.export_text().splitlines() if line.strip().startswith(gpu_time.WHOLE_TRACE))
    assert "1,155.0" in row


def test_kernels_replayed_from_graphs_are_host_bound_per_graph_launch(tmp_path):
    """Graph replays: the launch-bound fix is in place, the idle between replays is the host's own work; each graph
    launch counts as one launch (4 launches of 5 kernels: 145 us of idle per launch, under the 200 us that would
    make eager launches host-bound)."""
    ta, r = _findings(tmp_path, _graphed())
    ids = [f["id"] for f in r["findings"]]
    assert "launch_bound" not in ids and "host_bound" in ids
    (hb,) = [f for f in r["findings"] if f["id"] == "host_bound"]
    assert hb["evidence"]["launches_per_step"] == pytest.approx(4) and hb["evidence"]["graph_kernel_share"] == 1.0
    assert "100% of its kernels already replay from CUDA / HIP graphs" in hb["what"]
    assert "per launch" in hb["what"]


def test_a_span_of_mostly_set_up_is_not_read_as_a_step(tmp_path):
    """A cudaMalloc of 2 ms inside a 1.2 ms-kernel trace (warm-up: context, modules, allocations) stops the step
    rules with that reason, naming --step-range; the rules that need no steps keep their own reasons."""
    ev = _eager()
    ev.insert(0, _runtime("cudaMalloc", 999, 1056, dur=2000.0))
    ev = [dict(e, ts=e["ts"] + 2000.0) if e["ts"] > 1056 else e for e in ev]
    _, r = _findings(tmp_path, ev)
    why = {n["id"]: n["why"] for n in r["not_checked"]}
    assert why["launch_bound"].startswith("no steps, and read whole the trace is mostly one-off set-up")
    assert "--step-range" in why["launch_bound"] and why["amp"].startswith("no operator shapes")  # not the set-up
    assert not [f for f in r["findings"] if f["id"] in ("launch_bound", "host_bound")]


def test_several_processes_or_a_graph_capture_are_not_read_as_one_step(tmp_path):
    two = _eager() + [_op(1100, 30, pid=2), _runtime("cudaLaunchKernel", 500, 1130, pid=2), _kernel(500, 1140)]
    _, r = _findings(tmp_path, two)
    assert r["per"] == "trace" and r["window"] is None
    assert FX.NEEDS_WHY["steps"] in {n["why"] for n in r["not_checked"]}
    capture = _eager() + [_runtime("cudaStreamBeginCapture", 600, 1010)]
    _, r = _findings(tmp_path, capture)
    assert r["window"] is None and FX.NEEDS_WHY["steps"] in {n["why"] for n in r["not_checked"]}
