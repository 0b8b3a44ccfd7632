"""A whole job of rank traces (microbench/comm/job.py, engine.py): made by scripts/make-job from the
two real TorchRec ranks with a planted straggler, read by the engines (inline, local processes, a Dask
LocalCluster), and the bad inputs."""

from __future__ import annotations

import gzip
import json

import pytest

from microbench.comm import job
from microbench.core.errors import InputError

from .conftest import TRACES, load_script, needs_traces

RANKS, STRAGGLER = 4, 2


@pytest.fixture(scope="module")
def job_dir(tmp_path_factory, shared_dir):
    bases = [shared_dir / "traces" / "a100_torchrec_rank0.json.gz"]  # one base: only the jitter tells ranks apart
    out = tmp_path_factory.mktemp("job")
    args = ["--ranks", str(RANKS), "--out", str(out), "--straggler", str(STRAGGLER), "--seed", "3"]
    assert load_script("make-job").main(args + sum((["--base", str(b)] for b in bases), [])) == 0
    return out


def _same_report(a: dict, b: dict) -> None:
    strip = ("engine",)
    for doc in (a, b):
        for r in doc["ranks"]:
            r.pop("file", None)
    assert {k: v for k, v in a.items() if k not in strip} == {k: v for k, v in b.items() if k not in strip}


def test_planted_straggler_found(job_dir):
    doc = job.analyze_job([job_dir], workers=0)
    assert [r["rank"] for r in doc["ranks"]] == list(range(RANKS))
    assert doc["straggler_rank"] == STRAGGLER
    assert doc["collectives"] and all({"straggler_rank", "skew_us"} <= c.keys() for c in doc["collectives"])
    assert all(c["straggler_rank"] == STRAGGLER for c in doc["collectives"])
    for metric in ("busy_us", "computation_us"):
        found = [o for o in doc["outliers"] if o["metric"] == metric]
        assert [o["rank"] for o in found] == [STRAGGLER] and "modified z-score" in found[0]["statistic"]
    for r in doc["ranks"]:  # the one breakdown per step: busy + idle = the step's GPU span
        assert r["steps"] and all(
            abs(s["busy_us"] + s["idle_us"] - s["gpu_span_us"]) < 1e-6 * s["gpu_span_us"] for s in r["steps"]
        )
        assert all("exposed_comm_us" in s for s in r["steps"])
    hm = doc["heatmap"]
    assert hm["ranks"] == list(range(RANKS)) and len(hm["steps"]) == 2
    assert all(len(row) == 2 and None not in row for row in hm["values_ms"])
    comp = hm["computation_ms"]  # where a slow rank shows: its own work per step
    assert all(max(range(RANKS), key=lambda i: comp[i][j]) == STRAGGLER for j in range(2))
    s = doc["slowest_step"]
    assert s["time_ms"] == max(max(row) for row in hm["values_ms"])
    assert doc["failed"] == []


def test_glob_and_files_agree(job_dir):
    a = job.analyze_job([str(job_dir / "rank-*.json.gz")], workers=0)
    b = job.analyze_job(sorted(job_dir.iterdir()), workers=0)
    _same_report(a, b)


@pytest.mark.slow
def test_process_pool_same_as_inline(job_dir):
    a = job.analyze_job([job_dir], workers=0)
    b = job.analyze_job([job_dir], workers=2)
    assert b["engine"]["kind"] == "processes" and b["engine"]["workers"] == 2
    assert sum(w["ranks"] for w in b["engine"]["per_worker"]) == RANKS
    _same_report(a, b)


@pytest.mark.slow
def test_dask_local_cluster_same_as_inline(job_dir):
    distributed = pytest.importorskip("distributed")
    a = job.analyze_job([job_dir], workers=0)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=None, processes=True) as cluster:
        b = job.analyze_job([job_dir], scheduler=cluster.scheduler_address, timeout_s=30)
    assert b["engine"]["kind"] == "dask" and b["engine"]["workers"] == 2
    _same_report(a, b)


@pytest.mark.slow
def test_command_writes_heatmap_and_html(job_dir, tmp_path, capsys):
    from microbench.comm import cli as comm

    assert (
        comm.main(
            [
                "ranks",
                str(job_dir),
                "--readers",
                "0",
                "--json",
                str(tmp_path / "j.json"),
                "--out",
                str(tmp_path / "out"),
            ]
        )
        == 0
    )
    assert (tmp_path / "out" / "heatmap.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    page = (tmp_path / "out" / "job.html").read_text()
    assert "data:image/png;base64," in page and f"straggler: rank {STRAGGLER}" in page
    doc = json.loads((tmp_path / "j.json").read_text())
    assert len(doc["ranks"]) == RANKS and all("rank" in r and "steps" in r for r in doc["ranks"])
    out = capsys.readouterr().out
    assert f"straggler: rank {STRAGGLER}" in out


def test_trace_command_takes_a_folder(job_dir, capsys):
    from microbench.trace import cli as trace

    assert trace.main([str(job_dir), "--readers", "0"]) == 0
    assert f"straggler: rank {STRAGGLER}" in capsys.readouterr().out


def test_folder_without_traces(tmp_path, capsys):
    from microbench.comm import cli as comm

    (tmp_path / "notes.txt").write_text("x")
    assert comm.main(["ranks", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "no traces in this folder" in err and "\n" not in err, err
    assert comm.main(["ranks", str(tmp_path / "*.json.gz")]) == 2
    assert "matches no trace" in capsys.readouterr().err


def test_a_rank_that_fails_is_listed(job_dir, tmp_path):
    bad = tmp_path / "job"
    bad.mkdir()
    for p in sorted(job_dir.iterdir())[:3]:
        (bad / p.name).write_bytes(p.read_bytes())
    (bad / "rank-99999.json.gz").write_bytes(gzip.compress(b'{"traceEvents": [{"ph": "X", "cat": "kernel"'))
    doc = job.analyze_job([bad], workers=0)
    assert [r["rank"] for r in doc["ranks"]] == [0, 1, 2]
    assert len(doc["failed"]) == 1 and doc["failed"][0]["file"].endswith("rank-99999.json.gz")
    assert doc["failed"][0]["reason"]


def test_different_jobs_mixed_named(job_dir, tmp_path, shared_dir):
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    for p in sorted(job_dir.iterdir())[:2]:
        (mixed / p.name).write_bytes(p.read_bytes())
    other = json.load(gzip.open(shared_dir / "traces" / "a100_torchrec_rank0.json.gz", "rt"))
    other["distributedInfo"]["rank"] = 7
    (mixed / "other-job.json.gz").write_bytes(gzip.compress(json.dumps(other).encode()))
    with pytest.raises(InputError, match=r"world_size 128: other-job.json.gz; world_size 4: rank-00000"):
        job.analyze_job([mixed], workers=0)


def test_unreachable_scheduler_one_line(job_dir, capsys):
    from microbench.comm import cli as comm

    assert comm.main(["ranks", str(job_dir), "--scheduler", "tcp://127.0.0.1:9", "--timeout", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert "cannot reach the Dask scheduler within 1 s" in err and "\n" not in err, err


def test_dask_environment_variable_is_the_scheduler(job_dir, capsys, monkeypatch):
    from microbench.comm import cli as comm

    monkeypatch.setenv("DASK_SCHEDULER_ADDRESS", "tcp://127.0.0.1:9")
    assert comm.main(["ranks", str(job_dir), "--timeout", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert "tcp://127.0.0.1:9" in err and "cannot reach the Dask scheduler" in err and "\n" not in err, err


def test_outliers_statistic():
    vals = {r: 100.0 + (r % 3) for r in range(20)} | {20: 180.0}
    found = job.outliers(vals, "busy_us")
    assert [o["rank"] for o in found] == [20] and found[0]["z"] > 3.5
    assert job.outliers({0: 1.0, 1: 5.0}, "busy_us") == []  # too few ranks to call one an outlier


def test_an_outlier_needs_a_minimum_effect_beside_its_z_score():
    """Ranks that agree to 0.1 % and one 3.8 % slower: a z-score far above 3.5, an effect within one rank's own
    step-to-step spread (data/job.toml min_relative_effect); 8 % slower is named."""
    steady = {r: 100.0 + 0.1 * (r % 2) for r in range(8)}
    assert job.outliers(steady | {8: 103.8}, "median_step_us") == []
    (found,) = job.outliers(steady | {8: 108.0}, "median_step_us")
    assert found["rank"] == 8 and found["relative_effect"] >= found["min_relative_effect"]


def test_interrupt_is_130(job_dir, capsys, monkeypatch):
    from microbench.comm import cli as comm

    def stop(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(job, "run_ranks", stop)
    assert comm.main(["ranks", str(job_dir)]) == 130
    assert capsys.readouterr().err.strip() == "interrupted"


def test_missing_ranks_are_said(job_dir, shared_dir, tmp_path, capsys):
    """Two ranks of a 128-rank job: the report says 126 have no trace, so its straggler is among two only."""
    doc = job.analyze_job([job_dir], workers=0)
    assert (doc["world_size"], doc["missing_ranks"]) == (RANKS, 0)
    pair = tmp_path / "pair"
    pair.mkdir()
    for k in (0, 1):
        (pair / f"rank{k}.json.gz").write_bytes((shared_dir / "traces" / f"a100_torchrec_rank{k}.json.gz").read_bytes())
    doc = job.analyze_job([pair], workers=0)
    assert (doc["world_size"], doc["missing_ranks"]) == (128, 126) and doc["missing_rank_ids"][:3] == [2, 3, 4]
    from microbench.trace import cli as trace

    assert trace.main([str(pair), "--readers", "0"]) == 0
    assert "126 of 128 ranks have no trace here" in capsys.readouterr().out


def test_large_job_prints_the_ranks_worth_a_look(job_dir, capsys, monkeypatch):
    from microbench.comm import engine, report

    doc = job.analyze_job([job_dir], workers=0)
    assert report._ranks_to_show(doc) == doc["ranks"]  # a small job: every rank
    settings = engine.job_settings()
    settings["report"]["all_ranks_up_to"] = 2
    monkeypatch.setattr(engine, "job_settings", lambda: settings)
    shown = [r["rank"] for r in report._ranks_to_show(doc)]
    busy = sorted(doc["ranks"], key=lambda r: r["gpu_time"]["busy_us"])
    assert STRAGGLER in shown and busy[0]["rank"] in shown and busy[-1]["rank"] in shown
    assert len(shown) < RANKS and shown == sorted(shown)
    report.print_ranks(doc)
    assert f"{len(shown)} of {RANKS} ranks" in " ".join(capsys.readouterr().out.split())


def test_a_long_jobs_table_lists_the_most_frequent_stragglers_only():
    from microbench.comm import report

    ranks = [{"rank": i, "times": 1, "gpu_time": {"busy_us": float(i)}} for i in range(100)]
    for i, times in ((7, 9), (8, 5), (9, 3)):
        ranks[i]["times"] = times
    doc = {"ranks": ranks, "outliers": [], "straggler_rank": 7, "slowest_step": {"slowest_rank": 50}}
    # every rank was last once: the three most often last, the slowest step's, the least, median and most busy
    assert [r["rank"] for r in report._ranks_to_show(doc)] == [0, 7, 8, 9, 50, 99]
    del doc["straggler_rank"], doc["slowest_step"]  # a job without matched collectives or steps
    assert [r["rank"] for r in report._ranks_to_show(doc)] == [0, 7, 8, 9, 50, 99]


@needs_traces
def test_group_size_from_record_param_comms_without_distributed_info(tmp_path):
    """Without distributedInfo, each collective's process group comes from the `Group size` PyTorch records on its
    record_param_comms (was: group size 1 and no world size). The A100 TorchRec ranks with distributedInfo
    removed and their group's size (128) written where PyTorch 2.1+ writes it give the report the original gives."""
    stripped = []
    for r in (0, 1):
        doc = json.loads(gzip.decompress((TRACES / f"a100_torchrec_rank{r}.json.gz").read_bytes()))
        assert doc.pop("distributedInfo")["world_size"] == 128
        for e in doc["traceEvents"]:
            if e.get("name") == "record_param_comms":
                e.setdefault("args", {})["Group size"] = 128
        stripped.append(tmp_path / f"rank{r}.json")
        stripped[-1].write_text(json.dumps(doc))
    original = job.analyze_job([TRACES / f"a100_torchrec_rank{r}.json.gz" for r in (0, 1)], workers=0)
    recorded = job.analyze_job(stripped, workers=0)
    assert recorded["world_size"] == original["world_size"] == 128
    group = lambda d: sorted({c["group_size"] for c in d["collectives"]})  # noqa: E731
    assert group(recorded) == group(original) == [64, 128]


@needs_traces
def test_trace_of_a_job_reads_each_rank_once(tmp_path, monkeypatch, capsys):
    """`dawnscope trace rank0 rank1`: the straggler's findings come from the reader that read it for the job view
    (findings/job.py); its file was read a second time for them. Counted by the Kineto reader's calls."""
    from microbench.trace import cli as trace_cli
    from microbench.trace import kineto

    reads = []
    real = kineto.read
    monkeypatch.setattr(kineto, "read", lambda path: reads.append(str(path)) or real(path))
    ranks = [str(TRACES / f"a100_torchrec_rank{r}.json.gz") for r in (0, 1)]
    out = tmp_path / "job.json"
    assert trace_cli.main([*ranks, "--readers", "0", "--json", str(out)]) == 0
    assert sorted(reads) == sorted(ranks)  # once each
    doc = json.loads(out.read_text())
    assert doc["findings_rank"] in (0, 1) and "findings" in doc and "findings_not_checked" in doc
    assert "findings" in capsys.readouterr().out
