"""The public functions behind `microbench.measure`, `microbench.decompose_step` and `microbench.analyze_trace`.

This is the top of the stack beside the commands: it loads the providers (kernels/) that the layers below
only know through the registry, then calls one library per job.
"""
from __future__ import annotations

from pathlib import Path

from microbench.core.config import load_config
from microbench.core.results import ResultRow
from microbench.core.shapes import Case


def _load_providers() -> None:
    import kernels

    kernels.load_all()


def measure(case: Case, providers: list[str] | None = None, *, device: str = "auto", config=None,
            measure_ceilings: bool = False) -> list[ResultRow]:
    """One case through the named providers (default: every registered provider of its op family): checked
    against float64, timed, counted and judged; one row per provider."""
    from microbench.core import device as devmod
    from microbench.harness import registry
    from microbench.harness.ceilings import build_ceilings, machine_ceilings
    from microbench.harness.runner import CaseRunner

    _load_providers()
    cfg = load_config(config)
    dev = devmod.detect(device)
    chosen = registry.for_op(case.family)
    if providers is not None:
        chosen = [p for p in chosen if p.name in providers]
    ceilings = machine_ceilings(dev, cfg, shapes=(case,)) if measure_ceilings else build_ceilings(dev, cfg, False)
    runner = CaseRunner(dev, cfg, ceilings)
    return list(runner.run(case, chosen))


def decompose_step(model, options=None, **kw) -> dict:
    """A model's training step decomposed into kernels or operators (see microbench.step.analysis).
    `options`: a DecomposeOptions; or its fields as keyword arguments (batch=, dtype=, device=, out=, ...),
    which also override those of `options`. An unknown keyword is a TypeError, as for any function."""
    from dataclasses import replace

    from microbench.step.analysis import DecomposeOptions, decompose_step as _decompose_step

    _load_providers()
    if kw.get("providers") is not None:
        kw["providers"] = tuple(kw["providers"])
    return _decompose_step(model, replace(options or DecomposeOptions(), **kw))


def analyze_trace(path: str | Path, config=None, steps: str | None = None, measured: dict | None = None) -> dict:
    """What a profiler trace says about the GPU (see microbench.timeline): a Kineto JSON, an Nsight Systems
    SQLite export or an Nsight Compute CSV. `steps`: the name of the step ranges; `measured`: measured compute
    ceilings, TFLOP/s by precision ({"bf16": 769.0})."""
    from microbench.timeline.analysis import analyze

    return analyze(path, load_config(config), step_range=steps, measured=measured)
