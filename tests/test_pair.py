"""devtools.pair: what a fix really saved, both settings' steps timed in one process in alternating
blocks (the checks of docs/findings.md)."""

from __future__ import annotations

import statistics

import pytest
import torch

from devtools import pair


def test_both_settings_are_timed_in_alternating_blocks_and_the_saving_is_the_median_paired_difference():
    threads = torch.get_num_threads()
    doc = pair.measure_pair(
        pair.Setting("tests.findings_models:digits_loader_one_thread"),
        pair.Setting("tests.findings_models:digits_loader_worker_core"),
        batch=4,
        blocks=3,
        steps=2,
    )
    b, a = doc["before"]["block_ms"], doc["after"]["block_ms"]
    assert len(b) == len(a) == 3 and min(b + a) > 0
    assert doc["before"]["threads"] == 1  # what the factory set, kept for its blocks
    diffs = [x - y for x, y in zip(b, a)]
    assert doc["saving_us"]["median"] == pytest.approx(statistics.median(diffs) * 1e3)
    assert doc["saving_us"]["q1"] <= doc["saving_us"]["median"] <= doc["saving_us"]["q3"]
    assert torch.get_num_threads() == threads  # the factories' thread counts do not outlive the measurement


def test_a_dataloader_pair_of_one_workload():
    """--workers-after: the same workload's DataLoader with that many workers on the after side; a workload with no
    DataLoader cannot have workers (one line, exit 2)."""
    doc = pair.measure_pair(
        pair.Setting("tests.findings_models:digits_loader"),
        pair.Setting("tests.findings_models:digits_loader", workers=1, threads=1),
        batch=4,
        blocks=2,
        steps=1,
    )
    assert doc["before"]["loader_workers"] == 0 and doc["after"]["loader_workers"] == 1
    assert doc["after"]["threads"] == 1 and doc["before"]["threads"] == torch.get_num_threads()
    assert len(doc["after"]["block_ms"]) == 2 and min(doc["after"]["block_ms"]) > 0


def test_bad_arguments_are_one_line_and_exit_2(capsys):
    assert pair.main(["--before", "x", "--after", "y", "--batch", "4", "--blocks", "1"]) == 2
    assert pair.main(["--before", "no_such_model", "--after", "y", "--batch", "4", "--blocks", "2"]) == 2
    assert (
        pair.main(
            ["--before", "resnet9", "--after", "resnet9", "--batch", "2", "--blocks", "2", "--workers-after", "1"]
        )
        == 2
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and all(line.startswith("pair: ") for line in err) and "no_such_model" in err[1]
    assert "has no DataLoader" in err[2]


def test_processes_runs_the_pair_in_that_many_processes_and_takes_the_median(tmp_path, capsys, monkeypatch):
    """--processes K: K runs of the command in processes of their own, one line each, the saving the median of
    theirs (each process has a speed of its own: docs/findings.md); --json holds every process's document."""
    from .conftest import REPO

    monkeypatch.chdir(REPO)  # the children import tests.findings_models from where they start
    out = tmp_path / "pair.json"
    assert (
        pair.main(
            [
                "--before",
                "tests.findings_models:digits_loader",
                "--after",
                "tests.findings_models:digits_loader",
                "--workers-after",
                "1",
                "--batch",
                "4",
                "--blocks",
                "2",
                "--steps",
                "1",
                "--processes",
                "2",
                "--json",
                str(out),
            ]
        )
        == 0
    )
    import json

    doc = json.loads(out.read_text())
    each = [p["saving_us"]["median"] for p in doc["processes"]]
    assert len(each) == 2 and all(p["after"]["loader_workers"] == 1 for p in doc["processes"])
    assert doc["saving_us"] == pytest.approx({"median": statistics.median(each), "min": min(each), "max": max(each)})
    text = capsys.readouterr().out
    assert "process 1 of 2" in text and "process 2 of 2" in text and "the median of 2 processes" in text


def test_without_drops_a_flag_and_its_value_in_either_spelling():
    assert pair._without(["--a", "1", "--json", "x", "--b"], "--json") == ["--a", "1", "--b"]
    assert pair._without(["--json=x", "--processes", "3"], "--json") == ["--processes", "3"]


@pytest.mark.slow
def test_a_ddp_pair_runs_both_bucket_caps_in_the_same_ranks(tmp_path, capsys):
    """--nproc 2: two gloo ranks, each holding both sides' models wrapped in DDP with their own bucket cap and
    running the same side's block at the same time; rank 0's blocks are the document."""
    import json

    out = tmp_path / "pair.json"
    assert (
        pair.main(
            [
                "--before",
                "tests.ext_model:make",
                "--after",
                "tests.ext_model:make",
                "--batch",
                "4",
                "--blocks",
                "2",
                "--steps",
                "1",
                "--nproc",
                "2",
                "--bucket-mb-before",
                "1000",
                "--bucket-mb-after",
                "0.01",
                "--json",
                str(out),
            ]
        )
        == 0
    )
    doc = json.loads(out.read_text())
    assert doc["nproc"] == 2 and doc["backend"] == "gloo"
    assert doc["before"]["ddp_bucket_cap_mb"] == 1000 and doc["after"]["ddp_bucket_cap_mb"] == 0.01
    assert len(doc["before"]["block_ms"]) == len(doc["after"]["block_ms"]) == 2
    assert min(doc["before"]["block_ms"] + doc["after"]["block_ms"]) > 0
    assert pair.main(["--before", "x", "--after", "y", "--batch", "4", "--nproc", "2", "--bucket-mb-after", "0"]) == 2
    assert "--bucket-mb-* above 0" in capsys.readouterr().err
