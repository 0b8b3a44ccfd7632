"""The rules of the leaderboards and the models of our own runs, read from microbench/data/tta.toml."""
from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from microbench.core.errors import ConfigError

RULES_PATH = Path(__file__).resolve().parent.parent / "data" / "tta.toml"


@dataclass(frozen=True)
class DawnTask:
    name: str
    metric: str  # the TSV column, compared ignoring case
    threshold: float


@dataclass(frozen=True)
class TtaModel:
    name: str
    model: str  # module:Class
    dataset: str
    target: float
    epochs: int
    batch: int
    optimizer: dict
    lr_epochs: tuple[float, ...]
    lr_values: tuple[float, ...]
    source: str


@lru_cache(maxsize=1)
def _doc() -> dict:
    try:
        return tomllib.loads(RULES_PATH.read_text())
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise ConfigError(RULES_PATH, f"cannot read: {e}") from None


def dawn_tasks() -> dict[str, DawnTask]:
    return {name: DawnTask(name, t["metric"], float(t["threshold"]))
            for name, t in _doc()["dawnbench"]["tasks"].items()}


def mlperf_usage() -> str:
    return _doc()["mlperf"]["usage"]


def mlperf_ruleset(path: Path) -> str:
    """The ruleset of a result file: a `vX.Y` folder on its path (the MLCommons results layout), else the
    default of tta.toml."""
    for part in reversed(path.parts):
        m = re.fullmatch(r"v(\d+)\.(\d+)", part)
        if m:
            return f"{m[1]}.{m[2]}.0"
    return _doc()["mlperf"]["default_ruleset"]


def mlperf_runs_required(ruleset: str, benchmark: str) -> int | None:
    return _doc()["mlperf"]["runs"].get(ruleset, {}).get(benchmark)


def mlperf_drop_each_side(benchmark: str) -> int:
    d = _doc()["mlperf"]["drop_each_side"]
    return int(d.get(benchmark, d["default"]))


def tta_models() -> dict[str, TtaModel]:
    out = {}
    for name, m in _doc()["models"].items():
        out[name] = TtaModel(name, m["model"], m["dataset"], float(m["target"]), int(m["epochs"]), int(m["batch"]),
                             dict(m["optimizer"]), tuple(m["lr"]["epochs"]), tuple(m["lr"]["values"]), m["source"])
    return out
