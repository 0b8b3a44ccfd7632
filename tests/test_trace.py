"""microbench.trace.cli on the four real GPU traces of tests/data/traces (counts checked against SOURCES.md and
against independent computations from the whole file), on a hand-written AMD trace, and on broken files."""

from __future__ import annotations

import gzip
import json
import tracemalloc
from pathlib import Path

import pytest

from microbench.core.config import load_config
from microbench.trace import analysis as trace
from microbench.trace import cli as trace_cli
from microbench.trace import kineto

from .conftest import SLICE, TRACES, analyze, needs_traces

DATA = Path(__file__).resolve().parent / "data"
AMD = DATA / "amd_mi300x_synthetic.json"


@pytest.fixture(scope="module")
def cfg():
    # Import what analyze() imports lazily (torch among it) now, not under tracemalloc, which slows imports.
    import microbench.roofline.ceilings  # noqa: F401
    import microbench.roofline.timing  # noqa: F401

    return load_config()


_cache: dict[str, tuple[dict, int]] = {}


def analyzed(name: str, cfg) -> tuple[dict, int]:
    """Each real trace is read once per session, under tracemalloc so the memory test needs no second read."""
    if name not in _cache:
        tracemalloc.start()
        try:
            doc = analyze(TRACES / name, cfg)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        _cache[name] = (doc, peak)
    return _cache[name]


def raw_events(path: Path) -> list[dict]:
    """The test's own independent reading of a whole trace (fine for a test, not for the tool)."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        return json.load(f)["traceEvents"]


# --- the real traces --------------------------------------------------------------------------------------

SOURCES_COUNTS = [  # SOURCES.md: sum of cat == "kernel" durations, counted independently
    ("a100_alexnet_forward.json.gz", 79, 10_692),
    ("v100_resnet_ddp_rank0.json.gz", 4_350, 468_154),
    ("a100_torchrec_rank0.json.gz", 1_154, 606_519),
]


@pytest.mark.slow
@needs_traces
@pytest.mark.parametrize("name,count,time_us", SOURCES_COUNTS)
def test_kernel_counts_and_time_match_sources(cfg, name, count, time_us):
    s = analyzed(name, cfg)[0]["summary"]
    assert s["kernel_count"] == count
    assert s["kernel_time_us"] == pytest.approx(time_us, abs=0.5)
    assert sum(s["share_by_class"].values()) == pytest.approx(1.0)
    assert sum(s["time_by_class_us"].values()) == pytest.approx(s["kernel_time_us"])


@needs_traces
def test_torchrec_nccl_share_and_exposed_communication(cfg):
    doc = analyzed("a100_torchrec_rank0.json.gz", cfg)[0]
    s = doc["summary"]
    assert s["comm_share"] == pytest.approx(0.653, abs=0.0005)  # SOURCES.md: NCCL 65.3 %
    comm = [k for k in doc["kernels"] if k["op"] == "comm"]
    assert comm and all("nccl" in k["shape"].lower() for k in comm)

    # Independent exposed-communication figure: walk every microsecond boundary of the whole file's kernels.
    events = [e for e in raw_events(TRACES / "a100_torchrec_rank0.json.gz") if e.get("ph") == "X"]
    kernels = [e for e in events if e.get("cat") == "kernel"]
    points = sorted({p for e in kernels for p in (e["ts"], e["ts"] + e["dur"])})
    exposed = 0.0
    for lo, hi in zip(points, points[1:]):
        mid = (lo + hi) / 2
        active = [e for e in kernels if e["ts"] <= mid < e["ts"] + e["dur"]]
        if any("nccl" in e["name"] for e in active) and not any("nccl" not in e["name"] for e in active):
            exposed += hi - lo
    span = max(e["ts"] + e["dur"] for e in events if e["cat"] != "Trace") - min(
        e["ts"] for e in events if e["cat"] != "Trace"
    )
    assert s["exposed_comm_us"] == pytest.approx(exposed, abs=1e-6)
    assert s["wall_span_us"] == pytest.approx(span)
    gpu = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    gpu_span = max(e["ts"] + e["dur"] for e in gpu) - min(e["ts"] for e in gpu)
    assert s["gpu_span_us"] == pytest.approx(gpu_span)  # shares are of the GPU span, not of the CPU's
    assert s["exposed_comm_share"] == pytest.approx(exposed / gpu_span)
    assert 0 < s["exposed_comm_us"] < s["comm_time_us"]  # some of the SendRecv time hides behind compute


@pytest.mark.slow
@needs_traces
def test_tensor_core_attribution_on_real_traces(cfg):
    alex = analyzed("a100_alexnet_forward.json.gz", cfg)[0]
    tc = [k for k in alex["kernels"] if k["tensor_cores"] == "yes"]
    # SOURCES.md: one TF32 tensor-core implicit-GEMM conv kernel
    assert [k["shape"] for k in tc] == [k["shape"] for k in tc if "xmma" in k["shape"] and "tf32" in k["shape"]]
    assert len(tc) == 1
    assert alex["summary"]["tensor_core_share"] == pytest.approx(tc[0]["params"]["kernel_time_us"] / 10_692, abs=1e-4)
    # read by the xmma naming grammar: the instruction shape tensor16x8x8 and the tf32 operands
    assert all(k["tensor_core_evidence"].startswith("kernel name matched grammar [xmma") for k in tc)
    assert all("tensor" in k["tensor_core_evidence"] and "tf32" in k["tensor_core_evidence"] for k in tc)

    v100 = analyzed("v100_resnet_ddp_rank0.json.gz", cfg)[0]
    assert v100["summary"]["tensor_core_share"] == 0.0  # fp32 on V100: no tensor-core kernels
    # cuDNN's fp32 scudnn convolutions are convolutions on CUDA cores, not element-wise work
    scudnn = [k for k in v100["kernels"] if "scudnn" in k["shape"]]
    assert scudnn and all(k["op"] == "gemm" and k["tensor_cores"] == "no" for k in scudnn)

    rec = analyzed("a100_torchrec_rank0.json.gz", cfg)[0]
    tc = [k for k in rec["kernels"] if k["tensor_cores"] == "yes"]
    assert tc and all("tensorop" in k["shape"] for k in tc)
    assert 0 < rec["summary"]["tensor_core_share"] < 0.2
    # `gemm` inside `fbgemm_gpu::` is a library name: those kernels are not GEMMs
    assert not [k for k in rec["kernels"] if "fbgemm_gpu" in k["shape"] and k["op"] in ("gemm", "tc_gemm")]


@needs_traces
def test_devices_and_datasheet_from_trace_properties(cfg):
    v100 = analyzed("v100_resnet_ddp_rank0.json.gz", cfg)[0]["devices"]
    assert [d["name"] for d in v100] == ["Tesla V100-SXM2-32GB"]
    assert v100[0]["datasheet"]["entry"] == "v100_sxm2"
    assert v100[0]["datasheet"]["peaks_tflops"]["fp32"] == 15.7
    # The A100 traces' board (40 GB: 42.3 GB in their deviceProperties) has its own entry: the 80 GB part's compute,
    # the 40 GB part's memory bandwidth.
    alex = analyzed("a100_alexnet_forward.json.gz", cfg)[0]["devices"]
    assert alex[0]["name"] == "NVIDIA A100-PG509-200" and alex[0]["datasheet"]["entry"] == "a100_pg509_200"
    assert alex[0]["datasheet"]["peaks_tflops"]["tf32"] == 156.0
    # The TorchRec trace has no deviceProperties at all.
    rec = analyzed("a100_torchrec_rank0.json.gz", cfg)[0]["devices"]
    assert rec[0]["name"] is None and "no deviceProperties" in rec[0]["datasheet"]["note"]


@needs_traces
def test_steps_and_annotations_partition_kernel_time(cfg):
    v100 = analyzed("v100_resnet_ddp_rank0.json.gz", cfg)[0]
    steps = v100["steps"]
    assert [st["name"] for st in steps] == [f"ProfilerStep#{i}" for i in range(101, 106)]
    assert all(st["kernel_count"] == 870 for st in steps)
    assert sum(st["kernel_time_us"] for st in steps) == pytest.approx(v100["summary"]["kernel_time_us"])
    ann = {a["name"]: a for a in v100["annotations"]}
    phases = [ann[n] for n in ("## forward ##", "## backward ##", "## optimizer ##")]
    # forward, backward and optimizer cover every kernel once; backward kernels are launched from the
    # autograd thread, not the one that opened `## backward ##`
    assert sum(a["kernel_time_us"] for a in phases) == pytest.approx(v100["summary"]["kernel_time_us"])
    assert ann["## backward ##"]["kernel_time_us"] > ann["## forward ##"]["kernel_time_us"]

    rec = analyzed("a100_torchrec_rank0.json.gz", cfg)[0]
    assert [st["kernel_count"] for st in rec["steps"]] == [577, 577]
    assert rec["summary"]["unattributed_kernels"] == 0


@pytest.mark.slow
@needs_traces
def test_every_real_trace_reads_and_triton_kernel_is_elementwise(cfg):
    for path in sorted(TRACES.glob("*.json.gz")):
        doc = analyzed(path.name, cfg)[0]
        assert doc["schema"] == trace.SCHEMA
        s = doc["summary"]
        for key in (
            "kernel_count",
            "kernel_time_us",
            "share_by_class",
            "tensor_core_share",
            "comm_share",
            "exposed_comm_share",
        ):
            assert key in s
        assert len({k["params"]["kernel"] for k in doc["kernels"]}) == len(doc["kernels"])
    tri = analyzed("a100_triton_example.json.gz", cfg)[0]
    assert [(k["shape"], k["op"]) for k in tri["kernels"]] == [("triton_poi_fused_add_cos_sin_0", "elementwise")]


@needs_traces
def test_memory_stays_far_below_the_document(cfg):
    name = "v100_resnet_ddp_rank0.json.gz"
    with gzip.open(TRACES / name, "rb") as f:
        text_bytes = len(f.read())
    peak = analyzed(name, cfg)[1]
    # json.load of this 15 MB text peaks near 80 MB of Python objects; the reader holds a few chunks of text,
    # their decoded events and the columns.
    assert peak < text_bytes / 2, f"peak {peak / 1e6:.1f} MB for {text_bytes / 1e6:.1f} MB of JSON"


@needs_traces
def test_chunk_boundaries_do_not_change_the_result(cfg, monkeypatch):
    name = "a100_alexnet_forward.json.gz"
    whole = analyzed(name, cfg)[0]
    monkeypatch.setattr(kineto, "CHUNK_BYTES", 997)  # cuts fall everywhere: inside strings, numbers, events
    monkeypatch.setattr(kineto, "_read_whole", lambda p: pytest.fail("a valid trace is read piece by piece"))
    monkeypatch.setattr(json, "loads", lambda *a, **k: pytest.fail("trace reading must not json.loads"))
    small = analyze(TRACES / name, cfg)
    assert small["summary"] == whole["summary"]
    assert small["kernels"] == whole["kernels"]
    assert small["steps"] == whole["steps"] and small["annotations"] == whole["annotations"]


@needs_traces
def test_the_whole_file_reading_gives_the_same_timeline(cfg, monkeypatch):
    name = "a100_torchrec_rank0.json.gz"
    pieces = analyzed(name, cfg)[0]
    monkeypatch.setattr(kineto, "_read_pieces", lambda p: (_ for _ in ()).throw(kineto._Unsplit()))
    monkeypatch.setattr(kineto, "BATCH_EVENTS", 97)
    whole = analyze(TRACES / name, cfg)
    assert whole["summary"] == pieces["summary"] and whole["kernels"] == pieces["kernels"]
    assert whole["steps"] == pieces["steps"] and whole["annotations"] == pieces["annotations"]


# --- the synthetic AMD trace -------------------------------------------------------------------------------


def test_amd_trace_matrix_cores_rccl_and_exposed_comm(cfg):
    doc = analyze(AMD, cfg)
    s = doc["summary"]
    assert s["kernel_count"] == 6 and s["kernel_time_us"] == 900
    assert s["tensor_core_share"] == pytest.approx(300 / 900)
    tc = {k["shape"][:31] for k in doc["kernels"] if k["tensor_cores"] == "yes"}
    assert tc == {"Cijk_Ailk_Bljk_BBS_BH_MT256x256", "Cijk_Alik_Bljk_HHS_BH_MT128x128"}
    # rocBLAS without an MI tile does not say whether MFMA ran: unknown, not a guess
    sb = next(k for k in doc["kernels"] if k["shape"].startswith("Cijk_Ailk_Bljk_SB"))
    assert (sb["op"], sb["tensor_cores"]) == ("gemm", "unknown")
    assert s["comm_share"] == pytest.approx(400 / 900)
    assert s["exposed_comm_us"] == pytest.approx(50)
    # shares are of the GPU span [100, 720), not of the traced span (1000 us, CPU events included)
    assert s["wall_span_us"] == 1000 and s["gpu_span_us"] == 620
    assert s["exposed_comm_share"] == pytest.approx(50 / 620) and s["gpu_busy_share"] == pytest.approx(570 / 620)
    assert s["memcpy_time_us"] == 20
    assert doc["devices"][0]["datasheet"]["entry"] == "mi300x"
    assert doc["trace"]["distributed"] == {"backend": "nccl", "rank": 0, "world_size": 8}
    # the memcpy [700, 720) has no launch and the trace no GPU-side step annotation: outside the step, never
    # placed by its own start. Compute [100, 600) and RCCL [250, 650): the step's busy 550 = 500 computation +
    # 50 exposed communication; the idle [650, 700) lies between the step's GPU span and the copy; no shapes,
    # no model FLOPs.
    assert doc["steps"] == [
        {
            "name": "ProfilerStep#7",
            "wall_us": 1000,
            "kernel_count": 6,
            "kernel_time_us": 900,
            "gpu_span_us": 550,
            "gpu_time_us": 900,
            "busy_us": 550,
            "computation_us": 500,
            "exposed_comm_us": 50,
            "exposed_memcpy_us": 0,
            "idle_us": 0,
            "comm_us": 400,
            "overlapped_comm_us": 350,
            "model_flops": 0,
            "achieved_tflops": None,
            "mfu": None,
            # the TensorBoard plugin's categories go by time in the step's window [0, 1000]: the
            # copy [700, 720) is in it; the GPU's idle rest goes to what the host was doing
            "breakdown_span_us": 1000,
            "breakdown_us": {
                "kernel": 550,
                "memcpy": 20,
                "memset": 0,
                "runtime": 15,
                "dataloader": 0,
                "cpu_exec": 5,
                "other": 410,
            },
            "idle_by_host_us": {"sync": 0, "setup": 0, "runtime": 15, "dataloader": 0, "cpu_ops": 5, "other": 410},
            # '## forward ##' [10, 310): the GPU is idle in it until the first kernel at 100
            "idle_in_ranges_us": {"## forward ##": 90},
        }
    ]
    out = doc["outside_steps"]
    assert (out["outside_steps"]["activities"], out["outside_steps"]["exposed_memcpy_us"]) == (1, 20)
    assert out["unlaunched_outside_steps"] == 1 and out["between_steps_idle_us"] == 50
    fwd = next(a for a in doc["annotations"] if a["name"] == "## forward ##")
    assert (fwd["kernel_count"], fwd["kernel_time_us"]) == (3, 400)


def test_gzip_and_plain_and_tiny_chunks_agree(cfg, tmp_path, monkeypatch):
    gz = tmp_path / "amd.json.gz"  # the format is read from the bytes, not the name
    gz.write_bytes(gzip.compress(AMD.read_bytes()))
    plain = analyze(AMD, cfg)
    assert analyze(gz, cfg)["summary"] == plain["summary"]
    monkeypatch.setattr(kineto, "CHUNK_BYTES", 7)
    assert analyze(gz, cfg)["kernels"] == plain["kernels"]


def _mini_trace(kernels: list[tuple[str, float, float, int]], extra=()) -> dict:
    return {
        "traceEvents": [
            {"ph": "X", "cat": "kernel", "name": n, "ts": ts, "dur": dur, "args": {"device": 0, "stream": st}}
            for n, ts, dur, st in kernels
        ]
        + list(extra)
    }


@pytest.mark.parametrize(
    "kernels,exposed",
    [
        ([("ncclKernel_AllReduce", 0, 100, 2), ("volta_sgemm_64x64_nt", 0, 100, 1)], 0.0),  # fully hidden
        ([("ncclKernel_AllReduce", 0, 100, 2)], 100.0),  # nothing to hide behind
        (
            [
                ("ncclKernel_AllReduce", 0, 100, 2),
                ("ncclKernel_AllGather", 50, 100, 3),  # comm overlapping comm
                ("volta_sgemm_64x64_nt", 20, 10, 1),
                ("volta_sgemm_64x64_nt", 140, 100, 1),
            ],
            150 - 10 - 10,
        ),
    ],
)
def test_exposed_comm_is_the_union_minus_compute(cfg, tmp_path, kernels, exposed):
    p = tmp_path / "t.json"
    p.write_text(json.dumps(_mini_trace(kernels)))
    s = analyze(p, cfg)["summary"]
    assert s["exposed_comm_us"] == pytest.approx(exposed)
    assert s["exposed_comm_share"] == pytest.approx(exposed / s["wall_span_us"])


def test_trace_without_kernels_is_reported_not_an_error(cfg, tmp_path):
    p = tmp_path / "cpu_only.json"
    p.write_text(json.dumps({"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 0, "dur": 5}]}))
    doc = analyze(p, cfg)
    assert doc["summary"]["kernel_count"] == 0 and doc["summary"]["tensor_core_share"] is None
    assert any("no GPU kernel events" in n for n in doc["notes"])


def test_cli_prints_report_and_writes_json(tmp_path, capsys):
    out = tmp_path / "sub" / "amd.json"
    assert trace_cli.main([str(AMD), "--json", str(out), "--top", "3"]) == 0
    text = capsys.readouterr().out
    assert "AMD Instinct MI300X" in text and "33.3%" in text and "ProfilerStep#7" in text
    doc = json.loads(out.read_text())
    assert doc["summary"]["kernel_count"] == 6 and len(doc["kernels"]) == 6


# --- bad input: exit 2 and one line naming the file ----------------------------------------------------------


def _bad_inputs(tmp: Path) -> dict[str, tuple[Path, str]]:
    good = AMD.read_text()
    cases = {
        "empty": (b"", "empty file"),
        "whitespace": (b"  \n\t ", "empty file"),
        "not json": (b"hello, this is not a trace\n", "not JSON"),
        "html": (b"<html><body>404</body></html>", "not JSON"),
        "not utf-8": (bytes(range(128, 256)) * 4, "not UTF-8"),
        "truncated json": (good[: len(good) // 2].encode(), "truncated JSON"),
        "truncated gzip": (gzip.compress(good.encode())[:400], "truncated gzip"),
        "corrupt gzip": (b"\x1f\x8b" + b"\x08\x00" + b"garbage" * 20, "gzip"),
        "results file": (json.dumps({"schema": "dawnscope.results/1", "results": []}).encode(), "no traceEvents"),
        "top-level array": (b"[1, 2, 3]", "JSON array at the top level"),
        "events not array": (b'{"traceEvents": {"a": 1}}', "traceEvents is not an array of events (found an object)"),
        "event not object": (b'{"traceEvents": [1]}', "traceEvents[0] is not an event object (found a number)"),
        "kernel ts string": (
            json.dumps({"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": "0", "dur": 1}]}).encode(),
            "expected numbers",
        ),
        "bad json inside": (b'{"traceEvents": [{"ph": "X",, }]}', "not valid JSON"),
        "trailing garbage": (b'{"traceEvents": []} {"x": 1}', "extra data"),
        # a report of zeros would read as measured (was: exit 0, every table empty)
        "no events": (b'{"traceEvents": []}', "traceEvents is empty"),
        "no events, gzip": (gzip.compress(b'{"traceEvents": [], "schemaVersion": 1}'), "traceEvents is empty"),
    }
    out = {}
    for i, (label, (data, expect)) in enumerate(cases.items()):
        p = tmp / f"bad{i}.json"
        p.write_bytes(data)
        out[label] = (p, expect)
    out["missing"] = (tmp / "does_not_exist.json", "cannot read")
    return out


def test_bad_traces_exit_2_with_one_line(tmp_path, capsys):
    for label, (path, expect) in _bad_inputs(tmp_path).items():
        rc = trace_cli.main([str(path)])
        captured = capsys.readouterr()
        lines = captured.err.strip().splitlines()
        assert rc == 2, label
        assert len(lines) == 1 and lines[0].startswith(f"error: {path}: "), (label, captured.err)
        assert expect in lines[0], (label, lines[0])
        assert captured.out == "", label


def test_out_with_one_trace_is_one_line_not_silence(tmp_path, capsys):
    """--out DIR is a job's folder: given one trace it used to exit 0 having written nothing and said nothing."""
    out = tmp_path / "out"
    assert trace_cli.main([str(SLICE), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --out") and str(out) in err and "--json OUT" in err and "\n" not in err, err
    assert not out.exists()
