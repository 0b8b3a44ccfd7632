"""The notebook API (docs/api.md): `from microbench import TraceAnalysis, Job`, every table also a pandas
DataFrame, on the real traces (the shared ones and the H100 slice in tests/data)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import REPO, TRACES, needs_traces

SLICE = Path(__file__).parent / "data" / "h100_bert_small_slice.json"
pd = pytest.importorskip("pandas")


def test_the_names_are_public_and_import_microbench_stays_cheap():
    """`import microbench` and naming the two classes import neither pandas nor torch (the trace command's
    start-up); the names are the library's own classes, not copies."""
    code = (
        "import sys, microbench\n"
        "from microbench import TraceAnalysis, Job\n"
        "from microbench.findings.analysis import TraceAnalysis as T\n"
        "from microbench.comm.job import Job as J\n"
        "assert TraceAnalysis is T and Job is J and {'TraceAnalysis', 'Job'} <= set(microbench.__all__)\n"
        "print(sorted(m for m in ('pandas', 'torch') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    assert out.stdout.strip() == "[]"


def test_trace_analysis_frames_on_the_h100_slice(cfg):
    from microbench import TraceAnalysis

    from .conftest import analyze_with_findings as analyze

    a = TraceAnalysis.open(SLICE)
    assert repr(a) == f"<TraceAnalysis of {SLICE} (kineto, 9 GPU activities)>"  # 8 kernels and a memcpy
    frames = a.frames()
    assert list(frames) == list(TraceAnalysis.TABLES)
    k = frames["kernels"]
    assert len(k) == len(a.kernels) == a.document()["summary"]["kernel_count"] - 3  # 8 kernels, 5 distinct names
    assert k["params.kernel_time_us"].sum() == pytest.approx(a.summary["kernel_time_us"])
    assert k["kernel"].tolist() == [r["kernel"] for r in a.kernels]  # the document's order: most time first
    classes = frames["classes"].set_index("class")
    assert classes["time_us"].to_dict() == a.summary["time_by_class_us"]
    assert classes["share"].sum() == pytest.approx(1.0)
    assert frames["devices"]["datasheet.entry"].tolist() == ["h100_sxm5"]  # open() reads bench.toml's datasheet
    assert frames["steps"]["name"].tolist() == ["ProfilerStep#6"]
    # the same analysis as `python -m microbench.trace` (one library), not a second implementation
    assert a.document() == analyze(SLICE, cfg)


@needs_traces
@pytest.mark.parametrize("name", ["h100_bert_small.json.gz", "mi300_bert_small.json.gz", "a100_cupti_counters.json.gz"])
def test_trace_analysis_frames_on_the_shared_traces(name):
    from microbench import TraceAnalysis

    a = TraceAnalysis.open(TRACES / name)
    doc = a.document()
    for table in ("kernels", "ops", "steps", "annotations", "devices"):
        df = a.to_frame(table)
        assert len(df) == len(doc[table]), table
        assert df.attrs["table"] == table
    assert a.to_frame("kernels")["calls"].sum() == doc["summary"]["kernel_count"]
    ops = a.to_frame("ops")
    if len(ops):  # traces recorded with shapes: per-op FLOPs, the same numbers as the document's
        assert ops["flops"].sum() == pytest.approx(sum(o["flops"] for o in doc["ops"]))
    steps = a.to_frame("steps")  # the counters trace has no steps: an empty frame
    assert (steps["busy_us"].tolist() if len(steps) else []) == [s["busy_us"] for s in doc["steps"]]


@needs_traces
def test_job_of_the_two_torchrec_ranks():
    from microbench import Job
    from microbench.comm.job import analyze_job

    paths = [TRACES / f"a100_torchrec_rank{r}.json.gz" for r in (0, 1)]
    job = Job(paths, readers=0)
    assert repr(job).endswith("(not read yet)>")
    assert [r["rank"] for r in job.ranks] == [0, 1]
    assert repr(job).endswith("(2 ranks read)>")
    frames = job.frames()
    assert list(frames) == list(Job.TABLES)
    assert frames["ranks"]["rank"].tolist() == [0, 1]
    assert "steps" not in frames["ranks"].columns and "gpu_time.busy_us" in frames["ranks"].columns
    steps = frames["steps"]
    assert len(steps) == sum(len(r["steps"]) for r in job.ranks)
    assert steps.groupby("rank")["wall_us"].median().to_dict() == {r["rank"]: r["median_step_us"] for r in job.ranks}
    strag = frames["stragglers"]
    assert strag["rank"].iloc[0] == job.straggler_rank == job.report["straggler_rank"]
    assert strag["times"].sum() == len(job.collectives) == len(frames["collectives"])
    plain = analyze_job(paths, workers=0)  # what `comm ranks` prints: the same report
    assert {k: v for k, v in job.report.items() if k != "engine"} == {k: v for k, v in plain.items() if k != "engine"}


def test_a_job_of_one_trace_is_the_commands_error():
    from microbench import Job
    from microbench.core.errors import InputError

    with pytest.raises(InputError, match="at least two ranks"):
        _ = Job(SLICE).report


def test_unknown_table_names_the_tables():
    from microbench import TraceAnalysis

    with pytest.raises(KeyError, match="its tables: kernels, classes, ops"):
        TraceAnalysis.open(SLICE).to_frame("kernel")


def test_without_pandas_one_line_names_the_extra(monkeypatch):
    from microbench import TraceAnalysis
    from microbench.core.frames import FramesUnavailable

    a = TraceAnalysis.open(SLICE)
    monkeypatch.setitem(sys.modules, "pandas", None)  # as if not installed: `import pandas` raises ImportError
    with pytest.raises(FramesUnavailable) as e:
        a.to_frame("kernels")
    assert isinstance(e.value, ImportError)
    assert str(e.value) == "DataFrames need pandas, which is not installed: pip install 'dawnscope[frames]'"
    assert a.table("kernels") == a.kernels  # the lists of dicts need no pandas
