"""microbench.compare.cli: results from different machines side by side. The documents are generated here with
the project's own writer and row type (and one real pytest-benchmark run), variants built from them."""

from __future__ import annotations

import copy
import gzip
import hashlib
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from microbench.compare import cli as compare_cli
from microbench.core.device import cpu_device, fingerprint, software
from microbench.core.results import KernelCaseRow, ResultsWriter
from microbench.report import compare

from .conftest import REPO, child_pytest_env

CASES = [  # (op, shape, dtype, median ms, flops)
    ("gemm", "512x512x512", "fp32", 4.0, 2 * 512**3),
    ("gemm", "512x512x512", "bf16", 2.0, 2 * 512**3),
    ("conv2d_fwd", "n8 c64 56x56 k64 3x3 s1 p1", "fp32", 60.0, 2 * 8 * 64 * 56 * 56 * 64 * 9),
]


def make_doc(
    tmp: Path,
    name: str = "a",
    *,
    device_name: str | None = None,
    kind: str | None = None,
    speedup: float = 1.0,
    drop: tuple[str, ...] = (),
    torch_version: str | None = None,
    profile: str = "quick",
    sha: str = "sha-of-bench-toml",
) -> Path:
    hw = fingerprint(cpu_device())
    if device_name:
        hw.update(name=device_name, kind=kind or "cuda", arch="sm_90", units=132)
    sw = software()
    if torch_version:
        sw["torch"] = torch_version
    header = {
        "hardware": hw,
        "software": sw,
        "config": {"profile": profile, "sha256": sha},
        "notes": [],
        "ceilings": [
            {
                "name": "measured fp32",
                "kind": "compute",
                "dtype": "fp32",
                "value": 1.0,
                "unit": "TFLOP/s",
                "source": "measured",
                "note": "",
            }
        ],
    }
    with ResultsWriter(tmp / name, header) as w:
        for op, shape, dtype, ms, flops in CASES:
            if f"{op} {dtype}" in drop:
                continue
            t = ms / speedup
            tflops = flops / (t * 1e-3) / 1e12
            w.add(
                KernelCaseRow(
                    op=op,
                    shape=shape,
                    dtype=dtype,
                    provider="torch",
                    device=hw["name"],
                    time_ms={"median": t, "p20": t, "p80": t, "cov": 0.05, "reps": 10},
                    flops=flops,
                    tflops=tflops,
                    pct_of_measured=100 * tflops / 1.0,
                    pct_of_datasheet=10 * tflops,
                    pct_of_ceiling=100 * tflops,
                    baseline=True,
                )
            )
    return w.json_path


@pytest.fixture(scope="module")
def pytest_benchmark_json(tmp_path_factory) -> Path:
    """A real pytest-benchmark --benchmark-json file: one benchmark with dawnscope's extra_info, one without."""
    d = tmp_path_factory.mktemp("pb")
    (d / "pytest.ini").write_text("[pytest]\n")
    (d / "test_pb.py").write_text(
        textwrap.dedent("""
        def test_gemm(benchmark):
            benchmark.extra_info.update(op="gemm", shape="512x512x512", dtype="fp32", provider="torch",
                                        device="cpu", flops=2 * 512 ** 3)
            benchmark.pedantic(lambda: sum(range(1000)), rounds=3, iterations=1)

        def test_plain(benchmark):
            benchmark.pedantic(lambda: None, rounds=2)
    """)
    )
    out = d / "bench.json"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-c",
            str(d / "pytest.ini"),
            str(d / "test_pb.py"),
            f"--benchmark-json={out}",
        ],
        cwd=d,
        capture_output=True,
        text=True,
        timeout=120,
        env=child_pytest_env(),
    )
    assert r.returncode == 0, r.stdout + r.stderr
    return out


@pytest.fixture(scope="module")
def our_benchmark_json(tmp_path_factory, request) -> Path:
    """`pytest --benchmark-only --benchmark-json` through the real tests/conftest.py and test_benchmarks.py, on
    a tiny profile on the CPU: the file compare must read our fingerprint block from."""
    from microbench.core.config import load_config
    from tests.conftest import TINY_PROFILE

    d = tmp_path_factory.mktemp("ours")
    tol = "\n".join(f"{k} = {v!r}" for k, v in load_config().tolerance.items())
    (d / "bench.toml").write_text(TINY_PROFILE + "\n[tolerance]\n" + tol + "\n")
    out = d / "bench.json"
    env = child_pytest_env(DAWNSCOPE_CONFIG=str(d / "bench.toml"), DAWNSCOPE_PROFILE="tiny", DAWNSCOPE_DEVICE="cpu")
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "tests/test_benchmarks.py",
            "-k",
            "gemm-64x48x32-fp32-torch",
            "--benchmark-only",
            f"--benchmark-json={out}",
            "--benchmark-max-time=0.02",
            "--benchmark-min-rounds=3",
            "--benchmark-warmup=off",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    out.with_suffix(".stdout").write_text(r.stdout)  # the terminal summary, for its test
    return out


@pytest.mark.slow
def test_benchmark_only_ends_with_our_columns_after_pytest_benchmarks_table(our_benchmark_json):
    text = our_benchmark_json.with_suffix(".stdout").read_text()
    ours = text.index("dawnscope: the benchmarks against their ceilings")
    assert text.index("benchmark:") < ours or text.index("Name (time in") < ours  # pytest-benchmark's first
    tail = text[ours:]
    for col in ("TFLOP/s", "% of ceiling", "Tensor Cores", "flags"):
        assert col in tail
    assert "64x48x32" in tail and "torch" in tail


@pytest.mark.slow
def test_our_benchmark_json_shows_device_profile_and_versions(tmp_path, our_benchmark_json):
    doc = json.loads(our_benchmark_json.read_text())
    assert [b["extra_info"]["provider"] for b in doc["benchmarks"]] == ["torch"]
    hw = fingerprint(cpu_device())
    sha = hashlib.sha256((our_benchmark_json.parent / "bench.toml").read_bytes()).hexdigest()
    m = compare.load_machine(our_benchmark_json)
    assert (m.name, m.hardware_kind, m.profile, m.config_sha256) == (hw["name"], "cpu", "tiny", sha)
    assert m.software["torch"] == software()["torch"] and m.software["python"] == software()["python"]
    assert m.fingerprint.startswith(f"{hw['name']} ({hw['arch']}, {hw['units']} cores")
    # beside a results.json of the same machine, profile and software: nothing to flag
    same = make_doc(tmp_path, "same", profile="tiny", sha=sha)
    cmp = compare.compare([same, our_benchmark_json])
    assert cmp["flags"] == []
    gemm = next(c for c in cmp["cases"] if c["provider"] == "torch" and c["shape"] == "64x48x32")
    assert gemm["cells"][cmp["machines"][1]["label"]]["time_ms"] == pytest.approx(
        doc["benchmarks"][0]["stats"]["median"] * 1e3
    )


def test_our_benchmark_json_mismatches_are_flagged(tmp_path, our_benchmark_json):
    other_profile = make_doc(tmp_path, "p", profile="quick")
    flags = compare.compare([other_profile, our_benchmark_json])["flags"]
    assert any(f.startswith("different profiles") and "tiny" in f for f in flags)
    other_cfg = make_doc(tmp_path, "c", profile="tiny", sha="another-bench-toml")
    assert any("different configuration files" in f for f in compare.compare([other_cfg, our_benchmark_json])["flags"])
    sha = hashlib.sha256((our_benchmark_json.parent / "bench.toml").read_bytes()).hexdigest()
    old_torch = make_doc(tmp_path, "t", profile="tiny", sha=sha, torch_version="2.9.1")
    flags = compare.compare([old_torch, our_benchmark_json])["flags"]
    assert len(flags) == 1 and flags[0].startswith("torch versions differ") and "2.9.1" in flags[0]


def test_two_machines_side_by_side_with_ratio_and_fingerprints(tmp_path):
    a = make_doc(tmp_path, "a")
    b = make_doc(tmp_path, "b", device_name="NVIDIA H100 80GB HBM3", speedup=4.0)
    cmp = compare.compare([a, b])
    assert cmp["baseline"] == cmp["machines"][0]["label"]  # the first file by default
    labels = [m["label"] for m in cmp["machines"]]
    assert labels[1] == "NVIDIA H100 80GB HBM3"
    assert "NVIDIA H100 80GB HBM3" in cmp["machines"][1]["fingerprint"]
    assert len(cmp["cases"]) == len(CASES) and not any(c["missing_in"] for c in cmp["cases"])
    gemm = next(c for c in cmp["cases"] if (c["op"], c["dtype"]) == ("gemm", "fp32"))
    assert gemm["cells"][labels[0]]["ratio_to_baseline"] == pytest.approx(1.0)
    assert gemm["cells"][labels[1]]["ratio_to_baseline"] == pytest.approx(4.0)
    assert gemm["cells"][labels[1]]["time_ms"] == pytest.approx(1.0)
    assert gemm["cells"][labels[1]]["pct_of_measured"] == pytest.approx(4 * gemm["cells"][labels[0]]["pct_of_measured"])
    # the other machine as baseline, chosen by a part of its name
    cmp2 = compare.compare([a, b], baseline="h100")
    gemm2 = next(c for c in cmp2["cases"] if (c["op"], c["dtype"]) == ("gemm", "fp32"))
    assert gemm2["cells"][labels[0]]["ratio_to_baseline"] == pytest.approx(0.25)


def test_missing_case_is_shown_not_dropped(tmp_path, capsys):
    a = make_doc(tmp_path, "a", drop=("conv2d_fwd fp32",))
    b = make_doc(tmp_path, "b", device_name="NVIDIA A100-SXM4-80GB", drop=("gemm bf16",))
    cmp = compare.compare([a, b])
    la, lb = (m["label"] for m in cmp["machines"])
    by = {(c["op"], c["dtype"]): c for c in cmp["cases"]}
    assert set(by) == {("gemm", "fp32"), ("gemm", "bf16"), ("conv2d_fwd", "fp32")}  # the union
    assert by[("gemm", "bf16")]["missing_in"] == [lb] and by[("gemm", "bf16")]["cells"][lb] is None
    assert by[("conv2d_fwd", "fp32")]["missing_in"] == [la]
    assert compare_cli.main([str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert out.count("missing") >= 2


def test_profiles_software_and_config_differences_are_flagged(tmp_path):
    a = make_doc(tmp_path, "a")
    same = make_doc(tmp_path, "same", device_name="NVIDIA L4")
    assert compare.compare([a, same])["flags"] == []
    other_torch = make_doc(tmp_path, "t", device_name="NVIDIA L4", torch_version="2.9.1")
    flags = compare.compare([a, other_torch])["flags"]
    assert len(flags) == 1 and flags[0].startswith("torch versions differ") and "2.9.1" in flags[0]
    other_profile = make_doc(tmp_path, "p", device_name="NVIDIA L4", profile="default")
    assert any(f.startswith("different profiles") for f in compare.compare([a, other_profile])["flags"])
    other_cfg = make_doc(tmp_path, "c", device_name="NVIDIA L4", sha="another-bench-toml")
    assert any("different configuration files" in f for f in compare.compare([a, other_cfg])["flags"])


def test_pytest_benchmark_json_beside_results_json(tmp_path, pytest_benchmark_json):
    a = make_doc(tmp_path, "a")
    cmp = compare.compare([a, pytest_benchmark_json])
    pb = cmp["machines"][1]
    assert pb["format"] == "pytest-benchmark" and "python" in pb["fingerprint"]
    doc = json.loads(pytest_benchmark_json.read_text())
    bench = next(b for b in doc["benchmarks"] if b["extra_info"])
    gemm = next(c for c in cmp["cases"] if (c["op"], c["shape"], c["dtype"]) == ("gemm", "512x512x512", "fp32"))
    cell = gemm["cells"][pb["label"]]
    assert cell["time_ms"] == pytest.approx(bench["stats"]["median"] * 1e3)
    assert cell["tflops"] == pytest.approx(2 * 512**3 / bench["stats"]["median"] / 1e12)  # from flops when no tflops
    assert cell["ratio_to_baseline"] == pytest.approx(4.0 / cell["time_ms"])
    plain = [c for c in cmp["cases"] if c["op"] == "benchmark"]
    assert len(plain) == 1 and "test_plain" in plain[0]["shape"] and plain[0]["missing_in"] == [cmp["baseline"]]
    assert any("matched by test name only" in n for n in cmp["notes"])


def test_cli_writes_html_and_json(tmp_path, capsys):
    a = make_doc(tmp_path, "a")
    b = make_doc(tmp_path, "b", device_name="AMD Instinct MI300X", kind="rocm", speedup=2.0)
    html_out, json_out = tmp_path / "out" / "cmp.html", tmp_path / "out" / "cmp.json"
    assert (
        compare_cli.main([str(a), str(b), "--baseline", "MI300X", "--html", str(html_out), "--json", str(json_out)])
        == 0
    )
    text = html_out.read_text()
    assert "AMD Instinct MI300X" in text and "(baseline)" in text and "0.50x" in text
    assert json.loads(json_out.read_text())["baseline"] == "AMD Instinct MI300X"
    assert "0.50x" in capsys.readouterr().out


def _bad_results(tmp: Path, good: Path) -> dict[str, tuple[Path, str]]:
    text = good.read_text()
    doc = json.loads(text)
    no_hw = copy.deepcopy(doc)
    del no_hw["hardware"]
    bad_row = copy.deepcopy(doc)
    del bad_row["results"][0]["op"]
    v2 = dict(doc, schema="dawnscope.results/2")
    cases = {
        "empty": (b"", "empty file"),
        "truncated json": (text[: len(text) // 3].encode(), "truncated JSON"),
        "truncated gzip": (gzip.compress(text.encode())[:200], "truncated gzip"),
        "not json": (b"op,shape,dtype\ngemm,1x1x1,fp32\n", "not valid JSON"),
        "wrong schema": (json.dumps({"rows": []}).encode(), "not a results file"),
        "a trace": (
            json.dumps(
                {"traceEvents": [{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "p"}}]}
            ).encode(),
            "a profiler trace, and the first input is not",
        ),
        "schema v2": (json.dumps(v2).encode(), "unsupported schema"),
        "no hardware": (json.dumps(no_hw).encode(), "hardware"),
        "row without op": (json.dumps(bad_row).encode(), "results[0].op"),
        "results not list": (json.dumps(dict(doc, results={})).encode(), "results"),
        "top-level list": (b"[]", "expected a results object"),
        "benchmarks broken": (
            json.dumps({"machine_info": {}, "benchmarks": [{"name": "x"}]}).encode(),
            "benchmarks[0]",
        ),
    }
    out = {}
    for i, (label, (data, expect)) in enumerate(cases.items()):
        p = tmp / f"bad{i}.json"
        p.write_bytes(data)
        out[label] = (p, expect)
    return out


def test_bad_results_files_exit_2_with_one_line(tmp_path, capsys):
    good = make_doc(tmp_path, "good")
    for label, (path, expect) in _bad_results(tmp_path, good).items():
        rc = compare_cli.main([str(good), str(path)])
        err = capsys.readouterr().err.strip().splitlines()
        assert rc == 2, label
        assert len(err) == 1 and err[0].startswith(f"error: {path}: "), (label, err)
        assert expect in err[0], (label, err[0])


def test_unknown_baseline_is_bad_input(tmp_path, capsys):
    a = make_doc(tmp_path, "a")
    assert compare_cli.main([str(a), "--baseline", "TPU v5"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: --baseline = 'TPU v5': matches no input")
