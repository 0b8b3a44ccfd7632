"""The architecture, enforced: every import in microbench/, kernels/ and models/ (module level or inside a
function) goes down the layers of docs/ARCHITECTURE.md, never up or sideways; no cycle at any depth (between the
modules of one package too); and an import inside a function only of what is slow to import."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from .conftest import REPO

# Lowest first. A package may import its own modules and any lower layer; packages on one level are
# independent of each other. A command's thin module (`microbench.<command>.cli`, and its `__main__`) sits in its
# command's package but on the commands' level: it may import any library, and no library imports it.
LEVELS = {
    "microbench.core": 0,
    "microbench.report": 1,
    "microbench.help": 1,  # the documents: core only
    "microbench.trace": 2,
    "microbench.roofline": 3,
    "microbench.models": 3,  # imports only the core (checked below)
    "microbench.kernels": 4,  # providers: core + measurement
    "microbench.decompose": 5,
    "microbench.comm": 5,
    "microbench.inspect": 5,
    "microbench.bench": 5,  # the benchmark suite and its pytest plugin
    "microbench.tta": 6,
    "microbench.predict": 6,
    "microbench.findings": 7,
    "microbench.compare": 8,
    "microbench.gate": 8,
    "microbench.verify": 8,  # findings checked against their fixes' measured savings
    "microbench.mcp": 9,  # the agent server: the analyses of the commands below, answered over MCP
    "microbench": 10,  # the commands' modules, the public API (api.py, __init__.py), the door (__main__.py)
}
COMMAND_MODULES = ("cli", "__main__")
MODELS_MAY_IMPORT = ("microbench.core",)


def _unit(module: str) -> str:
    """The layer unit a module belongs to: its subpackage, or `microbench` for the top-level commands."""
    parts = module.split(".")
    if is_command_module(module):
        return "microbench"
    if parts[0] == "microbench" and len(parts) > 1 and f"microbench.{parts[1]}" in LEVELS:
        return f"microbench.{parts[1]}"
    return parts[0]


def is_command_module(module: str) -> bool:
    """`microbench.<command>.cli` or `microbench.<command>.__main__`: a command's thin module."""
    parts = module.split(".")
    return len(parts) == 3 and parts[0] == "microbench" and parts[2] in COMMAND_MODULES


def _module_name(path: Path, root: Path = REPO) -> str:
    rel = path.relative_to(root).with_suffix("")
    parts = list(rel.parts)
    if parts[0] in ("kernels", "models"):  # installed (and imported) as microbench.kernels / microbench.models
        parts.insert(0, "microbench")
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path, root: Path = REPO) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), filename=str(path))
    mod = _module_name(path, root)
    package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module
            out.append((node.lineno, target))
            # `from microbench import trace` imports the submodule microbench.trace.cli
            out += [
                (node.lineno, f"{target}.{a.name}")
                for a in node.names
                if target in ("microbench", "microbench.kernels", "microbench.models")
            ]
    return out


def _sources(root: Path = REPO) -> list[Path]:
    return sorted(p for d in ("microbench", "kernels", "models") for p in (root / d).rglob("*.py"))


def _violations(root: Path = REPO) -> list[str]:
    bad = []
    for path in _sources(root):
        src_unit = _unit(_module_name(path, root))
        assert src_unit in LEVELS, f"{path}: package {src_unit} has no layer in tests/test_layers.py"
        for line, target in _imports(path, root):
            dst_unit = _unit(target)
            if dst_unit not in LEVELS or dst_unit == src_unit:
                continue  # a third-party module, or the package itself
            if target == "microbench":
                continue
            where = f"{path.relative_to(root)}:{line} imports {target}"
            if src_unit == "microbench.models" and not target.startswith(MODELS_MAY_IMPORT):
                bad.append(f"{where}: models/ imports only {MODELS_MAY_IMPORT}")
            elif LEVELS[dst_unit] >= LEVELS[src_unit]:
                bad.append(
                    f"{where}: {src_unit} (level {LEVELS[src_unit]}) may not import "
                    f"{dst_unit} (level {LEVELS[dst_unit]})"
                )
    return bad


def test_imports_go_down_the_layers():
    assert _violations() == []


def test_core_imports_neither_kernels_nor_models():
    core = [p for p in _sources() if _unit(_module_name(p)) == "microbench.core"]
    assert core, "no core modules found"
    for path in core:
        for line, target in _imports(path):
            assert not target.startswith(("microbench.kernels", "microbench.models", "kernels", "models")), (
                f"{path}:{line} imports {target}"
            )


def test_the_checker_sees_an_upward_import(tmp_path):
    """The rule can fail: a core module importing the runner is reported (in a tree made here: no test
    writes into the checkout)."""
    fake = tmp_path / "microbench" / "core" / "_layer_probe_tmp.py"
    fake.parent.mkdir(parents=True)
    fake.write_text("def f():\n    from microbench.roofline.runner import CaseRunner\n")
    assert any("_layer_probe_tmp.py:2 imports microbench.roofline.runner" in v for v in _violations(tmp_path))


@pytest.mark.parametrize(
    "name", ["provider", "Unsupported", "shapes", "Case", "ResultRow", "measure", "decompose_step", "analyze_trace"]
)
def test_public_api(name):
    import microbench

    assert name in microbench.__all__
    assert getattr(microbench, name) is not None


# --- cycles, at every depth -------------------------------------------------------------------------------
# import-linter's layers and acyclic_siblings contracts would say the same, but its graph builder (grimp) skips
# namespace packages: core/, harness/, timeline/, reports/ and step/ have no __init__.py, and `kernels/` and
# `models/` install under microbench from beside it, so grimp saw 49 of our ~130 modules. This reads them all.


def _module_files(root: Path = REPO) -> dict[str, Path]:
    return {_module_name(p, root): p for p in _sources(root)}


def _grimp_targets(mod: str, node: ast.AST, files: dict[str, Path]) -> list[str]:
    """The modules an import names, as import-linter counts them: `from pkg import sub` imports pkg.sub (not
    pkg); `from pkg import name` imports pkg; third-party modules are left out."""
    is_pkg = files[mod].name == "__init__.py"
    package = mod if is_pkg else mod.rpartition(".")[0]
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name in files]
    base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
    target = ".".join(base + ([node.module] if node.module else [])) if node.level else node.module
    subs = [f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in files]
    names = [a for a in node.names if f"{target}.{a.name}" not in files]
    return subs + ([target] if names and target in files else [])


def _import_graph(root: Path = REPO, function_level: bool = True) -> dict[str, set[str]]:
    """Our modules and the modules each imports, at module level and (function_level) inside functions."""
    files = _module_files(root)
    graph = {}
    for mod, path in files.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        nodes = ast.walk(tree) if function_level else _module_level_imports(tree)
        graph[mod] = {
            t
            for n in nodes
            if isinstance(n, (ast.Import, ast.ImportFrom))
            for t in _grimp_targets(mod, n, files)
            if t != mod
        }
    return graph


def _cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One cycle of a directed graph (its nodes in order), or None."""
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(v):
        state[v], _ = 1, path.append(v)
        for w in sorted(edges.get(v, ())):
            if state.get(w) == 1:
                return path[path.index(w) :] + [w]
            if w not in state and (found := visit(w)):
                return found
        state[v], _ = 2, path.pop()
        return None

    return next((c for v in sorted(edges) if v not in state and (c := visit(v))), None)


def _child(pkg: str, module: str) -> str | None:
    """The child of `pkg` that `module` is or lies in; the package's own __init__ is a sibling of its modules
    (it may close a cycle too); None outside the package."""
    if module == pkg:
        return f"{pkg}.__init__"
    prefix = pkg + "."
    return prefix + module[len(prefix) :].split(".")[0] if module.startswith(prefix) else None


def _sibling_cycles(graph: dict[str, set[str]]) -> list[str]:
    """For each package at every depth, the graph of its children (each with everything below it squashed
    into it): a cycle there is a cycle between siblings, however deep the modules that make it."""
    packages = {".".join(m.split(".")[:i]) for m in graph for i in range(1, len(m.split(".")))}
    bad = []
    for pkg in sorted(packages):
        edges: dict[str, set[str]] = {}
        for src, dsts in graph.items():
            if is_command_module(src):
                continue  # an entry point: nothing imports it, so it closes no cycle (test_no_command_imports_another)
            for dst in dsts:
                a, b = _child(pkg, src), _child(pkg, dst)
                if a and b and a != b:
                    edges.setdefault(a, set()).add(b)
        if cycle := _cycle(edges):
            bad.append(f"in {pkg or 'the top level'}: " + " -> ".join(cycle))
    return bad


def test_no_import_cycle_at_any_depth():
    """Function-level imports count: an import inside a function that closes a cycle only moves the failure
    to the first call."""
    assert _sibling_cycles(_import_graph()) == []


def test_no_library_or_command_imports_a_command_module():
    """A command's thin module is an entry point: the door (microbench/__main__.py) finds it by name, and nothing
    else imports it (`roofline --model` goes through the door to decompose, not through decompose's module)."""
    graph = _import_graph()
    bad = [
        f"{src} imports {dst}"
        for src, dsts in graph.items()
        for dst in dsts
        if is_command_module(dst) and not (src.endswith(".__main__") and dst == src.rpartition(".")[0] + ".cli")
    ]
    assert bad == []


def test_the_cycle_check_sees_a_cycle_inside_a_package(tmp_path):
    pkg = tmp_path / "microbench" / "core" / "probe"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from microbench.core.probe.b import B\nA = 1\n")
    (pkg / "b.py").write_text("def f():\n    from microbench.core.probe import a\nB = 2\n")
    for d in ("kernels", "models"):
        (tmp_path / d).mkdir()
    assert _sibling_cycles(_import_graph(tmp_path)) == [
        "in microbench.core.probe: microbench.core.probe.a -> microbench.core.probe.b -> microbench.core.probe.a"
    ]


# --- imports inside functions --------------------------------------------------------------------------------
# An import goes inside a function only when importing it costs start-up time that a command which never calls
# the function should not pay. Measured here with `python -X importtime -c "import NAME"` (cumulative, this
# 2-core CPU): torch ~1.5 s, sklearn 2.4 s, pandas 540 ms, nvtx 380 ms, mlperf_logging 106 ms, scipy 91 ms,
# rich.progress 56 ms (rich.console 40 ms), pynvml 31 ms, multiprocessing 12 ms, concurrent.futures 10 ms;
# triton, cupy, matplotlib, dask and distributed are heavier than torch or start a runtime. `packaging` is not a
# runtime dependency (devtools only). hypothesis and pytest: test-only. Our own module is lazy when it imports one
# of these at module level (the closure below), so `python -m microbench.trace` never loads torch.
LAZY_THIRD_PARTY = {
    "mcp",
    "pytest",
    "torch",
    "triton",
    "cupy",
    "cupyx",
    "matplotlib",
    "dask",
    "distributed",
    "rich",
    "scipy",
    "sklearn",
    "pandas",
    "mlperf_logging",
    "pynvml",
    "nvtx",
    "packaging",
    "multiprocessing",
    "concurrent",
    "hypothesis",
    "amdsmi",
}


def _module_level_imports(tree: ast.Module) -> list[ast.AST]:
    """The imports that run when the module is imported: not those inside functions, nor under TYPE_CHECKING."""
    out = []

    def visit(body):
        for n in body:
            if isinstance(n, (ast.Import, ast.ImportFrom)):
                out.append(n)
            elif isinstance(n, ast.If) and "TYPE_CHECKING" in ast.dump(n.test):
                visit(n.orelse)
            elif not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for field in ("body", "orelse", "finalbody", "handlers"):
                    visit([s for s in getattr(n, field, []) if isinstance(s, ast.stmt | ast.excepthandler)])

    visit(tree.body)
    return out


def _loads_on_import(root: Path = REPO) -> dict[str, set[str]]:
    """Each of our modules -> the top-level names of everything importing it loads (third party included)."""
    files = _module_files(root)
    direct = {}
    for mod, path in files.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        names = set()
        for n in _module_level_imports(tree):
            for _, target in _imports_of(n, mod, files):
                parts = target.split(".")
                names |= {".".join(parts[:i]) for i in range(1, len(parts) + 1)}
        direct[mod] = names - {mod}
    closure = {}
    for mod in files:
        seen, todo = set(), [mod]
        while todo:
            for t in direct.get(todo.pop(), ()):
                if t not in seen:
                    seen.add(t)
                    todo.append(t)
        closure[mod] = {t.split(".")[0] if t not in files else t for t in seen}
    return closure


def _imports_of(node: ast.AST, mod: str, files: dict[str, Path]) -> list[tuple[int, str]]:
    if isinstance(node, ast.Import):
        return [(node.lineno, a.name) for a in node.names]
    package = mod if files[mod].name == "__init__.py" else mod.rpartition(".")[0]
    base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
    target = ".".join(base + ([node.module] if node.module else [])) if node.level else node.module
    return [(node.lineno, target)] + [
        (node.lineno, f"{target}.{a.name}") for a in node.names if f"{target}.{a.name}" in files
    ]


def _needless_function_imports(root: Path = REPO) -> list[str]:
    files, loads = _module_files(root), _loads_on_import(root)

    def lazy(target):
        return target.split(".")[0] in LAZY_THIRD_PARTY or bool(loads.get(target, set()) & LAZY_THIRD_PARTY)

    bad = []
    for mod, path in files.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        inner = {
            id(n): n
            for f in ast.walk(tree)
            if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
            for n in ast.walk(f)
            if isinstance(n, (ast.Import, ast.ImportFrom))
        }
        for node in inner.values():
            if isinstance(node, ast.ImportFrom) and node.module == "__future__":
                continue
            targets = _imports_of(node, mod, files)
            if not any(lazy(t) for _, t in targets):
                bad.append(
                    f"{path.relative_to(root)}:{node.lineno}: `{ast.unparse(node)}` costs no start-up "
                    "time: import it at module level"
                )
    return bad


def test_imports_inside_functions_are_only_of_what_is_slow_to_import():
    assert _needless_function_imports() == []


def test_the_function_import_check_sees_a_cheap_lazy_import(tmp_path):
    core = tmp_path / "microbench" / "core"
    core.mkdir(parents=True)
    (core / "slow.py").write_text("import torch\n")
    (core / "cheap.py").write_text("import json\n")
    (core / "user.py").write_text(
        "def f():\n    from microbench.core import slow\n\n"
        "def g():\n    from microbench.core.cheap import json\n    import math\n"
    )
    for d in ("kernels", "models"):
        (tmp_path / d).mkdir()
    found = _needless_function_imports(tmp_path)
    assert [line.split(": ")[0] for line in found] == ["microbench/core/user.py:5", "microbench/core/user.py:6"]
