"""The judgements' thresholds, each with its reason, from microbench/data/thresholds.toml (one place: a module
that judges reads its threshold here, never keeps a copy)."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import tomllib

from microbench.core.resources import data_file

THRESHOLDS_PATH = data_file("thresholds.toml")


@cache
def _table(path: str = str(THRESHOLDS_PATH)) -> dict[str, dict]:
    data = tomllib.loads(Path(path).read_text())
    for name, entry in data.items():
        if not isinstance(entry, dict) or set(entry) != {"value", "reason"}:
            raise ValueError(f"{path}: [{name}] must have exactly `value` and `reason`")
    return data


def value(name: str) -> float:
    """The threshold `name` (a table of thresholds.toml)."""
    try:
        return float(_table()[name]["value"])
    except KeyError:
        raise KeyError(f"{THRESHOLDS_PATH.name} has no threshold [{name}]") from None


def reason(name: str) -> str:
    return " ".join(_table()[name]["reason"].split())
