"""The documents that cross a package boundary, typed (TypedDict: they stay the JSON-ready dicts the commands write,
and a type checker or a reader sees their keys in one place). The result row is a dataclass of its own
(`core.results.ResultRow`)."""

from __future__ import annotations

from typing import Any, TypedDict


class Saving(TypedDict):
    """A fix's saving per step (or per trace), microseconds, ordered and never below zero."""

    low: float
    expected: float
    high: float


class _FindingKeys(TypedDict):
    id: str
    what: str
    time_us: float
    share: float | None
    evidence: dict[str, Any]
    fix: str
    saving_us: Saving
    per: str
    reason: str


class Finding(_FindingKeys, total=False):
    """One finding (findings/rules.py), as `trace --json` writes it under `findings`."""

    expected_why: str
    validation: dict[str, Any]
    acts_on_us: float  # the time of every activity the saving comes from, where more than time_us (amp, tf32)
    saving_cut: str  # the range was cut at the time the fix acts on, or at the step


class NotChecked(TypedDict):
    id: str
    why: str


class _FindingsResultKeys(TypedDict):
    findings: list[Finding]
    not_checked: list[NotChecked]
    step_time_us: float
    per: str


class FindingsResult(_FindingsResultKeys, total=False):
    """What the findings engine returns for one analysis (findings/engine.py findings_of)."""

    below: list[dict[str, Any]]
    step_time_what: str
    window: dict[str, Any] | None
    validation: dict[str, Any] | None


class TraceDocument(TypedDict):
    """A trace's document (schema dawnscope.trace/1; trace/analysis.py TraceAnalysis.document). The findings layer
    adds its `findings*` keys in front (findings/engine.py with_findings)."""

    schema: str
    file: str
    format: str
    trace: dict[str, Any]
    devices: list[dict[str, Any]]
    integrity: dict[str, Any]
    summary: dict[str, Any]
    classes: dict[str, Any]
    kernels: list[dict[str, Any]]
    ops: list[dict[str, Any]]
    mfu: dict[str, Any]
    eligibility: dict[str, Any]
    unknown_kernels: Any
    annotations: list[dict[str, Any]]
    steps: list[dict[str, Any]]
    outside_steps: Any
    graphs: Any
    notes: list[str]
