"""`run`: time-to-accuracy over seeds -> one document (per-epoch records, the statistics, the optional
epoch profile) and rows in the results files (op="tta"), written as each seed finishes."""
from __future__ import annotations

import datetime as _dt
import math
from pathlib import Path
from typing import Callable

import torch

from microbench.core.results import ResultsWriter, TimeToAccuracyRow
from microbench.core.stats import summarize
from . import datasets
from .rules import tta_models
from .stats import summarize_runs
from .train import EpochRecord, SeedRun, train_seed

SCHEMA = "dawnscope.tta/1"
PROVIDER = "microbench.tta"


def _bad(key: str, value, problem: str):
    from models import ModelError

    return ModelError(None, problem, key=key, value=value)


def check_options(model: str, target: float | None, seeds: int, epochs: int | None, threads: int | None):
    known = tta_models()
    if model not in known:
        raise _bad("--model", model, f"unknown model (known: {', '.join(known)})")
    if target is not None and not (isinstance(target, (int, float)) and math.isfinite(target) and 0 < target <= 1):
        raise _bad("--target", target, "must be an accuracy in (0, 1]")
    for key, v in (("--seeds", seeds), ("--epochs", epochs), ("--threads", threads)):
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 1):
            raise _bad(key, v, "must be a positive integer")
    return known[model]


def case_shape(model: str, dataset: str, target: float) -> str:
    return f"{model}/{dataset}/top1>={target:g}"


def seed_row(run: SeedRun, shape: str, device: str, target: float) -> TimeToAccuracyRow:
    ok = run.tta_s is not None
    best = max((e.accuracy for e in run.epochs), default=math.nan)
    t = summarize([run.tta_s * 1e3]).as_dict() if ok else None
    return TimeToAccuracyRow(task=shape, provider=PROVIDER, seed=run.seed, device=device,
                             status="ok" if ok else "failed",
                             reason="" if ok else f"did not reach {target:g} in {len(run.epochs)} epochs (best {best:.4f})",
                             time_ms=t,
                             params={"seed": run.seed, "epochs_to_target": run.epochs_to_target,
                                     "final_accuracy": run.final_accuracy, "target": target})


def summary_row(summary, shape: str, device: str, target: float, runs: list[SeedRun]) -> TimeToAccuracyRow:
    hit = [r.tta_s * 1e3 for r in runs if r.tta_s is not None]
    flags = [] if summary.reached == summary.runs else [f"{summary.runs - summary.reached} of {summary.runs} runs "
                                                        "did not reach the target"]
    return TimeToAccuracyRow(task=shape, provider=PROVIDER, device=device,
                             status="ok" if hit else "failed", reason="" if hit else "no run reached the target",
                             time_ms=summarize(hit).as_dict() if hit else None, flags=flags,
                             params={"target": target, **summary.as_dict()})


def run_tta(model: str, target: float | None = None, seeds: int = 3, *, epochs: int | None = None,
            data: str | Path | None = None, dataset: datasets.Dataset | None = None, device: str = "auto", out: str | Path | None = None,
            include_eval: bool = False, threads: int | None = None, profile: bool = False,
            on_epoch: Callable[[SeedRun, EpochRecord], None] | None = None,
            on_progress: Callable[[str], None] | None = None) -> dict:
    """Train `model` (a name of tta.toml) `seeds` times; returns the run document (and writes the files
    into `out`). `dataset`: already loaded (else from `data`). Bad options raise InputError subclasses."""
    from microbench.core import device as devmod

    spec = check_options(model, target, seeds, epochs, threads)
    target = spec.target if target is None else float(target)
    epochs = epochs or spec.epochs
    ds = dataset if dataset is not None else datasets.load(spec.dataset, data)
    try:
        dev = devmod.detect(device)
    except (RuntimeError, ValueError) as e:
        raise _bad("--device", device, str(e)) from None
    shape = case_shape(spec.name, ds.name, target)
    saved_threads = torch.get_num_threads()
    writer = None
    doc = {"schema": SCHEMA, "model": spec.name, "model_class": spec.model, "dataset": ds.source,
           "target": target, "epochs": epochs, "batch": spec.batch, "seeds": seeds, "device": dev.torch_device,
           "hardware": devmod.fingerprint(dev), "software": devmod.software(),
           "started": _dt.datetime.now(_dt.timezone.utc).isoformat(),
           "timing": ("wall clock from the first batch: data loading, augmentation, copies and training steps; "
                      + ("evaluation included" if include_eval else "evaluation after each epoch excluded")),
           "optimizer": spec.optimizer, "lr_schedule": {"epochs": spec.lr_epochs, "values": spec.lr_values},
           "source": spec.source, "runs": []}
    try:
        if threads:
            torch.set_num_threads(threads)
        doc["torch_threads"] = torch.get_num_threads()
        if out is not None:
            writer = ResultsWriter(out, {"hardware": doc["hardware"], "software": doc["software"],
                                         "config": {"profile": f"tta:{spec.name}", "sha256": None},
                                         "started": doc["started"], "notes": [doc["timing"]]})
        runs = []
        for s in range(seeds):
            run = train_seed(spec, ds, s, torch.device(dev.torch_device), target, epochs, include_eval, on_epoch)
            runs.append(run)
            doc["runs"].append(run.as_dict())
            if writer:
                writer.add(seed_row(run, shape, dev.name, target))
        summary = summarize_runs([r.tta_s for r in runs], [r.epochs_to_target for r in runs],
                                 [r.final_accuracy for r in runs], target)
        doc["summary"] = summary.as_dict()
        if writer:
            writer.add(summary_row(summary, shape, dev.name, target, runs))
        if profile:
            from .profile import decompose_epoch, epoch_breakdown

            dec = decompose_epoch(spec, ds, device, on_progress)
            doc["profile"] = epoch_breakdown(runs, dec)
            doc["profile"]["notes"] += dec["notes"][:1]
        return doc
    finally:
        torch.set_num_threads(saved_threads)
        if writer:
            writer.close()
