"""`dawnscope bench`: the benchmark suite from an install, run from a folder that is not the checkout. Was:
`pytest --benchmark-only` after `pip install 'dawnscope[test]'` collected 0 items (the tests lived in tests/ only)."""

from __future__ import annotations

import json
import subprocess
import sys

from microbench.bench.cli import build_parser, pytest_argv

from .conftest import child_pytest_env


def test_the_suite_runs_from_any_folder_and_its_json_gates(tmp_path, tiny_config):
    run = tmp_path / "run"
    run.mkdir()
    cmd = [sys.executable, "-m", "microbench", "bench", "--config", str(tiny_config), "--profile", "tiny",
           "--device", "cpu", "--json", "bench.json", "--", "-k", "gemm"]  # fmt: skip
    done = subprocess.run(cmd, cwd=run, env=child_pytest_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    doc = json.loads((run / "bench.json").read_text())
    names = sorted(b["name"] for b in doc["benchmarks"])
    assert names and all(n.startswith("test_benchmark[gemm-") for n in names)
    assert doc["machine_info"]["dawnscope"]["profile"] == "tiny" and "conditions" in doc["machine_info"]["dawnscope"]
    assert all(b["extra_info"]["tflops"] > 0 for b in doc["benchmarks"])
    assert "conditions: " in done.stdout or "warning: machine busy" in done.stdout
    gate = [sys.executable, "-m", "microbench", "gate", "bench.json", "bench.json", "--allow-busy"]
    assert subprocess.run(gate, cwd=run, capture_output=True, text=True, timeout=120).returncode == 0


def test_pytest_gets_the_suite_by_module_name_and_what_follows_the_double_dash():
    args = build_parser().parse_args(["--json", "b.json", "--", "-k", "gemm", "--benchmark-compare"])
    argv = pytest_argv(args)
    assert argv[:4] == ["--pyargs", "microbench.bench.test_suite", "-p", "microbench.bench.plugin"]
    assert (
        "--benchmark-only" in argv
        and "--benchmark-json=b.json" in argv
        and argv[-3:] == ["-k", "gemm", "--benchmark-compare"]
    )
