"""Extras that fit the jobs: `pip install dawnscope` reads traces, compares, gates, predicts from a trace and reads a
job's ranks without torch, Triton or the other measuring packages (the `bench` extra), and a command that needs one
says which extra to install. Was: torch and Triton were dependencies of every install (2.6 GB), and a missing one
ended in a traceback.

The slim install is checked here by running the commands in a fresh interpreter in which the measuring packages
cannot be imported (None in sys.modules: `import torch` raises ModuleNotFoundError there, as in an environment
without them), so the check holds on a machine that has them installed."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
import tomllib

from .conftest import REPO, TRACES

PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
EXTRAS = tomllib.loads((REPO / "microbench" / "data" / "extras.toml").read_text())["modules"]
MEASURING = (
    "torch",
    "triton",
    "nvtx",
    "pynvml",
    "sklearn",
    "scipy",
    "mlperf_logging",
    "cupy",
    "cupyx",
    "pandas",
    "mcp",
)


def _name(req: str) -> str:
    return re.split(r"[<>=!~;\[ ]", req, maxsplit=1)[0].lower()


def test_the_core_dependencies_hold_no_measuring_package():
    core = {_name(r) for r in PYPROJECT["dependencies"]}
    assert core == {"numpy", "msgspec", "rich", "matplotlib"}
    bench = {_name(r) for r in PYPROJECT["optional-dependencies"]["bench"]}
    assert {"torch", "triton", "nvtx", "nvidia-ml-py", "scikit-learn", "scipy", "mlperf-logging"} <= bench


def test_every_optional_module_names_an_extra_that_exists():
    extras = PYPROJECT["optional-dependencies"]
    for module, extra in EXTRAS.items():
        assert extra in extras, module
        if module in ("torch", "triton", "nvtx", "scipy", "pandas", "mcp", "pytest", "dask"):
            assert module in {_name(r) for r in extras[extra]}, (module, extra)


def _without_measuring(argv: list[str], cwd) -> subprocess.CompletedProcess:
    code = (
        "import sys\n"
        f"for m in {MEASURING!r}: sys.modules[m] = None\n"
        "from microbench.__main__ import main\n"
        f"sys.exit(main({argv!r}))\n"
    )
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(
    "argv",
    [
        ["trace", str(TRACES / "h100_bert_small.json.gz"), "--json", "out.json"],
        [
            "compare",
            str(TRACES / "h100_bert_small.json.gz"),
            str(TRACES / "mi300_bert_small.json.gz"),
            "--json",
            "out.json",
        ],
        [
            "gate",
            str(TRACES / "h100_bert_small.json.gz"),
            str(TRACES / "h100_bert_small.json.gz"),
            "--json",
            "out.json",
        ],
        ["predict", str(TRACES / "h100_bert_small.json.gz"), "--on", "MI300X", "--json", "out.json"],
        [
            "comm",
            "ranks",
            str(TRACES / "a100_torchrec_rank0.json.gz"),
            str(TRACES / "a100_torchrec_rank1.json.gz"),
            "--readers",
            "0",
            "--json",
            "out.json",
        ],
    ],  # fmt: skip
    ids=["trace", "compare", "gate", "predict", "comm ranks"],
)
def test_reading_commands_run_without_the_measuring_packages(tmp_path, argv):
    done = _without_measuring(argv, tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads((tmp_path / "out.json").read_text())["schema"].startswith("dawnscope.")


@pytest.mark.parametrize(
    "argv, extra",
    [
        (["roofline", "--profile", "quick", "--out", "r"], "bench"),
        (["decompose", "--model", "resnet9"], "bench"),
        (["tta", "leaderboard", str(REPO / "tests" / "data" / "mlperf")], "tta"),
    ],
)
def test_a_command_that_needs_an_extra_names_it(tmp_path, argv, extra):
    done = _without_measuring(argv, tmp_path)
    assert done.returncode == 2
    assert f"extra installs: pip install 'dawnscope[{extra}]'" in done.stderr and "Traceback" not in done.stderr
    assert done.stderr.count("\n") == 1 and list(tmp_path.iterdir()) == []
