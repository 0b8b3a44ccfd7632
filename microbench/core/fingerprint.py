"""The machine fingerprint as it travels in files: one line for captions, and the one block that our
pytest-benchmark plugin (tests/conftest.py) writes into a benchmark JSON's `machine_info` and that
`dawnscope compare` reads back. Both sides call this module, so they cannot drift apart.

No torch here: compare reads files without it (the fingerprint itself is taken by microbench.core.device).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
from pathlib import Path

# machine_info[BENCHMARK_KEY] of a pytest-benchmark JSON: {"hardware", "software", "profile", "config_sha256"}
BENCHMARK_KEY = "dawnscope"
# How `pytest --benchmark-only` is pointed at a profile, a configuration and a device (tests/test_benchmarks.py).
PROFILE_ENV, CONFIG_ENV, DEVICE_ENV = "DAWNSCOPE_PROFILE", "DAWNSCOPE_CONFIG", "DAWNSCOPE_DEVICE"
# ... or at a trace's cases instead of a profile's (roofline --from-trace; docs/replay.md), and how many of them.
TRACE_ENV, TRACE_TOP_ENV = "DAWNSCOPE_TRACE", "DAWNSCOPE_TRACE_TOP"
DEFAULT_BENCHMARK_PROFILE = "quick"


def installed_version(dist: str) -> str | None:
    """The installed version of a distribution (`triton`, `cupy-cuda12x`), None where it is not installed."""
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def fingerprint_line(hardware: dict, software_: dict) -> str:
    """One line for docs and table captions."""
    clock = f", {hardware['clock_mhz']:.0f} MHz" if hardware.get("clock_mhz") else ""
    units = "cores" if hardware["kind"] == "cpu" else ("SMs" if hardware["kind"] == "cuda" else "CUs")
    isa = f", {' '.join(hardware['isa_flags'])}" if hardware.get("isa_flags") else ""
    return (
        f"{hardware['name']} ({hardware['arch']}, {hardware['units']} {units}{clock}, "
        f"{hardware['memory_gib']} GiB{isa}); torch {software_['torch']}, triton {software_['triton']}, "
        f"python {software_['python']}"
    )


def benchmark_selection() -> tuple[str, Path | None, str]:
    """(profile, config file or None for bench.toml, device request) of a `pytest --benchmark-only` run; the
    profile of a trace's cases (DAWNSCOPE_TRACE) is `trace:FILE NAME`."""
    config = os.environ.get(CONFIG_ENV) or None  # empty = unset
    trace = os.environ.get(TRACE_ENV) or None
    profile = f"trace:{Path(trace).name}" if trace else os.environ.get(PROFILE_ENV, DEFAULT_BENCHMARK_PROFILE)
    return profile, Path(config) if config else None, os.environ.get(DEVICE_ENV, "auto")


def trace_selection() -> tuple[Path | None, str | None]:
    """(the trace whose cases `pytest --benchmark-only` runs, or None; DAWNSCOPE_TRACE_TOP as given, or None)."""
    trace = os.environ.get(TRACE_ENV) or None
    return (Path(trace) if trace else None), (os.environ.get(TRACE_TOP_ENV) or None)


def file_sha256(path: str | Path) -> str | None:
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return None


def benchmark_block(hardware: dict, software_: dict, profile: str | None, config_path: str | Path | None) -> dict:
    """What the benchmark plugin writes into machine_info[BENCHMARK_KEY]."""
    return {
        "hardware": hardware,
        "software": software_,
        "profile": profile,
        "config_sha256": file_sha256(config_path) if config_path else None,
    }


def read_benchmark_block(machine_info: dict) -> dict:
    """The block back from a pytest-benchmark `machine_info`: hardware (None when absent or not an object),
    software (an object, maybe empty), profile and config_sha256 as found (the reader checks their types), and
    `key`, where they were (for its error messages). Files written before the block had one name carry
    hardware / software / profile at the top of machine_info."""
    block, key = machine_info.get(BENCHMARK_KEY), f"machine_info.{BENCHMARK_KEY}"
    if not isinstance(block, dict):
        block, key = machine_info, "machine_info"
    hw, sw = block.get("hardware"), block.get("software")
    return {
        "hardware": hw if isinstance(hw, dict) else None,
        "software": dict(sw) if isinstance(sw, dict) else {},
        "profile": block.get("profile"),
        "config_sha256": block.get("config_sha256"),
        "conditions": block.get("conditions") if isinstance(block.get("conditions"), dict) else {},
        "key": key,
    }
