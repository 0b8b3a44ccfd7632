"""Communication (microbench.comm, python -m microbench.comm): nccl-tests formulas, checked collectives on
2 and 3 gloo processes, the DDP step split, the TorchRec rank pair, the scaling model, and failures that
end in one line instead of a hang."""

from __future__ import annotations

import gzip
import json
import os
import signal
import socket
import time

import pytest
import torch

from microbench.comm import busbw, scale, world
from microbench.comm import collectives as C
from microbench.comm.world import CommError

HANG_GUARD_S = 600


@pytest.fixture
def hang_guard():
    """Fails the test instead of hanging CI if a bounded wait were not bounded after all. Generous: on a
    2-core machine under a load of 12-15, two spawned ranks importing torch took over 120 s (the guard's
    earlier value) and failed runs that had not hung; a real hang still ends well within CI's 20 minutes."""

    def boom(*_):
        raise AssertionError("hung: the run did not end by itself")

    old = signal.signal(signal.SIGALRM, boom)
    signal.alarm(HANG_GUARD_S)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


# --- nccl-tests formulas --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "op,n,factor",
    [
        ("allreduce", 2, 1.0),
        ("allreduce", 8, 1.75),
        ("all_reduce", 3, 4 / 3),
        ("allgather", 4, 0.75),
        ("nccl:_all_gather_base", 64, 63 / 64),
        ("reduce_scatter", 8, 0.875),
        ("alltoall", 2, 0.5),
        ("broadcast", 16, 1.0),
        ("allreduce", 1, 0.0),
    ],
)
def test_bus_factor(op, n, factor):
    assert busbw.bus_factor(op, n) == pytest.approx(factor)


def test_algbw_and_busbw():
    # 1 GiB all-reduced in 0.5 s on 4 ranks: algbw 2.147 GB/s, busbw x 2*3/4
    assert busbw.algbw_gbps(2**30, 0.5) == pytest.approx(2**30 / 0.5 / 1e9)
    assert busbw.busbw_gbps("allreduce", 2**30, 0.5, 4) == pytest.approx(2**30 / 0.5 / 1e9 * 1.5)
    with pytest.raises(ValueError):
        busbw.bus_factor("frobnicate", 4)


def test_counts_round_to_what_moves():
    assert C.counts("allreduce", 7 * 4, 3) == (7, 28)
    assert C.counts("allgather", 7 * 4, 3) == (2, 24)  # 2 elements per rank actually move
    assert C.counts("alltoall", 4, 3) == (1, 12)  # at least one element per rank
    assert C.counts("broadcast", 1, 2) == (1, 4)


def test_sizes_parse():
    assert C.parse_sizes("8,4K,1M") == [8, 4096, 2**20]
    assert C.parse_sizes("deepbench")[0] == 100000 * 4
    with pytest.raises(Exception, match="--sizes"):
        C.parse_sizes("12Q")


def test_check_counts_an_all_zero_output():
    """The check itself: a 'collective' that writes zeros is caught element by element."""

    def zeros(op, x, out):
        (x if out is None else out).zero_()

    for op in ("allreduce", "allgather", "reducescatter", "alltoall"):
        _, _, expected = C._buffers(op, 123, 1, 3, "cpu")
        assert C.check(op, 123, 1, 3, "cpu", call=zeros) == int((expected != 0).sum()) > 0


def test_expected_values_are_independent():
    # all-reduce of rank patterns: computed here from the formula of the pattern, not from _buffers
    n, world_size = 7, 3
    expected = [sum(((i * 7 + r * 13) % 31) - 15 for r in range(world_size)) for i in range(n)]
    assert C._buffers("allreduce", n, 0, world_size, "cpu")[2].tolist() == expected


# --- real collectives on gloo ---------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("nproc", [2, 3])
def test_collectives_correct_odd_sizes(nproc, hang_guard):
    plan = C.Plan(ops=busbw.OPS, sizes_bytes=(4, 7 * 4, 123 * 4, 1001 * 4), warmup=0, iters=1, reps=2)
    records = world.run_local(C.bench_rank, (plan,), nproc, "gloo", timeout_s=60)[0]
    assert len(records) == len(busbw.OPS) * 4
    assert all(r["wrong"] == 0 and r["nranks"] == nproc for r in records), records
    rows = C.to_rows(records, "cpu", "gloo")
    r = next(x for x in rows if x.op == "allreduce" and x.bytes == 1001 * 4)
    assert r.status == "ok" and r.flops == 0 and r.flat()["shape"] == f"bytes=4004 ranks={nproc}"
    assert r.busbw_gbps == pytest.approx(r.gbps * 2 * (nproc - 1) / nproc)
    assert r.gbps == pytest.approx(4004 / (r.time_ms["median"] / 1e3) / 1e9)


def test_collective_row_round_trip():
    from microbench.core.results import CollectiveRow, row_from_dict

    rec = {
        "op": "allgather",
        "requested_bytes": 28,
        "message_bytes": 24,
        "elements": 2,
        "nranks": 3,
        "samples_ms": [1.0, 3.0],
        "wrong": 0,
    }
    (row,) = C.to_rows([rec], "cpu", "gloo")
    d = row.as_dict()
    assert (d["kind"], d["op"], d["shape"], d["provider"], d["bytes"]) == (
        "collective",
        "allgather",
        "bytes=24 ranks=3",
        "torch.distributed",
        24,
    )
    back = row_from_dict(d)
    assert isinstance(back, CollectiveRow) and back == row
    old = {k: v for k, v in d.items() if k not in ("kind", "message_bytes", "nranks")}  # no kind: by source
    assert (row_from_dict(old).message_bytes, row_from_dict(old).nranks) == (24, 3)


def test_cli_rows_compare_side_by_side(tmp_path, capsys):
    """Two result files of collective rows (e.g. two fabrics) line up per case in compare, with busbw."""
    from microbench.comm.collectives import to_rows
    from microbench.core.results import ResultsWriter
    from microbench.report import compare

    files = []
    for name, ms in (("a", 1.0), ("b", 0.5)):
        rec = {
            "op": "allreduce",
            "requested_bytes": 2**20,
            "message_bytes": 2**20,
            "elements": 2**18,
            "nranks": 2,
            "samples_ms": [ms] * 5,
            "wrong": 0,
        }  # 5 agreeing repeats: the judge trusts them
        hw = {
            "name": f"fabric-{name}",
            "kind": "cpu",
            "arch": "x86_64",
            "units": 2,
            "clock_mhz": None,
            "memory_gib": 1.0,
            "isa_flags": [],
        }
        sw = {"torch": "2", "triton": "3", "python": "3.11"}
        with ResultsWriter(tmp_path / name, {"hardware": hw, "software": sw}) as w:
            w.add_many(to_rows([rec], hw["name"], "gloo"))
        files.append(tmp_path / name / "results.json")
    cmp = compare.compare(files)
    (case,) = cmp["cases"]
    assert case["op"] == "allreduce" and not case["missing_in"]
    cells = case["cells"]
    assert cells["fabric-b"]["ratio_to_baseline"] == pytest.approx(2.0)
    assert cells["fabric-b"]["busbw_gbps"] == pytest.approx(2**20 / 0.5e-3 / 1e9)
    columns, rows, _ = compare.table_cells(cmp)
    assert "[2] busbw GB/s" in [c[0] for c in columns]
    from microbench.comm.plots import plot_busbw

    doc = json.loads(files[0].read_text())
    png = plot_busbw(doc["results"], "a", tmp_path / "busbw.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# --- failures end in one line within a timeout ----------------------------------------------------------


def _dies_before_allreduce(info):
    import torch.distributed as dist

    if info.rank == 1:
        os._exit(3)
    dist.all_reduce(torch.ones(4))


def _never_joins(info):
    import torch.distributed as dist

    if info.rank == 1:
        time.sleep(60)
        return None
    dist.all_reduce(torch.ones(4))


@pytest.mark.slow
def test_dead_rank_is_one_line(hang_guard):
    with pytest.raises(CommError) as e:
        world.run_local(_dies_before_allreduce, (), 2, "gloo", timeout_s=20)
    assert e.value.line() == "rank 1 died (exit code 3)"


@pytest.mark.slow
def test_collective_timeout_is_one_line(hang_guard):
    with pytest.raises(CommError) as e:
        world.run_local(_never_joins, (), 2, "gloo", timeout_s=3)
    line = e.value.line()
    assert line.startswith("rank 0 failed:") and "\n" not in line


def test_taken_port_is_one_line(hang_guard):
    with socket.socket() as s:
        s.bind((world.LOOPBACK, 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(CommError) as e:
            world.run_local(_dies_before_allreduce, (), 2, "gloo", timeout_s=5, port=port)
    assert f"{world.LOOPBACK}:{port}" in e.value.line() and "\n" not in e.value.line()


def test_cli_error_exit_code(capsys):
    from microbench.comm import cli as comm

    assert comm.main(["collectives", "--sizes", "nope"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --sizes") and "\n" not in err


# --- DDP step -------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_ddp_step_split(hang_guard, tmp_path):
    from microbench.comm.ddp import DdpPlan, ddp_rank, split_steps
    from tests.ext_model import Tiny

    cap_mb = 0.01  # several buckets for a 34 kB model
    plan = DdpPlan("tests.ext_model:make", 4, steps=2, bucket_cap_mb=cap_mb, trace_dir=str(tmp_path))
    doc = world.run_local(ddp_rank, (plan,), 2, "gloo", timeout_s=60)[0]
    # each rank's trace is kept (--out) and is the one its split was read from
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rank0.pt.trace.json", "rank1.pt.trace.json"]
    assert [split_steps(tmp_path / f"rank{r['rank']}.pt.trace.json") for r in doc["ranks"]] == [
        r["steps"] for r in doc["ranks"]
    ]
    # `trace` of a kept rank trace reads the same breakdown: its communication figures are the split's
    from microbench.findings.facts import CpuCommFacts
    from microbench.trace.analysis import TraceAnalysis

    facts = CpuCommFacts(TraceAnalysis.open(tmp_path / "rank0.pt.trace.json", None, "dawnscope.ddp_step"))
    keys = (
        ("exposed_comm_us", "exposed_comm_ms"),
        ("comm_us", "comm_ms"),
        ("computation_us", "compute_ms"),
        ("gpu_span_us", "step_ms"),
    )
    assert [st[a] for st in facts.steps for a, _ in keys] == pytest.approx(
        [s[b] * 1e3 for s in doc["ranks"][0]["steps"] for _, b in keys]
    )
    import os

    assert facts.host["local_ranks"] == 2 and facts.host["cores"] == len(os.sched_getaffinity(0))  # written by the rank
    params = list(Tiny().parameters())
    assert doc["gradient_bytes"] == sum(p.numel() * 4 for p in params)
    assert doc["buckets"] > 1 and sum(doc["bucket_bytes"]) == doc["gradient_bytes"]
    expected, size = [], 0  # DDP's rule: parameters in reverse order, a bucket closes once it reaches the cap
    for p in reversed(params):
        size += p.numel() * 4
        if size >= cap_mb * 2**20:
            expected.append(size)
            size = 0
    expected += [size] if size else []
    assert doc["bucket_bytes"] == expected
    for r in doc["ranks"]:
        for s in r["steps"]:
            assert s["allreduce_calls"] == doc["buckets"]  # one all-reduce per bucket, as DDP promises
            assert s["overlapped_comm_ms"] + s["exposed_comm_ms"] == pytest.approx(s["comm_ms"])
            assert 0 < s["compute_ms"] <= s["step_ms"] and s["exposed_comm_ms"] <= s["step_ms"]
        assert r["summary"]["comm_share"] == pytest.approx(r["summary"]["exposed_comm_ms"] / r["summary"]["step_ms"])


# --- the TorchRec rank pair -----------------------------------------------------------------------------


def _raw(path):
    with gzip.open(path, "rt") as f:
        return [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]


def _allreduce_kernel(events, elements):
    """Independent of the library: the kernel launched inside the all-reduce annotation of that size."""
    ann = next(e for e in events if e["name"] == "nccl:all_reduce" and e["args"]["Input Dims"] == [[elements]])
    launch = next(
        e
        for e in events
        if e["name"] == "cudaLaunchKernel" and e["tid"] == ann["tid"] and ann["ts"] <= e["ts"] <= ann["ts"] + ann["dur"]
    )
    return next(
        e for e in events if e.get("cat") == "kernel" and e["args"]["correlation"] == launch["args"]["correlation"]
    )


def test_rank_pair(shared_dir):
    from microbench.comm.job import analyze_job as analyze

    paths = [shared_dir / "traces" / f"a100_torchrec_rank{r}.json.gz" for r in (1, 0)]  # order does not matter
    doc = analyze(paths, workers=0)
    assert [r["rank"] for r in doc["ranks"]] == [0, 1]
    k0, k1 = (_allreduce_kernel(_raw(p), 19618307) for p in reversed(paths))
    rec = next(c for c in doc["collectives"] if c["op"] == "allreduce" and c["bytes"][0] == 19618307 * 4)
    t_s = min(k0["dur"], k1["dur"]) / 1e6
    assert rec["time_ms"] == pytest.approx(t_s * 1e3)
    assert rec["busbw_gbps"] == pytest.approx(19618307 * 4 / t_s / 1e9 * 2 * 127 / 128)  # world size 128
    assert rec["start_skew_ms"] == pytest.approx(abs(k0["ts"] - k1["ts"]) / 1e3)
    assert rec["skew_us"] == pytest.approx(abs(k0["ts"] - k1["ts"]))
    assert rec["end_skew_ms"] == pytest.approx(abs(k0["ts"] + k0["dur"] - k1["ts"] - k1["dur"]) / 1e3)
    assert rec["straggler_rank"] == (0 if k0["ts"] > k1["ts"] else 1)
    gathers = [c for c in doc["collectives"] if c["op"] == "allgather"]
    assert gathers and all(c["group_size"] == 1073741824 // 16777216 for c in gathers)
    for c in doc["collectives"]:  # a matched collective's kernels overlap on both ranks
        assert c["end_skew_ms"] < c["time_ms"]
    for r in doc["ranks"]:
        assert r["calls"] == 10 and 0 <= r["exposed_comm_ms"] <= r["comm_ms"]


def test_ranks_needs_two():
    """One trace of one process is no job; a file that is not there says so."""
    from microbench.comm.job import analyze_job as analyze
    from microbench.core.errors import InputError

    from .conftest import TRACES

    with pytest.raises(InputError, match=r"at least two ranks of one job \(this file holds one process's steps\)"):
        analyze([TRACES / "a100_torchrec_rank0.json.gz"])
    with pytest.raises(InputError, match="x.json: cannot read"):
        analyze(["x.json"])


# --- the scaling model ----------------------------------------------------------------------------------


def test_allreduce_closed_form():
    f = scale.load_fabric("v100_nvlink")
    nbytes = 100e6
    intra = 2 * 7 / 8 * nbytes / 150e9 + 2 * 7 * 10e-6
    assert scale.allreduce_s(nbytes, 8, f) == pytest.approx(intra)
    inter = 2 * 3 / 4 * nbytes / 3.125e9 + 2 * 3 * 50e-6
    assert scale.allreduce_s(nbytes, 32, f) == pytest.approx(intra + inter)
    tree = 2 * nbytes / 150e9 + 2 * 3 * 10e-6
    assert scale.allreduce_s(nbytes, 8, f, "tree") == pytest.approx(tree)


@pytest.mark.parametrize("fabric", scale.fabric_names())
@pytest.mark.parametrize("overlap", scale.OVERLAPS)
def test_scaling_monotonic(fabric, overlap):
    f = scale.load_fabric(fabric)
    w = scale.Workload(step_ms=100.0, gradient_bytes=100 * 2**20, overlap=overlap)
    preds = scale.sweep(w, [1, 2, 4, 8, 16, 32, 64, 128, 256], f)
    shares = [p["comm_share"] for p in preds]
    speedups = [p["speedup"] for p in preds]
    assert shares[0] == 0 and all(a <= b + 1e-12 for a, b in zip(shares, shares[1:]))
    assert all(a < b for a, b in zip(speedups, speedups[1:]))
    assert all(p["speedup"] <= p["workers"] + 1e-9 for p in preds)


def test_more_bandwidth_less_share_and_overlap_helps():
    slow, fast = scale.load_fabric("eth25"), scale.load_fabric("eth100")
    w = scale.Workload(step_ms=100.0, gradient_bytes=100 * 2**20, overlap="none")
    assert scale.predict(w, 16, fast)["comm_share"] < scale.predict(w, 16, slow)["comm_share"]
    wb = scale.Workload(step_ms=100.0, gradient_bytes=100 * 2**20, overlap="buckets")
    assert scale.predict(wb, 16, slow)["step_ms"] < scale.predict(w, 16, slow)["step_ms"]


@pytest.mark.parametrize("name,target", [("paper_8v100", 0.1782), ("paper_16x8v100", 0.53)])
def test_paper_figures_reproduced(name, target):
    s, p = scale.scenario(name)
    assert s["target_comm_share"] == target
    assert p["comm_share"] == pytest.approx(target, abs=0.005)
    # the stated inter-node use: 5.95 of 25 Gbit/s
    assert s["inter_efficiency"] == pytest.approx(5.95 / 25, abs=0.001) or s["workers"] <= 8


def test_scale_cli_json(tmp_path):
    from microbench.comm import cli as comm

    out = tmp_path / "s.json"
    assert (
        comm.main(
            [
                "scale",
                "--step-ms",
                "100",
                "--gradient-bytes",
                str(10**8),
                "--workers",
                "1,8,16",
                "--fabric",
                "ib200",
                "--paper",
                "--json",
                str(out),
            ]
        )
        == 0
    )
    doc = json.loads(out.read_text())
    assert [p["workers"] for p in doc["predictions"]] == [1, 8, 16]
    assert len(doc["paper"]) == 2
    assert comm.main(["scale", "--step-ms", "100", "--gradient-bytes", "1", "--fabric", "nope"]) == 2


def _sleeps_alone(info):
    time.sleep(60)


@pytest.mark.slow
def test_run_deadline_is_one_line(hang_guard):
    with pytest.raises(CommError) as e:
        world.run_local(_sleeps_alone, (), 1, "gloo", timeout_s=5, deadline_s=1, startup_s=5)
    assert e.value.line().startswith("ranks [0] did not finish within 1 s")


def test_init_timeout_when_a_rank_never_arrives(tmp_path, hang_guard):
    """Rank 0 of 2 alone: init_process_group gives up after the timeout and leaves its one line."""
    import pickle

    store = world.master_store(0, 2, timeout_s=2)
    world._rank_main(0, _sleeps_alone, (), 2, "gloo", store.port, 2.0, str(tmp_path))
    status, line, _ = pickle.loads((tmp_path / "0.pkl").read_bytes())
    assert status == "error" and "\n" not in line and "timeout" in line.lower(), line


# --- bad input: one line, exit 2 (argument parsing and checks before any process starts) ---------------
SCALE_OK = ["scale", "--gradient-bytes", "1000000", "--step-ms", "10"]


@pytest.mark.parametrize(
    "argv, option",
    [
        (SCALE_OK + ["--bucket-mb", "0"], "--bucket-mb"),
        (SCALE_OK + ["--bucket-mb", "-1"], "--bucket-mb"),
        (SCALE_OK + ["--bucket-mb", "1e-9"], "--bucket-mb"),
        (SCALE_OK + ["--step-ms", "0"], "--step-ms"),
        (SCALE_OK + ["--step-ms", "nan"], "--step-ms"),
        (SCALE_OK + ["--step-ms", "inf"], "--step-ms"),
        (SCALE_OK + ["--step-ms", "-5"], "--step-ms"),
        (SCALE_OK + ["--backward-fraction", "1.5"], "--backward-fraction"),
        (SCALE_OK + ["--backward-fraction", "-0.1"], "--backward-fraction"),
        (SCALE_OK + ["--gradient-bytes", "0"], "--gradient-bytes"),
        (SCALE_OK + ["--gradient-bytes", "-3"], "--gradient-bytes"),
        (["collectives", "--reps", "0"], "--reps"),
        (["collectives", "--port", "99999"], "--port"),
        (["collectives", "--iters", "-1"], "--iters"),
        (["collectives", "--nproc", "0"], "--nproc"),
        (["collectives", "--timeout", "nan"], "--timeout"),
        (["ddp", "--batch", "0"], "--batch"),
        (["ddp", "--steps", "0"], "--steps"),
        (["ddp", "--bucket-mb", "0"], "--bucket-mb"),
    ],
)
def test_bad_option_is_one_line(argv, option, capsys):
    from microbench.comm import cli as comm

    with pytest.raises(SystemExit) as e:
        comm.main(argv)
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and err.startswith(f"error: argument {option}") and "\n" not in err, err


def test_number_type_accepts_the_edges():
    from microbench.comm import cli as comm

    assert comm.FRACTION("0") == 0.0 and comm.FRACTION("1") == 1.0
    assert comm.PORT("65535") == 65535 and comm.POSITIVE("1e-9") == 1e-9
    with pytest.raises(Exception):
        comm.POSITIVE("0")


@pytest.mark.parametrize(
    "argv, start",
    [
        (["collectives", "--sizes", "3"], "error: --sizes = '3': a size must be a multiple of 4"),
        (["collectives", "--backend", "nccl"], "error: --backend = 'nccl': nccl needs a CUDA GPU"),
        (["ddp", "--backend", "nccl"], "error: --backend = 'nccl': nccl needs a CUDA GPU"),
    ],
)
def test_bad_collective_input_is_one_line(argv, start, capsys, tmp_path, monkeypatch):
    import torch

    from microbench.comm import cli as comm

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # the nccl check, also on a GPU machine
    assert comm.main(argv + (["--out", str(tmp_path / "o")] if argv[0] == "collectives" else [])) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(start) and "\n" not in err, err


def test_interrupt_is_one_line(capsys, monkeypatch):
    from microbench.comm import cli as comm
    from microbench.comm import scale

    def stop(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(scale, "scale_command", stop)
    assert comm.main(SCALE_OK) == 130
    assert capsys.readouterr().err.strip() == "interrupted"


def test_unrelated_traces_refused(shared_dir, capsys):
    from microbench.comm import cli as comm

    paths = [str(shared_dir / "traces" / f"{g}_bert_small.json.gz") for g in ("h100", "mi300")]
    assert comm.main(["ranks", *paths]) == 2
    err = capsys.readouterr().err.strip()
    assert "not a rank of a distributed job" in err and "\n" not in err and "None" not in err, err


def test_different_world_sizes_refused(tmp_path):
    from microbench.comm import job
    from microbench.comm import ranks as R

    a, b = R.RankSummary(tmp_path / "a", 0, 2), R.RankSummary(tmp_path / "b", 1, 4)
    a.calls = b.calls = [R.Call(0, "allreduce", "nccl:all_reduce", 4, 2, 0.0)]
    with pytest.raises(R.InputError, match="not ranks of one job: world_size 2: a; world_size 4: b"):
        job.check_one_job([a, b])


def test_rounded_sizes_are_named(capsys):
    from microbench.comm.report import _note_rounded

    _note_rounded(C.Plan(("allreduce", "allgather"), (12, 24)), 4)  # allgather: 3 or 6 elements on 4 ranks -> 1 each
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["note: allgather splits the message among 4 ranks: bytes rounded to what moves: 12->16, 24->16"], err


@pytest.mark.slow
def test_comm_ddp_with_out_reports_rank0s_findings_from_its_kept_trace(hang_guard, tmp_path, capsys):
    """`comm ddp --out DIR` keeps each rank's trace and opens its report with rank 0's findings, the ones `trace`
    makes of that trace per DDP step (checked or listed as not checked, each with its reason); --json holds them
    beside the split."""
    from microbench.comm import cli as comm

    from .conftest import analyze_with_findings as analyze

    out, j = tmp_path / "ddp", tmp_path / "ddp.json"
    assert (
        comm.main(
            [
                "ddp",
                "--model",
                "tests.ext_model:make",
                "--nproc",
                "2",
                "--batch",
                "4",
                "--steps",
                "2",
                "--bucket-mb",
                "0.01",
                "--out",
                str(out),
                "--json",
                str(j),
            ]
        )
        == 0
    )
    doc = json.loads(j.read_text())
    again = analyze(out / "rank0.pt.trace.json", step_range="dawnscope.ddp_step")
    assert doc["findings_rank"] == 0 and doc["ranks"][0]["steps"]
    assert [x["id"] for x in doc["findings"]] == [x["id"] for x in again["findings"]]
    assert [x["id"] for x in doc["findings_not_checked"]] == [x["id"] for x in again["findings_not_checked"]]
    # a CPU trace of a gloo job (findings.toml [cpu_trace]): the communication rule is its one rule
    from microbench.findings.facts import rules

    others = {x["id"]: x["why"] for x in doc["findings_not_checked"] if x["id"] != "exposed_comm"}
    assert set(others) == set(rules()["rules"]) - {"exposed_comm"}
    assert set(others.values()) == {rules()["cpu_trace"]["why"]}
    printed = capsys.readouterr().out
    assert "rank 0's findings" in printed and ("findings (" in printed or "no finding" in printed)
