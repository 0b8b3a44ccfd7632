"""Typed result rows: one measurement part, a subject per kind; the files keep their flat keys, old files
load as their kind, and a new kind is one small class that the writer, reports and compare take as is."""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from typing import ClassVar

import pytest

from microbench.core import results
from microbench.core.results import (
    KernelCaseRow,
    LayerRow,
    ResultRow,
    ResultsWriter,
    TraceKernelRow,
    row_from_dict,
    row_kind,
)
from microbench.report import compare
from microbench.report.roofline_report import results_cells

TIME = {"median": 2.0, "p20": 1.9, "p80": 2.2, "cov": 0.05, "reps": 10}


def _rows():
    return [
        KernelCaseRow(
            op="gemm",
            shape="64x64x64",
            dtype="bf16",
            provider="torch",
            device="cpu",
            baseline=True,
            time_ms=TIME,
            flops=2 * 64**3,
            tflops=1e-4,
            rel_err=1e-3,
            tolerance=1e-2,
        ),
        LayerRow(
            model="resnet9",
            layer="conv1",
            phase="forward",
            module="Conv2d",
            dtype="bf16",
            shape="n8 c3 32x32 k64 3x3 s1 p1",
            device="cpu",
            time_ms=TIME,
        ),
        TraceKernelRow(
            kernel="sm90_xmma_gemm_bf16bf16",
            kernel_class="tc_gemm",
            calls=12,
            device="H100",
            time_ms=TIME,
            tensor_cores="yes",
        ),
    ]


def test_each_kind_round_trips_through_its_dict():
    for row in _rows():
        d = json.loads(json.dumps(row.as_dict()))
        assert d["kind"] == row.kind and d["source"] == row.source
        assert row_from_dict(d) == row


def test_the_flat_keys_stay_what_they_were():
    case, layer, trace = (r.as_dict() for r in _rows())
    assert (case["op"], case["shape"], case["provider"], case["layer"]) == ("gemm", "64x64x64", "torch", None)
    assert (layer["op"], layer["provider"], layer["layer"], layer["phase"]) == (
        "Conv2d",
        "resnet9 step",
        "conv1",
        "forward",
    )
    # a trace row's kernel has its own field now; `shape` still carries it for older readers
    assert (trace["kernel"], trace["kernel_class"], trace["calls"]) == ("sm90_xmma_gemm_bf16bf16", "tc_gemm", 12)
    assert (trace["op"], trace["shape"], trace["provider"]) == ("tc_gemm", "sm90_xmma_gemm_bf16bf16", "trace")
    for d in (case, layer, trace):  # keys every row has had
        assert {"op", "shape", "dtype", "provider", "layer", "phase", "baseline", "rel_err", "source"} <= set(d)


def test_rows_of_files_written_before_kinds_load_as_their_kind():
    old_trace = {
        "op": "tc_gemm",
        "shape": "volta_h884gemm_64x64",
        "dtype": "",
        "provider": "trace",
        "device": "V100",
        "status": "ok",
        "source": "trace",
        "params": {"calls": 7},
        "flags": [],
    }
    old_layer = {
        "op": "Linear",
        "shape": "-",
        "dtype": "fp32",
        "provider": "ncf step",
        "device": "cpu",
        "status": "ok",
        "source": "model",
        "layer": "mlp.0",
        "phase": "backward",
    }
    old_case = {
        "op": "conv2d_fwd",
        "shape": "n1",
        "dtype": "fp32",
        "provider": "torch",
        "device": "cpu",
        "status": "ok",
        "source": "microbench",
        "baseline": True,
    }
    t, l, c = (row_from_dict(d) for d in (old_trace, old_layer, old_case))
    assert isinstance(t, TraceKernelRow) and (t.kernel, t.kernel_class, t.calls) == (
        "volta_h884gemm_64x64",
        "tc_gemm",
        7,
    )
    assert isinstance(l, LayerRow) and (l.model, l.module, l.layer) == ("ncf", "Linear", "mlp.0")
    assert isinstance(c, KernelCaseRow) and c.is_baseline


def test_a_row_of_an_unknown_kind_is_kept_as_read():
    d = {
        "kind": "from_the_future",
        "op": "all_reduce",
        "shape": "bytes=8",
        "dtype": "fp32",
        "provider": "nccl",
        "device": "H100",
        "status": "ok",
        "time_ms": TIME,
    }
    row = row_from_dict(d)
    assert row.key()[:4] == ("all_reduce", "bytes=8", "fp32", "nccl") and row.as_dict()["kind"] == "from_the_future"


def test_csv_keeps_its_columns_and_adds_kind_last(tmp_path):
    with ResultsWriter(tmp_path, {"hardware": {}, "software": {}}) as w:
        w.add_many(_rows())
    with open(w.csv_path, newline="") as f:
        reader = csv.DictReader(f)
        recs = list(reader)
    assert reader.fieldnames[:5] == ["op", "shape", "dtype", "provider", "device"]
    assert reader.fieldnames[-2:] == ["flags", "kind"]
    assert [r["kind"] for r in recs] == ["kernel_case", "layer", "trace_kernel"]
    assert recs[2]["shape"] == "sm90_xmma_gemm_bf16bf16" and recs[0]["time_ms_median"] == "2.0"


@pytest.fixture
def queue_kind():
    """A kind added the way a new job adds one: a small class, registered for the test only."""

    @row_kind
    @dataclass(kw_only=True)
    class QueueRow(ResultRow):
        kind: ClassVar[str] = "test_queue"
        source: ClassVar[str] = "test_queue"
        queue: str
        depth: int

        def flat(self) -> dict:
            return {
                "op": "queue",
                "shape": f"depth={self.depth}",
                "dtype": "",
                "provider": self.queue,
                "layer": None,
                "phase": None,
            }

    try:
        yield QueueRow
    finally:
        results.ROW_KINDS.pop("test_queue")


def test_a_new_kind_needs_no_change_in_the_writer_reports_or_compare(tmp_path, queue_kind):
    row = queue_kind(queue="io", depth=4, device="cpu", time_ms=TIME)
    header = {"hardware": {"name": "box", "kind": "cpu"}, "software": {}, "config": {"profile": "p"}}
    with ResultsWriter(tmp_path, header) as w:
        w.add(row)
    doc = json.loads(w.json_path.read_text())
    assert row_from_dict(doc["results"][0]) == row
    _, cells = results_cells(doc)
    assert cells[0][0][:5] == ["1", "queue", "depth=4", "", "io"]  # "#" first: the row's number on the plot
    cmp = compare.compare([w.json_path])
    assert [(c["op"], c["shape"], c["provider"]) for c in cmp["cases"]] == [("queue", "depth=4", "io")]
    assert cmp["cases"][0]["cells"]["box"]["time_ms"] == 2.0
