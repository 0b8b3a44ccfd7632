"""Shared test set-up.

- Plain `pytest` runs every benchmark test once, as a correctness smoke test (pytest-benchmark's
  --benchmark-disable); `pytest --benchmark-only` (or --benchmark-enable) times them for real (the plugin:
  microbench/bench/plugin.py, which `dawnscope bench` loads too).
- Tests marked `gpu` are skipped, visibly, where PyTorch sees no CUDA or ROCm device.
- No test writes into the checkout: Hypothesis keeps its example database and constants cache under the
  system's temporary folder, not in `.hypothesis/` of the working directory.
- Real inputs are in the repository: `TRACES` (tests/data/traces), `NSYS`, `NCU`, `SLICE`, and `SHARED` /
  `shared_dir` for any folder of tests/data; a folder no licence lets us copy (the DAWNBench entries) comes from
  ../shared beside the repository when it is there, and its tests (`needs_shared`) say why they skip otherwise.
- Helpers for more than one test file live here: `needs_traces`, `needs_shared`, `load_script`, `mllog_events`,
  `tiny_config`.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import os
import tempfile
from pathlib import Path

import pytest
import torch

# The benchmark suite's plugin (microbench/bench/plugin.py): a plain run times no benchmark and keeps its own ceilings
# cache; `--benchmark-only` times them, with the machine's fingerprint and conditions.
pytest_plugins = ["microbench.bench.plugin"]
REPO = Path(__file__).resolve().parent.parent


def analyze(path, config=None, **kw) -> dict:
    """A trace's document without its findings (the trace layer alone): `trace.analysis.TraceAnalysis.open`."""
    from microbench.trace.analysis import TraceAnalysis

    return TraceAnalysis.open(path, config, **kw).document()


def analyze_with_findings(path, config=None, **kw) -> dict:
    """A trace's document as `dawnscope trace --json` writes it: `microbench.TraceAnalysis.open(...).document()`."""
    from microbench.findings.analysis import TraceAnalysis

    return TraceAnalysis.open(path, config, **kw).document()


def load_script(name: str):
    """A script of scripts/ (no .py suffix, so not importable by name) as a module, for tests to call its main."""
    loader = importlib.machinery.SourceFileLoader(name.replace("-", "_"), str(REPO / "scripts" / name))
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader(loader.name, loader))
    loader.exec_module(module)
    return module


def child_pytest_env(**extra: str) -> dict[str, str]:
    """The environment for a pytest run in a child process: this one's, less what marks it as a pytest-xdist
    worker (pytest-benchmark reads PYTEST_XDIST_WORKER and then disables every benchmark: a child run under
    `pytest -n 2` timed nothing and failed)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST_") and k != "PYTEST_CURRENT_TEST"}
    return env | extra


def mllog_events(path: Path) -> list[dict]:
    """The `:::MLLOG {json}` events of an MLPerf result log, in order: read here, apart from the project's reader,
    for tests to compute what they expect."""
    return [
        json.loads(line.split(":::MLLOG", 1)[1])
        for line in path.read_text(encoding="latin-1").splitlines()
        if ":::MLLOG" in line
    ]


def _hypothesis_outside_the_checkout() -> None:
    try:
        from hypothesis.configuration import set_hypothesis_home_dir
    except ImportError:
        return
    set_hypothesis_home_dir(Path(tempfile.gettempdir()) / "dawnscope-hypothesis")


_hypothesis_outside_the_checkout()


DATA = REPO / "tests" / "data"  # real traces and exports in the repository (tests/data/SOURCES.md), with their licences


def _find_shared() -> Path:
    """../shared beside the repository: an optional larger corpus (what no licence lets us copy here, such as the
    DAWNBench submissions); a git worktree may sit deeper."""
    for parent in REPO.parents:
        if (parent / "shared" / "traces").is_dir():
            return parent / "shared"
    return REPO.parent / "shared"


class _Corpus(type(Path())):
    """The test inputs: `SHARED / "traces"` is tests/data/traces, and a folder not copied into tests/data (dawnbench,
    gpu-image) is ../shared's, when there is one."""

    def __truediv__(self, part):
        here = DATA / part
        return here if here.exists() else _find_shared() / part


SHARED = _Corpus(DATA)
TRACES = SHARED / "traces"
NSYS = SHARED / "nsight" / "power_iteration.nsys.sqlite"  # Nsight Systems SQLite export of a T4 (nsight/SOURCES.md)
NCU = SHARED / "nsight" / "copy_blocked.ncu.csv"  # Nsight Compute CSV (long form) of a copy kernel
SLICE = DATA / "h100_bert_small_slice.json"  # 47 events of the H100 bert-small trace (tests/data/SOURCES.md)
needs_traces = pytest.mark.skipif(
    not (TRACES / "SOURCES.md").is_file(), reason="tests/data/traces (real GPU traces) is not in this checkout"
)


def needs_shared(folder: str):
    """A test of inputs only the optional ../shared corpus holds: skipped, with the reason, without it."""
    return pytest.mark.skipif(
        not (SHARED / folder).is_dir(),
        reason=f"{folder}: not in tests/data (no licence to copy it) and no ../shared/{folder} here",
    )


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a GPU: PyTorch sees no CUDA or ROCm device here")
    for item in items:
        # the marker, not `"gpu" in item.keywords`: keywords also hold the names of the parent
        # directories, and a checkout under a folder named `gpu` skipped every test
        if item.get_closest_marker("gpu") is not None:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def cfg():
    from microbench.core.config import load_config

    return load_config()


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    """The test inputs (tests/data, then ../shared for what is not copied): see SHARED."""
    return SHARED


TINY_PROFILE = """
[timing]
warmup_ms = 2.0
rep_ms = 5.0
min_reps = 3
max_reps = 20
input_sets = 2

[ceilings.cpu]
gemm_sizes = { fp32 = [256], bf16 = [256] }
copy_mb = 16

[[cpu_estimate.tier]]
requires = []
fp32 = 8
bf16 = 8

[profiles.tiny]
description = "tests"
providers = ["torch", "cupy_blas"]

[[profiles.tiny.gemm]]
dtypes = ["fp32", "bf16"]
shapes = [{ m = 64, n = 48, k = 32 }, { m = 7, n = 5, k = 3, batch = 2, trans_a = true }]

[[profiles.tiny.conv2d]]
dtypes = ["fp32"]
directions = ["fwd", "bwd_data", "bwd_weight"]
shapes = [{ n = 2, c = 8, h = 9, w = 9, k = 16, r = 3, s = 3, stride = 2, pad = 1 }]
"""


@pytest.fixture
def tiny_config(tmp_path, cfg) -> Path:
    """A small, fast configuration (the real tolerances, short timing budgets, one tiny profile)."""
    tol = "\n".join(f"{k} = {v!r}" for k, v in cfg.tolerance.items())
    p = tmp_path / "bench.toml"
    p.write_text(TINY_PROFILE + "\n[tolerance]\n" + tol + "\n")
    return p
