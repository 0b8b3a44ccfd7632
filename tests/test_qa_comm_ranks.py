"""`comm ranks` on the two TorchRec ranks, piped: every figure of the collectives table in plain notation (the
all-reduce's 22 ms start skew printed as 2.233e+04 in the `skew us` column)."""
from __future__ import annotations

import json

from microbench import comm
from tests.conftest import TRACES, needs_traces


@needs_traces
def test_skew_in_plain_microseconds(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "120")
    out = tmp_path / "ranks.json"
    assert comm.main(["ranks", str(TRACES / "a100_torchrec_rank0.json.gz"), str(TRACES / "a100_torchrec_rank1.json.gz"),
                      "--readers", "0", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    table = text[:text.index("per rank")]
    assert "e+0" not in table
    widest = max(json.loads(out.read_text())["collectives"], key=lambda c: c["skew_us"])
    assert widest["skew_us"] > 10_000 and f"{widest['skew_us']:,.0f}" in table
