"""Prose that names our code names code that exists: every module path (`microbench/trace/classify.py`,
`roofline/sass.py`) and dotted name (`microbench.core.ops.case_work`, `trace.analysis.TraceAnalysis`) in docs/,
in the comments and docstrings of the code and tests, in scripts and in the data files resolves to a file, a module
or a module's top-level name. A renamed module otherwise leaves its old name behind in a dozen places."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

from .conftest import REPO

# Our packages: a dotted name starting with one of them is ours (`kernels`, `models` and `data` are
# common words too, so only `microbench.kernels...` counts for those).
PACKAGES = (
    "core",
    "report",
    "trace",
    "roofline",
    "decompose",
    "comm",
    "tta",
    "predict",
    "findings",
    "compare",
    "inspect",
    "devtools",
)
_OURS = "|".join(PACKAGES)
DOTTED = re.compile(rf"(?<![\w./-])(microbench(?:\.[A-Za-z_]\w*)+|(?:{_OURS})(?:\.[A-Za-z_]\w*)+)")
PATH = re.compile(
    rf"(?<![\w./-])((?:microbench|kernels|models|tests|scripts|docs|data|ops|{_OURS})/[\w/.-]*\w"
    r"\.(?:py|toml|cu|cuh|md))\b"
)
SUFFIXES = ("py", "toml", "md", "json", "csv", "gz", "cu", "cuh", "sqlite", "png", "svg", "html", "txt")


def _modules(root: Path) -> dict[str, Path | None]:
    """Dotted module name -> its file (None for a namespace package: a folder without __init__.py)."""
    out: dict[str, Path | None] = {}
    for top in ("microbench", "kernels", "models", "devtools"):
        for path in (root / top).rglob("*.py"):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[0] not in ("microbench", "devtools"):
                parts.insert(0, "microbench")  # kernels/ and models/ install as microbench.kernels / .models
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
            for i in range(1, len(parts)):
                out.setdefault(".".join(parts[:i]), None)
    return out


def _defined_names(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.isidentifier():
            names.add(node.value)  # __all__ and lazily resolved names (microbench.measure)
    return names


def _resolves(ref: str, modules: dict[str, Path | None], names: dict[Path, set[str]]) -> bool:
    parts = ref.split(".")
    if parts[0] not in ("microbench", "devtools"):  # devtools/ lies beside the package, not in it
        parts.insert(0, "microbench")
    if parts[-1] in SUFFIXES or any(p.isupper() for p in parts[1:]):
        return True  # a file name written with dots, or a placeholder (microbench.COMMAND)
    for i in range(len(parts), 0, -1):
        module = ".".join(parts[:i])
        if module in modules:
            if i == len(parts):
                return True
            path = modules[module]
            if path is None:
                return False  # a namespace package has no names: the next part must be a module
            return parts[i] in names.setdefault(path, _defined_names(path))
    return False


def _path_exists(ref: str, where: Path, root: Path) -> bool:
    return any(
        p.exists()
        for p in (root / ref, root / "microbench" / ref, root / "microbench" / "core" / ref, where.parent / ref)
    )


def _prose(path: Path) -> list[tuple[int, str]]:
    """The lines of a document or data file; of Python code, only its comments and docstrings."""
    text = path.read_text()
    if path.suffix != ".py" and not text.startswith("#!/usr/bin/env python"):
        return list(enumerate(text.splitlines(), 1))
    lines = [
        (t.start[0], t.string)
        for t in tokenize.generate_tokens(io.StringIO(text).readline)
        if t.type == tokenize.COMMENT
    ]
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and (
            doc := ast.get_docstring(node, clean=False)
        ):
            lines += [(node.body[0].lineno + k, line) for k, line in enumerate(doc.splitlines())]
    return lines


def _documents(root: Path) -> list[Path]:
    files = list((root / "docs").rglob("*.md")) + [root / "bench.toml"] + list((root / "tests" / "data").glob("*.md"))
    files += [p for folder in ("microbench", "models", "tests/data") for p in (root / folder).rglob("*.toml")]
    files += [p for folder in ("microbench", "kernels", "models", "tests") for p in (root / folder).rglob("*.py")]
    if (root / "scripts").is_dir():
        files += [p for p in (root / "scripts").iterdir() if p.is_file()]
    return sorted(p for p in files if p.is_file())


def stale_references(root: Path = REPO) -> list[str]:
    modules, names, bad = _modules(root), {}, []
    for path in _documents(root):
        for line, text in _prose(path):
            where = f"{path.relative_to(root)}:{line}"
            bad += [
                f"{where}: {m[1]}" for m in DOTTED.finditer(text) if not _resolves(m[1].rstrip("."), modules, names)
            ]
            bad += [f"{where}: {m[1]}" for m in PATH.finditer(text) if not _path_exists(m[1], path, root)]
    return bad


def test_prose_and_data_files_name_only_code_that_exists():
    assert stale_references() == []


def test_a_stale_name_is_found(tmp_path):
    """The check can fail: a module that is gone, a name a module lacks and a path that is not there."""
    (tmp_path / "microbench" / "trace").mkdir(parents=True)
    (tmp_path / "microbench" / "trace" / "classify.py").write_text('"""Rules."""\n\ndef classify(name):\n    pass\n')
    for folder in ("kernels", "models", "docs"):
        (tmp_path / folder).mkdir()
    (tmp_path / "bench.toml").write_text("# Read by microbench/config.py and microbench/trace/classify.py.\n")
    (tmp_path / "docs" / "a.md").write_text(
        "`trace.classify.classify`, `trace.classify.rules`, `microbench.trace.perf`, `microbench.measure`.\n"
    )
    assert stale_references(tmp_path) == [
        "bench.toml:1: microbench/config.py",
        "docs/a.md:1: trace.classify.rules",
        "docs/a.md:1: microbench.trace.perf",
        "docs/a.md:1: microbench.measure",
    ]


# The optional corpus beside the repository is named only where the tests look for it.
MAY_NAME_THE_CORPUS = ("tests/conftest.py", "tests/data/SOURCES.md")


def test_nothing_points_outside_the_repository():
    outside = re.compile(r"\.\./shared|shared/(?:DESIGN|REFERENCE)\.md|(?<![\w/])(?:DESIGN|REFERENCE)\.md")
    files = _documents(REPO) + list((REPO / "tests" / "data").rglob("SOURCES.md"))
    found = [
        f"{p.relative_to(REPO)}:{n}"
        for p in files
        if str(p.relative_to(REPO)) not in MAY_NAME_THE_CORPUS
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if outside.search(line)
    ]
    assert found == []


def test_no_issue_numbers_nobody_outside_can_look_up():
    """An issue number in prose points into a tracker that is not part of the repository: say what it was."""
    issue = re.compile(r"\b[Ii]ssues? ?#?\d+")
    found = [
        f"{p.relative_to(REPO)}:{line}" for p in _documents(REPO) for line, text in _prose(p) if issue.search(text)
    ]
    assert found == []
