"""The last hostile inputs: digits that are not ASCII ('4²': str.isdigit accepts it, int() does not), a rank
written as a string in a trace's distributedInfo, and a device that is not here, asked for by a command with a
progress bar. Each is one line naming the key and the value, exit 2, before any work."""

from __future__ import annotations

import ast
import csv
import gzip
import json

import pytest
import torch

from microbench.comm import cli as comm
from microbench.core.args import digits
from microbench.core.errors import InputError
from microbench.report.roofline_report import PIPED_WIDTH, piped_width
from microbench.trace.ncu import read_ncu_csv
from microbench.tta import cli as tta

from .conftest import REPO, SHARED, TRACES


def test_digits_are_ascii_digits_only():
    assert digits("0") and digits("4096")
    for text in ("4²", "²", "٤", "४२", "4.0", "", " 4", "-4", "4_0"):  # superscript, Arabic-Indic, Devanagari
        assert not digits(text), text


def test_every_digit_test_goes_through_core_cli_digits():
    """str.isdigit / isnumeric / isdecimal anywhere else would let '²' or '٤' through to int()."""
    found = []
    for path in sorted(p for d in ("microbench", "kernels", "models") for p in (REPO / d).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr in ("isdigit", "isnumeric", "isdecimal"):
                found.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert found == ["microbench/core/args.py:" + str(_line_of_digits())]


def _line_of_digits() -> int:
    tree = ast.parse((REPO / "microbench" / "core" / "args.py").read_text())
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "digits")
    return next(n.lineno for n in ast.walk(fn) if isinstance(n, ast.Attribute) and n.attr == "isdigit")


@pytest.mark.parametrize("size", ["4²", "٤K", "1६M"])
def test_a_size_with_non_ascii_digits_is_one_line(size, capsys):
    assert comm.main(["collectives", "--sizes", size]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: --sizes = '{size}': expected sizes like 8,4K,16M") and "\n" not in err, err


def test_a_device_number_with_a_superscript_in_an_ncu_export_is_named(tmp_path):
    rows = list(csv.reader((SHARED / "nsight" / "copy_blocked.ncu.csv").open(newline="")))
    head = next(i for i, r in enumerate(rows) if r and r[0] == "ID")
    device = rows[head].index("Device")
    rows[head + 1][device] = "0²"
    bad = tmp_path / "bad.ncu.csv"
    with bad.open("w", newline="") as f:
        csv.writer(f, quoting=csv.QUOTE_ALL).writerows(rows)
    with pytest.raises(InputError, match=r"Device = '0²': expected a device number"):
        read_ncu_csv(bad)


@pytest.mark.parametrize("columns", ["1²0", "١٢٠"])
def test_columns_with_non_ascii_digits_is_the_default_width(columns, monkeypatch):
    monkeypatch.setenv("COLUMNS", columns)
    assert piped_width() == PIPED_WIDTH


def _rank_trace(tmp_path, k: int, info: dict):
    """Rank k of the real two-rank TorchRec job, its distributedInfo changed as given."""
    doc = json.loads(gzip.decompress((TRACES / f"a100_torchrec_rank{k}.json.gz").read_bytes()))
    doc["distributedInfo"] = {**doc["distributedInfo"], **info}
    path = tmp_path / f"rank{k}.json"
    path.write_text(json.dumps(doc))
    return path


@pytest.mark.parametrize(
    "info, key, value",
    [
        ({"rank": "1"}, "distributedInfo.rank", "'1'"),
        ({"rank": 1.0}, "distributedInfo.rank", "1.0"),
        ({"rank": True}, "distributedInfo.rank", "True"),
        ({"rank": -1}, "distributedInfo.rank", "-1"),
        ({"world_size": "128"}, "distributedInfo.world_size", "'128'"),
        ({"rank": 128}, "distributedInfo.rank", "128"),  # the job's world_size is 128
    ],
)
def test_a_rank_that_is_not_a_rank_number_is_one_line(tmp_path, capsys, info, key, value):
    """Taken for the file's place in the list (as a string rank once was), it would put rank 1's calls under
    another rank without a word."""
    good = tmp_path / "rank0.json.gz"
    good.write_bytes((TRACES / "a100_torchrec_rank0.json.gz").read_bytes())
    bad = _rank_trace(tmp_path, 1, info)
    assert comm.main(["ranks", str(good), str(bad), "--readers", "0"]) == 2
    err = capsys.readouterr().err.strip()
    # one line naming the file, then (with fewer than two ranks left to combine) the key and its value
    assert err.startswith(f"error: {bad}: ") and f"{key} = {value}" in err and "\n" not in err, err


@pytest.mark.skipif(torch.cuda.is_available(), reason="the check is of a machine without a GPU")
def test_tta_run_on_a_missing_device_stops_before_the_progress_bar(tmp_path, capsys):
    out = tmp_path / "tta"
    assert (
        tta.main(["run", "--model", "digits", "--seeds", "1", "--epochs", "1", "--device", "cuda", "--out", str(out)])
        == 2
    )
    err = capsys.readouterr().err
    assert err.startswith("error: --device = 'cuda'") and err.count("\n") == 1, err  # no progress bar before it
    assert not (out / "results.json").exists()
