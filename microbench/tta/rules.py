"""The rules of the leaderboards and the models of our own runs, read from microbench/data/tta.toml."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path

import tomllib

from microbench.core.errors import ConfigError
from microbench.core.resources import data_file

RULES_PATH = data_file("tta.toml")


@dataclass(frozen=True)
class DawnTask:
    name: str
    metric: str  # the TSV column, compared ignoring case
    threshold: float
    unit: str = "percent"  # or "fraction" (0..1)

    @property
    def to_percent(self) -> float:
        return 100.0 if self.unit == "fraction" else 1.0


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
    precision: str = "fp32"
    recipe: str | None = None  # the recipe applied (tuned, standard), None: the model's keys as they are
    recipes: tuple[str, ...] = ()

    def with_recipe(self, name: str | None) -> TtaModel:
        """This model under a recipe of tta.toml (its keys override the model's)."""
        if name is None:
            return self
        over = _doc()["models"][self.name].get("recipes", {}).get(name)
        if over is None:
            raise ConfigError(
                RULES_PATH,
                f"no recipe {name!r} for {self.name} (recipes: {', '.join(self.recipes) or 'none'})",
                key="--recipe",
            )
        kw = {k: over[k] for k in ("epochs", "batch", "precision") if k in over}
        if "lr" in over:
            kw |= {"lr_epochs": tuple(over["lr"]["epochs"]), "lr_values": tuple(over["lr"]["values"])}
        return replace(self, recipe=name, **kw)


@lru_cache(maxsize=1)
def _doc() -> dict:
    try:
        return tomllib.loads(RULES_PATH.read_text())
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise ConfigError(RULES_PATH, f"cannot read: {e}") from None


def dawn_tasks() -> dict[str, DawnTask]:
    return {
        name: DawnTask(name, t["metric"], float(t["threshold"]), t.get("unit", "percent"))
        for name, t in _doc()["dawnbench"]["tasks"].items()
    }


def mlperf_target(ruleset: str, benchmark: str) -> float | None:
    """The benchmark's quality target as a fraction (eval_accuracy's unit), None where tta.toml has none."""
    v = _doc()["mlperf"].get("targets", {}).get(ruleset, {}).get(benchmark)
    return None if v is None else float(v)


def threshold_grid_defaults() -> dict:
    """below / above (percentage points around a task's threshold), step, max_points."""
    return dict(_doc()["thresholds"])


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
        out[name] = TtaModel(
            name,
            m["model"],
            m["dataset"],
            float(m["target"]),
            int(m["epochs"]),
            int(m["batch"]),
            dict(m["optimizer"]),
            tuple(m["lr"]["epochs"]),
            tuple(m["lr"]["values"]),
            m["source"],
            m.get("precision", "fp32"),
            None,
            tuple(m.get("recipes", {})),
        )
    return out
