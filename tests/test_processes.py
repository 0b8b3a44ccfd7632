"""Several processes in one file (trace/processes.py): a merged file of ranks is read as a job, each process as its
rank. Was: a TraceLens TraceFusion merge of four ranks read as one process: 12 interleaved ProfilerSteps, exposed
communication "86.4 % per step" and per-step MFU of 0.2 %, 9.5 % and 18.5 % for the same step on identical ranks.

The merged files here are made as TraceLens's TraceFusion writes them (AMD-AGI/TraceLens,
TraceLens/TraceFusion/trace_fuse.py, MIT): each rank's `pid`, `id` and linking key (`correlation`) offset by
rank x 10^(digits of the first file's largest value + 1), `args.rank` added, the `Trace` events dropped, and only
`traceEvents` kept (no distributedInfo, no deviceProperties)."""

from __future__ import annotations

import gzip
import json
import math

import pytest

from microbench.comm.job import job_with_reports
from microbench.trace import processes
from microbench.trace.analysis import read_trace

from .conftest import TRACES

RANKS = [TRACES / "a100_torchrec_rank0.json.gz", TRACES / "a100_torchrec_rank1.json.gz"]


def _events(path) -> list[dict]:
    with gzip.open(path, "rt") as f:
        return json.load(f)["traceEvents"]


def trace_fusion(paths, out) -> None:
    """The rank traces merged in TraceFusion's layout (module docstring)."""
    first = _events(paths[0])
    largest = {"id": 0, "pid": 0, "correlation": 0}
    for e in first:
        for key in largest:
            value = e.get("args", {}).get(key) if key == "correlation" else e.get(key)
            if type(value) is int:
                largest[key] = max(largest[key], value)
    step = {k: 10 ** (math.ceil(math.log10(v)) + 1) for k, v in largest.items() if v > 0}
    merged = []
    for rank, path in enumerate(paths):
        for e in _events(path):
            if e.get("cat") == "Trace":
                continue
            args = e.setdefault("args", {})
            args["rank"] = rank
            for key, m in step.items():
                if key == "correlation" and key in args:
                    args[key] += rank * m
                elif key != "correlation" and type(e.get(key)) is int:
                    e[key] += rank * m
            merged.append(e)
    out.write_text(json.dumps({"traceEvents": merged}))


@pytest.fixture(scope="module")
def merged(tmp_path_factory):
    out = tmp_path_factory.mktemp("merged") / "merged_trace.json"
    trace_fusion(RANKS, out)
    return out


def test_a_merged_file_of_two_ranks_is_the_job_of_their_two_files(merged):
    """Each process read as its rank gives the same steps, GPU time and matched collectives as the ranks' own
    files read as a job: the split loses nothing and mixes nothing."""
    apart, _ = job_with_reports(RANKS, workers=0)
    together, _ = job_with_reports([merged], workers=0)
    # rank 1 wrote pid 4045; TraceFusion offsets it by 10^5 (the first file's largest pid, 4037, has 4 digits)
    assert together["processes_in_one_file"]["pids"] == [4037, 104045]
    assert [r["rank"] for r in together["ranks"]] == [0, 1]
    for a, b in zip(apart["ranks"], together["ranks"]):
        assert b["steps"] == a["steps"] and b["gpu_time"] == a["gpu_time"]
        assert (b["calls"], b["unmatched_calls"], b["comm_kernels"]) == (
            a["calls"],
            a["unmatched_calls"],
            a["comm_kernels"],
        )
    assert [c["op"] for c in together["collectives"]] == [c["op"] for c in apart["collectives"]]
    assert together["straggler_rank"] == apart["straggler_rank"] == 1
    # no distributedInfo in a merged file: a group size the calls do not record is unknown, not 1
    sizes = {c["op"]: c["group_size"] for c in together["collectives"]}
    assert sizes["alltoall"] is None and sizes["allgather"] == 64
    assert all(c["busbw_gbps"] is None for c in together["collectives"] if c["group_size"] is None)
    assert {c["op"]: c["group_size"] for c in apart["collectives"]}["alltoall"] == 128


def test_the_trace_command_reads_a_merged_file_as_a_job(merged, tmp_path, capsys):
    from microbench.trace.cli import main

    out = tmp_path / "job.json"
    assert main([str(merged), "--json", str(out), "--out", str(tmp_path / "job")]) == 0
    err = capsys.readouterr().err
    assert "holds 2 processes with their own steps and kernels: each is read as a rank of one job" in err
    doc = json.loads(out.read_text())
    assert doc["findings_rank"] == 1 and [r["process"] for r in doc["ranks"]] == [4037, 104045]
    assert (tmp_path / "job" / "heatmap.png").is_file()


def test_the_whole_file_says_it_holds_several_processes(merged):
    """Read as one trace (the library, where a caller asks for it), the integrity section names the processes."""
    from .conftest import analyze

    found = [m for m in analyze(merged)["integrity"]["missing"] if m["what"] == "several processes in one file"]
    assert len(found) == 1 and "2 processes (pids 4037, 104045)" in found[0]["detail"]
    assert found[0]["unreliable"] == ["steps", "MFU", "findings"]


def test_one_process_is_never_split():
    for path in RANKS + [TRACES / "mi300_bert_small.json.gz", TRACES / "v100_resnet_ddp_rank0.json.gz"]:
        assert processes.split(read_trace(path)) == []


def _rank_events(pid: int, gpu_pid: int, corr: int, device: int) -> list[dict]:
    """One rank: a step, a launch, its kernel on the GPU's track and the step's GPU-side annotation there."""
    kernel_args = {"device": device, "stream": 7, "correlation": corr}
    return [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": pid, "tid": 1, "ts": 0, "dur": 500},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": pid, "tid": 1, "ts": 10, "dur": 2,
         "args": {"correlation": corr}},
        {"ph": "X", "cat": "kernel", "name": "volta_sgemm_128x64_nn", "pid": gpu_pid, "tid": 7, "ts": 20, "dur": 100,
         "args": kernel_args},
        {"ph": "X", "cat": "gpu_user_annotation", "name": "ProfilerStep#1", "pid": gpu_pid, "tid": 7, "ts": 15,
         "dur": 200},
    ]  # fmt: skip


def test_each_rank_keeps_its_own_gpu_activity_and_gpu_side_annotations(tmp_path):
    """The GPU-side annotation goes with the rank that launched the activity on its track; where two ranks share a
    track (a plain cat of traces that each wrote device 0 as pid 0), it goes to neither."""
    path = tmp_path / "two.json"
    # TraceFusion's layout: each rank's GPU track offset with its pid; rank 1's copy has no launch (device majority)
    copy = {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoD (Device -> Device)", "pid": 1000, "tid": 7,
            "ts": 130, "dur": 5, "args": {"device": 1, "stream": 7}}  # fmt: skip
    path.write_text(json.dumps({"traceEvents": _rank_events(11, 10, 1, 0) + _rank_events(1011, 1000, 2, 1) + [copy]}))
    parts = processes.split(read_trace(path))
    assert [p for p, _ in parts] == [11, 1011]
    for (_, part), device in zip(parts, (0, 1)):
        assert set(part.activities.device) == {device}
        assert len(part.ranges) == 2 and len(part.launches) == 1 and part.meta["processes_in_file"] == 2
    assert [len(part.activities) for _, part in parts] == [1, 2]
    path.write_text(json.dumps({"traceEvents": _rank_events(11, 0, 1, 0) + _rank_events(12, 0, 2, 0)}))
    parts = processes.split(read_trace(path))
    assert [len(part.activities) for _, part in parts] == [1, 1]
    assert [len(part.ranges) for _, part in parts] == [1, 1]  # the CPU step only: the shared track is no one's
