"""Thresholds and class sets live in data, each with its reason, and no module keeps its own copy."""

from __future__ import annotations

import re

from microbench.core import thresholds
from microbench.trace.classify import class_set

from .conftest import REPO


def test_every_threshold_has_a_value_and_a_reason():
    table = thresholds._table()
    assert {
        "above_ceiling_slack",
        "unknown_share_limit",
        "fma_pipe_share_no",
        "fma_pipe_share_yes",
        "kernel_above_peak_slack",
    } <= set(table)
    for name in table:
        assert 0 < thresholds.value(name) < 1
        assert len(thresholds.reason(name)) > 40, name


def test_the_gemm_class_set():
    assert class_set("gemm") == ("gemm", "tc_gemm")
    assert set(class_set("tensor_cores_unknown_by_default")) == {"gemm", "tc_gemm", "other"}


def test_no_module_keeps_a_copy():
    copies = re.compile(
        r"^\s*(ABOVE_CEILING_SLACK|UNKNOWN_SHARE_LIMIT|FMA_PIPE_SHARE_\w+|GEMM_CLASSES)\s*=|"
        r"""\(\s*["']gemm["'],\s*["']tc_gemm["']""",
        re.M,
    )
    found = [str(p.relative_to(REPO)) for p in (REPO / "microbench").rglob("*.py") if copies.search(p.read_text())]
    assert found == []
