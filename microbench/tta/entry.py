"""One leaderboard entry (a DAWNBench submission or an MLPerf result set) and one unreadable file."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


class Unreadable(Exception):
    """A file the leaderboard cannot use: listed with this reason, the other files go on."""


@dataclass
class Entry:
    source: str  # dawnbench or mlperf
    task: str
    file: str  # the TSV (DAWNBench) or the folder of result_*.txt (MLPerf)
    tta_seconds: float | None  # None: the target was never reached (or, MLPerf, no score)
    epoch: float | None
    accuracy: float | None  # the accuracy of the row / evaluation that reached the threshold
    metric: str
    threshold: float | None
    cost_usd: float | None = None
    hardware: str | None = None
    framework: str | None = None
    model: str | None = None
    author: str | None = None
    runs: list[dict] | None = None  # MLPerf: one per result file
    score_minutes: float | None = None  # MLPerf: the submission's score by the rule
    runs_required: int | None = None
    spread_cov: float | None = None  # std / mean of the successful runs' times
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return asdict(self)
