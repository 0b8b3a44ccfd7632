"""bench.toml is read into typed, validated objects; every kind of bad input is one line and exit code 2."""

from __future__ import annotations

import subprocess
import sys

import pytest

from microbench.core.config import DTYPES, load_config
from microbench.core.errors import ConfigError
from microbench.core.shapes import ConvShape, GemmShape

from .conftest import REPO, TINY_PROFILE

TOL = "\n[tolerance]\n" + "\n".join(f"{d} = 0.01" for d in DTYPES) + "\n"


def test_real_config_profiles(cfg):
    assert {"quick", "default", "full"} <= set(cfg.case_sets)
    quick, full, default = cfg.case_sets["quick"], cfg.case_sets["full"], cfg.case_sets["default"]
    # full = default + the DeepBench training sizes, converted from DeepBench's row layouts
    assert set(default.cases) < set(full.cases)
    deep = [c for c in full.cases if c not in set(default.cases)]
    assert any(isinstance(c.shape, GemmShape) and (c.shape.m, c.shape.n, c.shape.k) == (1760, 16, 1760) for c in deep)
    # DeepBench conv row [700, 161, 1, 4, 32, 20, 5, 0, 0, 2, 2] = w h c n k fw fh pw ph sw sh
    assert ConvShape(n=4, c=1, h=161, w=700, k=32, r=5, s=20, stride=(2, 2), pad=(0, 0)) in {c.shape for c in deep}
    assert all(c.dtype in DTYPES for c in quick.cases)


def test_datasheet_and_tiers_loaded(cfg):
    h200 = next(d for d in cfg.devices if d.key == "h200_sxm")
    assert h200.peaks_tflops["bf16"] == 989.0 and h200.memory_tbs == 4.8
    assert cfg.cpu_tiers[-1].requires == ()  # a catch-all tier exists


def _write(tmp_path, text):
    p = tmp_path / "bad.toml"
    p.write_text(text)
    return p


@pytest.mark.parametrize(
    "text, key, value, words",
    [
        ("[profiles.x\n", None, None, "TOML syntax error"),
        (TINY_PROFILE.replace("[timing]", "[timing]\nwarmup_sec = 3"), "timing.warmup_sec", 3, "unknown key"),
        (
            TINY_PROFILE.replace('dtypes = ["fp32", "bf16"]', 'dtypes = ["fp32", "fp17"]'),
            "profiles.tiny.gemm[0].dtypes",
            "fp17",
            "unknown dtype",
        ),
        (
            TINY_PROFILE.replace("{ m = 64, n = 48", "{ m = 0, n = 48"),
            "profiles.tiny.gemm[0].shapes[0].m",
            0,
            "positive",
        ),
        (
            TINY_PROFILE.replace("k = 16, r = 3", "k = -16, r = 3"),
            "profiles.tiny.conv2d[0].shapes[0].k",
            -16,
            "positive",
        ),
        (
            TINY_PROFILE.replace('directions = ["fwd",', 'directions = ["sideways",'),
            "profiles.tiny.conv2d[0].directions",
            "sideways",
            "unknown direction",
        ),
        (TINY_PROFILE.replace("rep_ms = 5.0", 'rep_ms = "fast"'), "timing.rep_ms", "fast", "expected a number"),
    ],
)
def test_bad_config_names_file_key_value(tmp_path, text, key, value, words):
    p = _write(tmp_path, text + (TOL if "[tolerance]" not in text else ""))
    with pytest.raises(ConfigError) as ei:
        load_config(p)
    e = ei.value
    assert e.path == str(p) and words in e.problem
    assert e.key == key and e.value == value
    line = e.line()
    assert str(p) in line and "\n" not in line
    if key:
        assert key in line and repr(value) in line


def test_missing_profile(tmp_path):
    p = _write(tmp_path, TINY_PROFILE + TOL)
    with pytest.raises(ConfigError, match="no such profile") as ei:
        load_config(p).case_set("nope")
    assert ei.value.value == "nope"


def _cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "microbench.roofline", *args], capture_output=True, text=True, cwd=REPO, timeout=120
    )


@pytest.mark.parametrize(
    "text, extra, needle",
    [
        ("[profiles.x\n", [], "TOML syntax error"),
        (TINY_PROFILE.replace('dtypes = ["fp32", "bf16"]', 'dtypes = ["fp17"]'), [], "'fp17'"),
        (TINY_PROFILE.replace("{ m = 64, n = 48", "{ m = -1, n = 48"), [], "shapes[0].m = -1"),
        (TINY_PROFILE.replace("[timing]", "[timing]\nbogus = 1"), [], "timing.bogus"),
        (TINY_PROFILE, ["--profile", "nope"], "profiles = 'nope': no such profile"),
        (
            TINY_PROFILE.replace('providers = ["torch", "cupy_blas"]', 'providers = ["torch", "cublas9"]'),
            [],
            "providers = 'cublas9': unknown provider",
        ),
    ],
)
def test_cli_bad_input_exit_2_one_line(tmp_path, text, extra, needle):
    p = _write(tmp_path, text + TOL)
    args = ["--config", str(p), "--out", str(tmp_path / "out")] + (extra or ["--profile", "tiny"])
    r = _cli(*args)
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and str(p) in lines[0] and needle in lines[0]


def test_cli_unreadable_config(tmp_path):
    r = _cli("--config", str(tmp_path / "missing.toml"))
    assert r.returncode == 2 and "cannot read" in r.stderr and "Traceback" not in r.stderr
