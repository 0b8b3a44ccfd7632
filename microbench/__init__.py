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


class _CallableModule(types.ModuleType):
    """A subpackage or command that shares its name with a function of the API (microbench/measure/ and
    `measure`, microbench/decompose.py and `decompose`): calling the module calls the function."""

    def __call__(self, *args, **kwargs):
        module, attr = _WHERE[self.__name__.rpartition(".")[2]]
        return getattr(importlib.import_module(module), attr)(*args, **kwargs)


class _Package(types.ModuleType):
    """Python's import system sets `microbench.measure` to the subpackage once it is imported (always: the
    registry lives there) and `microbench.decompose` to the command module: without this, the public
    `microbench.measure(case)` would raise "module is not callable". Such a module is made callable (it calls
    the API function) and stays a module (`microbench.measure.ceilings`, `from microbench.measure import
    registry`, string paths in monkeypatch all keep working)."""

    def __setattr__(self, name, value):
        if name in _WHERE and _WHERE[name][1] is not None and type(value) is types.ModuleType:
            value.__class__ = _CallableModule
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
