"""dawnscope: how much of this chip does my training run actually use?

The public API (everything else is internal and may move; docs/ARCHITECTURE.md shows the layers):

    from microbench import provider, Unsupported, shapes, Case, ResultRow, measure, decompose, analyze_trace

Names are resolved on first use, so `import microbench` stays cheap (no torch, no Triton) for the commands that
do not need them (trace, compare).
"""
from __future__ import annotations

import importlib
import sys
import types

__all__ = ["provider", "Unsupported", "shapes", "Case", "ResultRow", "measure", "decompose", "analyze_trace"]

_WHERE = {
    "provider": ("microbench.measure.registry", "provider"),
    "Unsupported": ("microbench.measure.registry", "Unsupported"),
    "shapes": ("microbench.core.shapes", None),
    "Case": ("microbench.core.shapes", "Case"),
    "ResultRow": ("microbench.core.results", "ResultRow"),
    "measure": ("microbench.api", "measure"),
    "decompose": ("microbench.api", "decompose"),
    "analyze_trace": ("microbench.api", "analyze_trace"),
}


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module 'microbench' has no attribute {name!r}")
    module, attr = _WHERE[name]
    mod = importlib.import_module(module)
    value = mod if attr is None else getattr(mod, attr)
    globals()[name] = value
    return value


def __dir__():
    return sorted(list(globals()) + __all__)


class _Package(types.ModuleType):
    """`microbench.measure` and `microbench.decompose` are the API's functions, although a subpackage and a
    command of the same names exist (microbench/measure/, microbench/decompose.py). Importing those sets this
    package's attribute to the submodule (Python's import system does); it is refused here, so the public
    name stays the function. The submodules stay importable (`from microbench.measure import registry`)."""

    def __setattr__(self, name, value):
        if name in _WHERE and isinstance(value, types.ModuleType) and _WHERE[name][1] is not None:
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
