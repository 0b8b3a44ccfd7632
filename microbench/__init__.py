"""dawnscope: how much of this chip does my training run actually use?

The public API (everything else is internal and may move; docs/ARCHITECTURE.md shows the layers):

    from microbench import provider, Unsupported, shapes, Case, ResultRow, measure, decompose_step, analyze_trace
    from microbench import TraceAnalysis, Job     # notebooks: analyses with DataFrames (docs/api.md)

Names are resolved on first use, so `import microbench` stays cheap (no torch, no Triton) for the commands that
do not need them (trace, compare).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
from pathlib import Path

# kernels/ and models/ sit beside microbench/ in the repository. A wheel installs them under this package
# (pyproject's package mapping); a source checkout gets the same names from this finder, so there is one import
# name, `microbench.kernels` / `microbench.models`, and never a top-level `kernels` or `models`.
_CHECKOUT = Path(__file__).resolve().parent.parent
_MAPPED = ("kernels", "models")


class _CheckoutFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        head, _, rest = fullname.partition(".")
        if head != "microbench" or rest not in _MAPPED:
            return None
        init = _CHECKOUT / rest / "__init__.py"
        return importlib.util.spec_from_file_location(fullname, init, submodule_search_locations=[str(init.parent)])


if (
    not (Path(__file__).parent / "kernels").is_dir()
    and (_CHECKOUT / "pyproject.toml").is_file()
    and all((_CHECKOUT / d / "__init__.py").is_file() for d in _MAPPED)
):
    sys.meta_path.append(_CheckoutFinder())

__all__ = [
    "provider",
    "Unsupported",
    "shapes",
    "Case",
    "ResultRow",
    "measure",
    "decompose_step",
    "analyze_trace",
    "TraceAnalysis",
    "Job",
]

_WHERE = {
    "provider": ("microbench.roofline.registry", "provider"),
    "Unsupported": ("microbench.roofline.registry", "Unsupported"),
    "shapes": ("microbench.core.shapes", None),
    "Case": ("microbench.core.shapes", "Case"),
    "ResultRow": ("microbench.core.results", "ResultRow"),
    "measure": ("microbench.api", "measure"),
    "decompose_step": ("microbench.api", "decompose_step"),
    "analyze_trace": ("microbench.api", "analyze_trace"),
    "TraceAnalysis": ("microbench.findings.analysis", "TraceAnalysis"),
    "Job": ("microbench.comm.job", "Job"),
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
