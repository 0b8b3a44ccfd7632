"""The architecture, enforced: every import in microbench/, kernels/ and models/ (module level or inside a
function) goes down the layers of docs/ARCHITECTURE.md, never up or sideways, so there is no cycle."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

# Lowest first. A package may import its own modules and any lower layer; packages on one level are
# independent of each other.
LEVELS = {
    "microbench.core": 0,
    "microbench.reports": 1,
    "microbench.timeline": 2,
    "microbench.harness": 3,
    "microbench.models": 3,  # imports only the core (checked below)
    "microbench.kernels": 4,  # providers: core + measurement
    "microbench.step": 5,
    "microbench.communication": 5,
    "microbench.accuracy": 6,
    "microbench.prediction": 6,
    "microbench": 9,  # the commands (microbench/<command>.py), the public API
}
MODELS_MAY_IMPORT = ("microbench.core",)


def _unit(module: str) -> str:
    """The layer unit a module belongs to: its subpackage, or `microbench` for the top-level commands."""
    parts = module.split(".")
    if parts[0] == "microbench" and len(parts) > 1 and f"microbench.{parts[1]}" in LEVELS:
        return f"microbench.{parts[1]}"
    return parts[0]


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
            # `from microbench import trace` imports the submodule microbench.trace
            out += [(node.lineno, f"{target}.{a.name}") for a in node.names
                    if target in ("microbench", "microbench.kernels", "microbench.models")]
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
                bad.append(f"{where}: {src_unit} (level {LEVELS[src_unit]}) may not import "
                           f"{dst_unit} (level {LEVELS[dst_unit]})")
    return bad


def test_imports_go_down_the_layers():
    assert _violations() == []


def test_core_imports_neither_kernels_nor_models():
    core = [p for p in _sources() if _unit(_module_name(p)) == "microbench.core"]
    assert core, "no core modules found"
    for path in core:
        for line, target in _imports(path):
            assert not target.startswith(("microbench.kernels", "microbench.models", "kernels", "models")), \
                f"{path}:{line} imports {target}"


def test_the_checker_sees_an_upward_import(tmp_path):
    """The rule can fail: a core module importing the runner is reported (in a tree made here: no test
    writes into the checkout)."""
    fake = tmp_path / "microbench" / "core" / "_layer_probe_tmp.py"
    fake.parent.mkdir(parents=True)
    fake.write_text("def f():\n    from microbench.harness.runner import CaseRunner\n")
    assert any("_layer_probe_tmp.py:2 imports microbench.harness.runner" in v for v in _violations(tmp_path))


@pytest.mark.parametrize("name", ["provider", "Unsupported", "shapes", "Case", "ResultRow", "measure",
                                  "decompose_step", "analyze_trace"])
def test_public_api(name):
    import microbench

    assert name in microbench.__all__
    assert getattr(microbench, name) is not None
