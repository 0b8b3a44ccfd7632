"""rocprofv3 JSON (`rocprofiler-sdk-tool`) read into the one timeline, chosen by content (microbench/trace/
rocprof.py). Inputs: a 150-dispatch cut of the MI350X capture in tests/data/traces (AMD-AGI/TraceLens
tests/rocprof/908_results.json.gz; tests/data/SOURCES.md) and, where present, the whole capture."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from microbench.core.errors import InputError
from microbench.trace import rocprof
from microbench.trace.analysis import detect_format, read_trace
from microbench.trace.timeline import NO_ID

from .conftest import TRACES, analyze

SLICE = Path(__file__).parent / "data" / "mi350x_rocprofv3_slice.json"
WHOLE = TRACES / "mi350x_rocprofv3.json.gz" if TRACES else None


def _doc() -> dict:
    return json.loads(SLICE.read_text())


def test_dispatches_become_kernels_named_by_their_symbols():
    doc = _doc()["rocprofiler-sdk-tool"][0]
    records = doc["buffer_records"]["kernel_dispatch"]
    symbols = {s["kernel_id"]: s["formatted_kernel_name"] for s in doc["kernel_symbols"]}
    tl = read_trace(SLICE)
    assert tl.format == "rocprofv3" and len(tl.activities) == len(records) == 150
    assert [tl.names[n] for n in tl.activities.name] == [symbols[r["dispatch_info"]["kernel_id"]] for r in records]
    dur_ns = [r["end_timestamp"] - r["start_timestamp"] for r in records]
    assert tl.activities.dur_us.sum() == pytest.approx(sum(dur_ns) / 1000)
    # the one GPU agent that ran them: gpu_index 0 of eight MI350X agents (two CPU agents come first)
    assert set(tl.activities.device.tolist()) == {0}
    assert tl.device_properties[0]["name"] == "AMD Instinct MI350X"
    assert (tl.device_properties[0]["gcnArchName"], tl.device_properties[0]["numSms"]) == ("gfx950", 256)
    assert (tl.device_properties[0]["computeMajor"], tl.device_properties[0]["computeMinor"]) == (9, 5)


def test_the_format_is_told_by_content_plain_or_gzip(tmp_path):
    gz = tmp_path / "capture.json.gz"  # no name says rocprof
    gz.write_bytes(gzip.compress(SLICE.read_bytes()))
    assert detect_format(SLICE) == detect_format(gz) == "rocprofv3"
    assert len(read_trace(gz).activities) == 150


def test_hip_calls_are_the_launches_of_their_dispatches(tmp_path):
    doc = _doc()
    proc = doc["rocprofiler-sdk-tool"][0]
    hip = next(k["operations"] for k in proc["strings"]["buffer_records"] if k["kind"] == "HIP_RUNTIME_API")
    first = proc["buffer_records"]["kernel_dispatch"][:3]
    op = hip.index("hipLaunchKernel")
    proc["buffer_records"]["hip_api"] = [
        {
            "size": 64,
            "kind": 5,
            "operation": op,
            "thread_id": 908,
            "correlation_id": r["correlation_id"],
            "start_timestamp": r["start_timestamp"] - 5000,
            "end_timestamp": r["start_timestamp"] - 1000,
        }
        for r in first
    ]
    path = tmp_path / "with_hip.json"
    path.write_text(json.dumps(doc))
    tl = rocprof.read(path)
    li = tl.launch_index()
    assert (li[:3] != NO_ID).all() and (li[3:] == NO_ID).all()
    assert {tl.names[n] for n in tl.launches.name} == {"hipLaunchKernel"}


def test_a_broken_file_is_one_line(tmp_path):
    doc = _doc()
    doc["rocprofiler-sdk-tool"][0]["buffer_records"]["kernel_dispatch"][0]["start_timestamp"] = "soon"
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(InputError) as e:
        read_trace(path)
    assert "kernel_dispatch" in str(e.value) and "bad.json" in str(e.value)


@pytest.mark.skipif(WHOLE is None or not WHOLE.is_file(), reason="tests/data/traces not here")
def test_the_whole_mi350x_capture(cfg):
    doc = analyze(WHOLE, cfg)
    assert doc["summary"]["kernel_count"] == 43_915  # the dispatches SOURCES.md counts
    assert doc["devices"][0]["name"] == "AMD Instinct MI350X"
    # rocprofv3 ran without --hip-trace: no launch for any dispatch, said before any figure
    missing = {m["what"]: m for m in doc["integrity"]["missing"]}
    assert missing["launches"]["detail"].startswith("43915 of 43915 kernels")
    s = doc["summary"]
    parts = s["computation_share"] + s["copy_share"] + s["exposed_comm_share"] + s["idle_share"]
    assert parts == pytest.approx(1.0)
    assert np.isclose(s["gpu_busy_share"], 1 - s["idle_share"])


def test_memory_copies_are_copies_on_their_gpu(tmp_path):
    """The capture here has no memory_copy records (rocprofv3 ran without --memory-copy-trace); these follow
    rocprofiler-sdk's record (rocprofiler_buffer_tracing_memory_copy_record_t: operation, dst_agent_id,
    src_agent_id, bytes), between the capture's own CPU agent and its first GPU agent."""
    from microbench.trace.timeline import MEMCPY

    doc = _doc()
    proc = doc["rocprofiler-sdk-tool"][0]
    ops = next(k["operations"] for k in proc["strings"]["buffer_records"] if k["kind"] == "MEMORY_COPY")
    cpu, gpu = (next(a["id"] for a in proc["agents"] if a["type"] == t) for t in (1, 2))
    t0 = proc["buffer_records"]["kernel_dispatch"][0]["start_timestamp"]
    proc["buffer_records"]["memory_copy"] = [
        {
            "size": 80,
            "kind": 13,
            "operation": ops.index("MEMORY_COPY_HOST_TO_DEVICE"),
            "thread_id": 908,
            "correlation_id": {"internal": 99_000_001, "external": 0},
            "start_timestamp": t0 - 4000,
            "end_timestamp": t0 - 1000,
            "dst_agent_id": gpu,
            "src_agent_id": cpu,
            "bytes": 1 << 20,
        }
    ]
    tl = rocprof.read(_write_doc(tmp_path, doc))
    copies = np.flatnonzero(tl.activities.category == MEMCPY)
    assert len(copies) == 1 and tl.names[tl.activities.name[copies[0]]] == "Memcpy HtoD"
    assert tl.activities.device[copies[0]] == 0 and tl.activities.dur_us[copies[0]] == pytest.approx(3.0)


def test_records_no_rule_reads_are_named(cfg, tmp_path):
    # roctx ranges (`marker_api` buffer records) are not read: the annotations would miss them, and it says so
    doc = _doc()
    proc = doc["rocprofiler-sdk-tool"][0]
    proc["buffer_records"]["marker_api"] = proc["buffer_records"]["kernel_dispatch"][:2]
    out = analyze(_write_doc(tmp_path, doc), cfg)
    m = {e["what"]: e for e in out["integrity"]["missing"]}["records not read"]
    assert "marker_api (2)" in m["detail"] and m["unreliable"] == ["annotations"]


def _write_doc(tmp_path: Path, doc: dict) -> Path:
    p = tmp_path / "r.json"
    p.write_text(json.dumps(doc))
    return p
