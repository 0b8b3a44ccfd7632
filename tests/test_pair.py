"""microbench.devtools.pair: what a fix really saved, both settings' steps timed in one process in alternating
blocks (the checks of docs/findings.md)."""
from __future__ import annotations

import statistics

import pytest
import torch

from microbench.devtools import pair


def test_both_settings_are_timed_in_alternating_blocks_and_the_saving_is_the_median_paired_difference():
    threads = torch.get_num_threads()
    doc = pair.measure_pair("tests.findings_models:digits_loader_one_thread",
                            "tests.findings_models:digits_loader_worker_core", batch=4, blocks=3, steps=2)
    b, a = doc["before"]["block_ms"], doc["after"]["block_ms"]
    assert len(b) == len(a) == 3 and min(b + a) > 0
    assert doc["before"]["threads"] == 1  # what the factory set, kept for its blocks
    diffs = [x - y for x, y in zip(b, a)]
    assert doc["saving_us"]["median"] == pytest.approx(statistics.median(diffs) * 1e3)
    assert doc["saving_us"]["q1"] <= doc["saving_us"]["median"] <= doc["saving_us"]["q3"]
    assert torch.get_num_threads() == threads  # the factories' thread counts do not outlive the measurement


def test_bad_arguments_are_one_line_and_exit_2(capsys):
    assert pair.main(["--before", "x", "--after", "y", "--batch", "4", "--blocks", "1"]) == 2
    assert pair.main(["--before", "no_such_model", "--after", "y", "--batch", "4", "--blocks", "2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(line.startswith("pair: ") for line in err) and "no_such_model" in err[1]
