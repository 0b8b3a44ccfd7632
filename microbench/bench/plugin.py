"""The pytest plugin of the benchmark suite (test_suite.py), loaded by a checkout's tests/conftest.py and by
`dawnscope bench`:

- a plain run times nothing (pytest-benchmark's --benchmark-disable): each benchmark runs once, as a correctness
  check; `--benchmark-only` (or --benchmark-enable) times them for real and deselects every other test;
- a run that does not time uses a ceilings cache of its own (never the user's), removed at its end;
- a timed session looks at the machine first, as the commands do (on a busy CPU the ops run on the threads the other
  work leaves free), writes the dawnscope fingerprint and those conditions into pytest-benchmark's machine_info
  (what `compare` and `gate` read back), and ends with our columns of each benchmark and the conditions line."""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest

from microbench import kernels
from microbench.core import device, fingerprint
from microbench.core.conditions import Conditions, busy_advice, conditions_line
from microbench.core.config import DEFAULT_CONFIG, load_config
from microbench.report.benchmark_table import render

CACHE_ENV = "DAWNSCOPE_CACHE_DIR"  # microbench.roofline.ceilings.CACHE_ENV (not imported here: torch-free start)


def pytest_configure(config):
    kernels.load_all()  # the providers register on import; commands do the same (the core never imports kernels/)
    # Runs before pytest-benchmark's own (trylast) pytest_configure reads the options.
    opt = config.option
    timing = hasattr(opt, "benchmark_disable") and (opt.benchmark_only or opt.benchmark_enable)
    if hasattr(opt, "benchmark_disable") and not timing:
        opt.benchmark_disable = True
    if not timing and not os.environ.get(CACHE_ENV):
        # A run that times nothing never reads or writes the user's cached ceilings (nor the checkout): a folder of
        # its own, inherited by the commands its tests start. `--benchmark-only` shares the user's cache with
        # `dawnscope roofline`: one source of ceilings.
        os.environ[CACHE_ENV] = tempfile.mkdtemp(prefix="dawnscope-test-cache-")
        config._dawnscope_cache = os.environ[CACHE_ENV]


def pytest_unconfigure(config):
    # the run's own ceilings cache goes with the session (one folder a run was left in /tmp, hundreds by now)
    folder = getattr(config, "_dawnscope_cache", None)
    if folder:
        shutil.rmtree(folder, ignore_errors=True)


def pytest_collection_modifyitems(config, items):
    """`--benchmark-only`: the tests that are not benchmarks are deselected (one line in the summary), not skipped
    one by one (a line each)."""
    if not getattr(config.option, "benchmark_only", False):
        return
    keep = [i for i in items if "benchmark" in getattr(i, "fixturenames", ())]
    dropped = [i for i in items if "benchmark" not in getattr(i, "fixturenames", ())]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep


def pytest_benchmark_update_machine_info(config, machine_info):
    """Every pytest-benchmark JSON carries the dawnscope fingerprint block (the device it measured, the
    software, the profile and configuration) that `dawnscope compare` and `gate` read back."""
    profile, config_path, device_request = fingerprint.benchmark_selection()
    dev = device.detect(device_request)
    machine_info[fingerprint.BENCHMARK_KEY] = fingerprint.benchmark_block(
        device.fingerprint(dev), device.software(), profile, config_path or DEFAULT_CONFIG
    )
    if (doc := _conditions_doc(config)) is not None:
        machine_info[fingerprint.BENCHMARK_KEY]["conditions"] = doc


def pytest_sessionstart(session):
    """A timed session: look at the machine before the benchmarks, as the commands do; on a busy CPU run the ops
    on the threads the other work leaves free (core.conditions.Conditions.fit_threads)."""
    opt = session.config.option
    if getattr(opt, "benchmark_disable", True):
        return
    import torch

    _, config_path, device_request = fingerprint.benchmark_selection()
    try:
        settings = load_config(config_path).conditions
    except Exception:  # noqa: BLE001 - a bad config is reported by the benchmarks' own collection
        settings = None
    look = Conditions(settings).start()
    if device_request == "cpu" or not torch.cuda.is_available():
        look.fit_threads()
    session.config.dawnscope_conditions = look


def _conditions_doc(config) -> dict | None:
    """The session's conditions, looked at once when first asked (machine_info, then the summary line)."""
    look = getattr(config, "dawnscope_conditions", None)
    if look is None:
        return None
    if getattr(config, "dawnscope_conditions_doc", None) is None:
        config.dawnscope_conditions_doc = look.stop()
    return config.dawnscope_conditions_doc


@pytest.hookimpl(trylast=True)  # after pytest-benchmark's own table
def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """A benchmark session ends with our columns of each benchmark (TFLOP/s, % of ceiling, Tensor Cores, flags)
    and the conditions it ran under (the busy warning when busy)."""
    doc = _conditions_doc(config)
    if doc is None:
        return
    session = getattr(config, "_benchmarksession", None)
    infos = [b.extra_info for b in getattr(session, "benchmarks", []) or [] if getattr(b, "extra_info", None)]
    if infos:
        terminalreporter.write(render(infos, terminalreporter._tw.fullwidth))
    terminalreporter.write_line(
        ("warning: " + busy_advice(doc)) if doc.get("busy") else conditions_line(doc), red=bool(doc.get("busy"))
    )
