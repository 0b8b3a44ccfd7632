"""`comm ranks` on the two TorchRec ranks, piped: every figure of the collectives table in plain notation (the
all-reduce's 22 ms start skew printed as 2.233e+04 in the `skew us` column)."""

from __future__ import annotations

import json

import pytest

from microbench.comm import cli as comm
from tests.conftest import TRACES, needs_traces


@needs_traces
def test_skew_in_plain_microseconds(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "120")
    out = tmp_path / "ranks.json"
    assert (
        comm.main(
            [
                "ranks",
                str(TRACES / "a100_torchrec_rank0.json.gz"),
                str(TRACES / "a100_torchrec_rank1.json.gz"),
                "--readers",
                "0",
                "--json",
                str(out),
            ]
        )
        == 0
    )
    text = capsys.readouterr().out
    table = text[: text.index("per rank")]
    assert "e+0" not in table
    widest = max(json.loads(out.read_text())["collectives"], key=lambda c: c["skew_us"])
    assert widest["skew_us"] > 10_000 and f"{widest['skew_us']:,.0f}" in table


@needs_traces
@pytest.mark.parametrize("width", ["120", "80"])
def test_collective_and_sizes_never_cut(capsys, monkeypatch, width):
    monkeypatch.setenv("COLUMNS", width)
    assert (
        comm.main(
            [
                "ranks",
                str(TRACES / "a100_torchrec_rank0.json.gz"),
                str(TRACES / "a100_torchrec_rank1.json.gz"),
                "--readers",
                "0",
            ]
        )
        == 0
    )
    text = capsys.readouterr().out
    table = text[: text.index("per rank")]
    assert max(len(line) for line in text.splitlines()) <= int(width)
    # the all-to-all's two sizes (it read "339738624/41943…" at 120 columns)
    assert "nccl:all_to_all" in table and "339738624/419430400" in table


def test_every_rank_unreadable_is_one_line_naming_the_first(tmp_path, capsys):
    empty, cut = tmp_path / "rank0.json", tmp_path / "rank1.json.gz"
    empty.write_text("")
    cut.write_bytes(b"\x1f\x8b\x08\x00")
    assert comm.main(["ranks", str(empty), str(cut), "--readers", "0"]) == 2
    err = capsys.readouterr().err.strip()
    # the file once, first (it said "error: .: ...; rank0.json: rank0.json: empty file" for relative paths)
    assert err == f"error: {empty}: 2 of 2 rank traces failed to read: fewer than two ranks left; this one: empty file"
