"""The DAWNBench and MLPerf benchmark models, by name, with their benchmark facts (models/benchmarks.toml),
and the factory contract for models from outside the project.

    workload = models.load("resnet50")                 # a name of the table
    workload = models.load("mypkg.mymodule:make")      # any factory: see docs/models.md

A factory is called with no arguments and returns a `models.step.Workload`, or a tuple
`(model, make_inputs)` or `(model, make_inputs, loss_fn)`; `make_inputs(batch, device)` returns
`(inputs, target)`.
"""

from __future__ import annotations

import importlib
import os
import sys
from functools import lru_cache
from pathlib import Path

import tomllib

from microbench.core.errors import InputError

FACTS_PATH = Path(__file__).resolve().parent / "benchmarks.toml"


class ModelError(InputError):
    """A model, factory, option value or training step that cannot be used (one line, exit code 2)."""

    def line(self) -> str:
        if self.path is None and self.key is not None:  # a command-line option, not a file
            return f"{self.key} = {self.value!r}: {self.problem}"
        return super().line()


@lru_cache(maxsize=1)
def _table() -> dict:
    return tomllib.loads(FACTS_PATH.read_text())


def decompose_defaults() -> dict:
    return dict(_table()["decompose"])


def facts(name: str):
    from .step import BenchmarkFacts

    t = _table()
    if name not in t or name == "decompose":
        raise ModelError(
            None,
            f"unknown model (known: {', '.join(names())}; or give package.module:factory)",
            key="--model",
            value=name,
        )
    e = t[name]
    return BenchmarkFacts(
        name=name,
        title=e["title"],
        module=e["module"],
        dataset=e["dataset"],
        task=e["task"],
        input_shape=tuple(e["input_shape"]),
        target_metric=e["target_metric"],
        reference_batch=e["reference_batch"],
        cpu_batch=e["cpu_batch"],
        channels_last=e["channels_last"],
        optimizer=dict(e["optimizer"]),
        source=e["source"],
    )


def names() -> list[str]:
    return [k for k in _table() if k != "decompose"]


def _search_the_current_directory() -> None:
    """A user's `mymodel:make` is found in the folder they run from, under every entry point: `python -m` puts
    that folder on sys.path, the console script (`dawnscope decompose`) and a notebook's API call may not. Appended,
    so that it never shadows an installed package."""
    here = os.getcwd()
    if not any(os.path.abspath(p or os.curdir) == here for p in sys.path):
        sys.path.append(here)


def load(spec: str):
    """A table name or `package.module:factory` -> a Workload."""
    if ":" not in spec:
        f = facts(spec)
        return importlib.import_module(f.module).build(f)
    mod_name, _, attr = spec.partition(":")
    if not mod_name or not attr:
        raise ModelError(None, "expected package.module:factory", key="--model", value=spec)
    _search_the_current_directory()
    try:
        mod = importlib.import_module(mod_name)
    except ImportError as e:
        raise ModelError(None, f"cannot import {mod_name!r}: {e}", key="--model", value=spec) from None
    except (Exception, SystemExit) as e:  # noqa: BLE001 - the user's module failed while importing
        raise ModelError(None, f"importing {mod_name!r} {_what_happened(e)}", key="--model", value=spec) from None
    factory = getattr(mod, attr, None)
    if not callable(factory):
        raise ModelError(None, f"{mod_name} has no callable {attr!r}", key="--model", value=spec)
    try:
        result = factory()
    except (Exception, SystemExit) as e:  # noqa: BLE001 - the user's factory failed: say so in one line
        raise ModelError(None, f"the factory {_what_happened(e)}", key="--model", value=spec) from None
    return as_workload(result, spec, call_factory=False)


def _what_happened(e: BaseException) -> str:
    """One line for an exception or exit out of a user's module or factory (SystemExit is caught too: a
    model that calls sys.exit() or `exit` must not end the command silently with its code)."""
    if isinstance(e, SystemExit):
        return f"exited (SystemExit with code {e.code!r}) instead of returning"
    if isinstance(e, SyntaxError):
        return f"failed: SyntaxError: {e.msg} ({e.filename}, line {e.lineno})"
    text = str(e).strip().splitlines()
    return f"raised {type(e).__name__}" + (f": {text[0]}" if text else "")


def as_workload(obj, origin: str = "model", call_factory: bool = True):
    """A Workload, a factory result `(model, make_inputs[, loss_fn])`, a zero-argument factory, or a
    name / `package.module:factory` string -> a Workload; anything else is a ModelError."""
    from torch import nn

    from .step import Workload

    if isinstance(obj, str):
        return load(obj)
    if isinstance(obj, Workload):
        return obj
    if isinstance(obj, tuple) and len(obj) in (2, 3) and isinstance(obj[0], nn.Module) and callable(obj[1]):
        if len(obj) == 3 and not callable(obj[2]):
            raise ModelError(None, "the third element (loss_fn) is not callable", key="--model", value=origin)
        return Workload(name=origin, model=obj[0], make_inputs=obj[1], loss_fn=obj[2] if len(obj) == 3 else None)
    if call_factory and callable(obj) and not isinstance(obj, nn.Module):
        try:
            result = obj()
        except (Exception, SystemExit) as e:  # noqa: BLE001
            raise ModelError(
                None, f"the factory {_what_happened(e)}", key="--model", value=getattr(obj, "__qualname__", origin)
            ) from None
        return as_workload(result, getattr(obj, "__qualname__", origin))
    got = type(obj).__name__ + (f" of {len(obj)}" if isinstance(obj, tuple) else "")
    raise ModelError(
        None,
        f"the factory returned {got}; expected a Workload or (nn.Module, make_inputs[, loss_fn])",
        key="--model",
        value=origin,
    )
