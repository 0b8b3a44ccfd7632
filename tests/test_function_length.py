"""Functions short enough to read at once: none in microbench/ longer than MAX_LINES. A function's length is the
lines of its content: each line a statement starts on, each comment line and each line of its docstring. The lines
that only carry on an expression that ruff's formatter broke (one argument a line) are layout, not content: before
the formatter, from `def` to the last line was the measure, and the two agreed."""

from __future__ import annotations

import ast
import io
import tokenize
from pathlib import Path

from .conftest import REPO

MAX_LINES = 80


def _content_lines(node: ast.AST, comments: set[int]) -> int:
    """The lines of a function's content: where its statements start, its comments, its docstring."""
    lines = {n.lineno for n in ast.walk(node) if isinstance(n, ast.stmt)}
    lines |= {ln for ln in comments if node.lineno <= ln <= node.end_lineno}
    body = node.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        lines |= set(range(body[0].lineno, body[0].end_lineno + 1))
    return len(lines)


def long_functions(root: Path, base: Path, max_lines: int = MAX_LINES) -> list[str]:
    out = []
    for path in sorted(root.rglob("*.py")):
        text = path.read_text()
        tree = ast.parse(text, filename=str(path))
        comments = {
            tok.start[0] for tok in tokenize.generate_tokens(io.StringIO(text).readline) if tok.type == tokenize.COMMENT
        }
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = _content_lines(node, comments)
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


def test_a_call_broken_one_argument_a_line_counts_as_one_statement(tmp_path):
    args = ",\n".join(f"        {i}" for i in range(MAX_LINES))
    (tmp_path / "m.py").write_text(f"def wide():\n    return max(\n{args},\n    )\n")
    assert long_functions(tmp_path, tmp_path) == []
