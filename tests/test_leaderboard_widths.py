"""`tta leaderboard` piped (120 columns) and at 80: the MLPerf submitters' hardware whole where the line has room
for it (it was cut at a fixed 18 characters with 20 columns to spare), rank, time and runs kept at 80."""

from __future__ import annotations

import pytest

from tests.conftest import DATA


@pytest.mark.parametrize("width", [120, 80])
def test_leaderboard_uses_the_width_it_has(monkeypatch, capsys, width):
    from microbench.tta import leaderboard
    from microbench.tta.report import print_leaderboard

    monkeypatch.setenv("COLUMNS", str(width))
    board = leaderboard.build(sorted((DATA / "mlperf").rglob("result_*.txt")))
    print_leaderboard(board)
    lines = capsys.readouterr().out.splitlines()
    assert max(len(ln) for ln in lines) <= width
    rows = [ln for ln in lines if ln.lstrip()[:2] == "1 "]
    assert len(rows) == 2  # bert and resnet, each ranked 1
    platforms = {e.hardware for e in board.entries}
    assert platforms == {"1xDSS8440x8A100-PCIE-40GB", "2xXE8545x4A100-SXM-80GB"}
    if width == 120:  # 25 characters fit beside the other columns
        assert all(any(p in row for row in rows) for p in platforms)
    for row in rows:  # the key columns stay whatever the width: rank, the score, runs
        assert " min " in row and ("10/10" in row or "5/5" in row)
