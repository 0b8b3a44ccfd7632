"""A table cell: a number in its format, or a dash where there is none (the one rule every table of every
command follows; a cheap module of its own, so that the trace report imports neither rich nor matplotlib)."""
from __future__ import annotations


def or_dash(v, spec: str = ".3g", none: str = "-") -> str:
    """`format(v, spec)`, or `none` for a missing value (None): never 'None' or 'nan' from a missing one."""
    return none if v is None else format(v, spec)
