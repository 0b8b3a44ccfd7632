"""--profile: where one epoch's seconds went. The model's training step is decomposed by the step library's
public `decompose` (operators or kernels, classified by kernel_rules.toml, matrix-unit evidence), profiling
as many steps as one epoch has; the epoch's data loading and wall time come from the timed runs themselves
(the profiler is not running then). What is in neither is idle or framework overhead."""

from __future__ import annotations

import statistics
from collections.abc import Callable

import torch

from microbench.decompose.pipeline import DecomposeOptions, decomposition_doc

from .datasets import Dataset, batches
from .rules import TtaModel
from .train import SeedRun, build_model, build_optimizer


def decompose_epoch(spec: TtaModel, ds: Dataset, device: str, on_progress: Callable[[str], None] | None = None) -> dict:
    """The decomposition document of `decompose` for one epoch's worth of steps of this model on a real batch."""
    from microbench.models.step import Workload

    steps = max(1, len(ds.y_train) // spec.batch)
    first = next(batches(ds, spec.batch, torch.Generator().manual_seed(0), torch.device("cpu")))

    def make_inputs(batch, dev):
        return (first[0].to(dev),), first[1].to(dev)

    torch.manual_seed(0)
    wl = Workload(
        name=spec.name,
        model=build_model(spec, ds.num_classes),
        make_inputs=make_inputs,
        loss_fn=torch.nn.functional.cross_entropy,
        optimizer=lambda p: build_optimizer(spec, p),
        channels_last=False,
    )  # our training loop runs the default memory format too
    return decomposition_doc(
        wl,
        DecomposeOptions(
            batch=spec.batch,
            device=device,
            replay=False,
            measure_ceilings=False,
            plot=False,
            timed_steps=steps,
            profiled_steps=steps,
            profiler_warmup_steps=1,
            on_progress=on_progress,
        ),
    )


def epoch_breakdown(runs: list[SeedRun], doc: dict) -> dict:
    """Seconds of a mean epoch: data loading (timed runs), operator classes and matrix-unit time (the
    decomposition, scaled to the epoch's steps), and the rest (idle, framework overhead)."""
    epochs = [e for r in runs for e in r.epochs]
    epoch_s = statistics.fmean(e.train_s for e in epochs)
    data_s = statistics.fmean(e.data_s for e in epochs)
    steps = statistics.fmean(e.steps for e in epochs)
    s = doc["summary"]
    per_class = {c: ms * steps / 1e3 for c, ms in s["time_by_class_ms"].items()}
    busy_s = sum(per_class.values())
    share = s.get("tensor_core_time_share")
    notes = [s["profiled_time_definition"], s["tensor_core_note"]]
    rest = epoch_s - data_s - busy_s
    if rest < 0:
        notes.append(
            f"profiled operator time exceeds the timed epoch minus data loading by {-rest:.3f} s "
            "(profiler overhead): idle shown as 0"
        )
    return {
        "epoch_s": epoch_s,
        "steps_per_epoch": steps,
        "data_loading_s": data_s,
        "step_time_ms": s["step_time_ms"],
        "by_class_s": per_class,
        "busy_s": busy_s,
        "matrix_unit_s": share * s["profiled_time_ms"] * steps / 1e3 if share is not None else None,
        "matrix_unit_share": share,
        "unit": s["profiled_unit"],
        "idle_or_overhead_s": max(0.0, rest),
        "notes": notes,
    }
