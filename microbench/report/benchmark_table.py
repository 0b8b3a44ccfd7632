"""The table `pytest --benchmark-only` ends with, after pytest-benchmark's own (which knows times only): each
benchmark's TFLOP/s, % of its ceiling, Tensor Cores and flags, from the `extra_info` tests/test_benchmarks.py
fills with the same work counts, ceilings and judge as `dawnscope roofline`."""

from __future__ import annotations

import io

COLUMNS = [
    ("op", "left"),
    ("shape", "left"),
    ("dtype", "left"),
    ("provider", "left"),
    ("median ms", "right"),
    ("TFLOP/s", "right"),
    ("% of ceiling", "right"),
    ("Tensor Cores", "left"),
    ("flags", "left"),
]


def _num(v, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def cells(extra_infos: list[dict]) -> list[tuple[list[str], str | None]]:
    rows = []
    for e in extra_infos:
        t = e.get("time_ms") or {}
        flags = e.get("flags") or []
        rows.append(
            (
                [
                    str(e.get("op", "?")),
                    str(e.get("shape", "?")),
                    str(e.get("dtype", "?")),
                    str(e.get("provider", "?")),
                    _num(t.get("median"), ".4g"),
                    _num(e.get("tflops"), ".3g"),
                    _num(e.get("pct_of_ceiling"), ".1f"),
                    str(e.get("tensor_cores") or "-"),
                    "; ".join(flags) if flags else "-",
                ],
                "red" if flags else None,
            )
        )
    return rows


def render(extra_infos: list[dict], width: int) -> str:
    """The table as text for the terminal reporter (rich, at the terminal's width: the flags and Tensor Cores
    columns go first when it is narrow, op / shape / dtype / provider never)."""
    from rich.console import Console

    from microbench.report.roofline_report import rich_table

    buf = io.StringIO()
    console = Console(file=buf, width=width, force_terminal=False, color_system=None)
    console.print(
        rich_table(
            COLUMNS,
            cells(extra_infos),
            title="dawnscope: the benchmarks against their ceilings",
            width=width,
            drop_order=("flags", "Tensor Cores", "median ms"),
            kept_in="--benchmark-json OUT (extra_info)",
        )
    )
    return buf.getvalue()
