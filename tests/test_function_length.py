"""Functions short enough to read at once: none in microbench/ longer than MAX_LINES (from `def` to its last
line, docstring and comments included; decorators not)."""

from __future__ import annotations

import ast
from pathlib import Path

from .conftest import REPO

MAX_LINES = 80


def long_functions(root: Path, base: Path, max_lines: int = MAX_LINES) -> list[str]:
    out = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > max_lines:
                    out.append(f"{path.relative_to(base)}:{node.lineno} {node.name}: {lines} lines")
    return out


def test_no_function_in_microbench_is_over_80_lines():
    offenders = long_functions(REPO / "microbench", REPO)
    assert not offenders, "split these:\n" + "\n".join(offenders)


def test_the_check_finds_a_long_function(tmp_path):
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_LINES))
    (tmp_path / "m.py").write_text(f"def short():\n    return 1\n\n\ndef long():\n{body}\n")
    assert long_functions(tmp_path, tmp_path) == [f"m.py:5 long: {MAX_LINES + 1} lines"]
