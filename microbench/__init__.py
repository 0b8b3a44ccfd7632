"""dawnscope: how much of this chip does my training run actually use?

The public API (everything else is internal and may move; docs/ARCHITECTURE.md shows the layers):

    from microbench import provider, Unsupported, shapes, Case, ResultRow, measure, decompose_step, analyze_trace

Names are resolved on first use, so `import microbench` stays cheap (no torch, no Triton) for the commands that
do not need them (trace, compare).
"""
from __future__ import annotations

import importlib

__all__ = ["provider", "Unsupported", "shapes", "Case", "ResultRow", "measure", "decompose_step", "analyze_trace"]

_WHERE = {
    "provider": ("microbench.harness.registry", "provider"),
    "Unsupported": ("microbench.harness.registry", "Unsupported"),
    "shapes": ("microbench.core.shapes", None),
    "Case": ("microbench.core.shapes", "Case"),
    "ResultRow": ("microbench.core.results", "ResultRow"),
    "measure": ("microbench.api", "measure"),
    "decompose_step": ("microbench.api", "decompose_step"),
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
