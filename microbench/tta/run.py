"""`run`: time-to-accuracy over seeds -> one document (per-epoch records, the statistics, the optional
epoch profile) and rows in the results files (op="tta"), written as each seed finishes."""

from __future__ import annotations

import datetime as _dt
import math
import statistics
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import torch

from microbench.core.conditions import Conditions
from microbench.core.config import load_config
from microbench.core.results import ResultsWriter, TimeToAccuracyRow
from microbench.core.stats import NoiseSettings, summarize
from microbench.models import ModelError

from . import datasets
from .rules import tta_models
from .stats import compare_drops, generalization, summarize_runs
from .train import EpochRecord, SeedRun, train_seed

SCHEMA = "dawnscope.tta/1"
RECIPES_SCHEMA = "dawnscope.tta-recipes/1"
PROVIDER = "microbench.tta.cli"


def _bad(key: str, value, problem: str):
    return ModelError(None, problem, key=key, value=value)


def check_options(model: str, target: float | None, seeds: int, epochs: int | None, threads: int | None):
    known = tta_models()
    if model not in known:
        raise _bad("--model", model, f"unknown model (known: {', '.join(known)})")
    if target is not None and not (isinstance(target, (int, float)) and math.isfinite(target) and 0 < target <= 1):
        raise _bad("--target-accuracy", target, "must be an accuracy in (0, 1]")
    for key, v in (("--seeds", seeds), ("--epochs", epochs), ("--threads", threads)):
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 1):
            raise _bad(key, v, "must be a positive integer")
    return known[model]


def case_shape(model: str, dataset: str, target: float, recipe: str | None = None) -> str:
    return f"{model}/{dataset}/top1>={target:g}" + (f"/{recipe}" if recipe else "")


def choose_precision(spec, dev) -> tuple[object, str | None]:
    """A recipe's bf16 only where the device runs it natively; elsewhere fp32, and a note that says so."""
    if spec.precision == "bf16" and not dev.native_bf16:
        return replace(
            spec, precision="fp32"
        ), f"recipe {spec.recipe} asks for bf16; {dev.name} has no native bf16: fp32"
    return spec, None


def seed_row(run: SeedRun, shape: str, device: str, target: float, dtype: str = "fp32") -> TimeToAccuracyRow:
    ok = run.tta_s is not None
    best = max((e.accuracy for e in run.epochs), default=math.nan)
    t = summarize([run.tta_s * 1e3]).as_dict() if ok else None
    return TimeToAccuracyRow(
        task=shape,
        provider=PROVIDER,
        seed=run.seed,
        device=device,
        dtype=dtype,
        status="ok" if ok else "failed",
        reason="" if ok else f"did not reach {target:g} in {len(run.epochs)} epochs (best {best:.4f})",
        time_ms=t,
        params={
            "seed": run.seed,
            "epochs_to_target": run.epochs_to_target,
            "final_accuracy": run.final_accuracy,
            "target": target,
            "recipe": run.recipe,
            "test_accuracy": run.final_accuracy,
            "new_test_accuracy": run.new_test_accuracy,
        },
    )


def summary_row(
    summary, shape: str, device: str, target: float, runs: list[SeedRun], dtype: str = "fp32", noise=None
) -> TimeToAccuracyRow:
    """The row over the seeds, judged by the one judge (roofline.judge): seeds whose times disagree beyond the
    [noise] thresholds make it `noisy` (the DAWNBench analysis's run-to-run spread, made a verdict)."""
    from microbench.roofline.judge import judge_timing

    hit = [r.tta_s * 1e3 for r in runs if r.tta_s is not None]
    flags = (
        []
        if summary.reached == summary.runs
        else [f"{summary.runs - summary.reached} of {summary.runs} runs did not reach the target"]
    )
    row = TimeToAccuracyRow(
        task=shape,
        provider=PROVIDER,
        device=device,
        dtype=dtype,
        status="ok" if hit else "failed",
        reason="" if hit else "no run reached the target",
        flags=flags,
        params={
            "target": target,
            "recipe": runs[0].recipe if runs else None,
            **_mean_accuracies(runs),
            **summary.as_dict(),
        },
    )
    return judge_timing(row, summarize(hit, noise or NoiseSettings())) if hit else row


def _mean_accuracies(runs: list[SeedRun]) -> dict:
    """The summary row's test and new-test accuracies: means over the seeds (None where not measured)."""
    new = [r.new_test_accuracy for r in runs if r.new_test_accuracy is not None]
    return {
        "test_accuracy": statistics.fmean(r.final_accuracy for r in runs) if runs else None,
        "new_test_accuracy": statistics.fmean(new) if new else None,
    }


def check_recipes(spec, recipes) -> tuple[str | None, ...]:
    recipes = tuple(recipes) or (None,)
    for r in recipes:
        if r is not None and r not in spec.recipes:
            raise _bad("--recipe", r, f"unknown recipe for {spec.name} (recipes: {', '.join(spec.recipes) or 'none'})")
    if len(set(recipes)) != len(recipes):
        raise _bad("--recipe", ",".join(map(str, recipes)), "a recipe named twice")
    return recipes


def run_tta(
    model: str,
    target: float | None = None,
    seeds: int = 3,
    *,
    epochs: int | None = None,
    data: str | Path | None = None,
    dataset: datasets.Dataset | None = None,
    device: str = "auto",
    out: str | Path | None = None,
    include_eval: bool = False,
    threads: int | None = None,
    profile: bool = False,
    recipes=(None,),
    new_test: str | Path | None = None,
    on_epoch: Callable[[SeedRun, EpochRecord], None] | None = None,
    on_progress: Callable[[str], None] | None = None,
    config: str | Path | None = None,
) -> dict:
    """Train `model` (a name of tta.toml) `seeds` times under each recipe of `recipes` (None: the model's keys
    as they are); returns the run document, or with several recipes one document holding a run document per
    recipe and their generalization comparison (and writes the rows into `out`). `dataset`: already loaded
    (else from `data`, with `new_test` the CIFAR-10.1 folder). Bad options raise InputError subclasses."""
    base = check_options(model, target, seeds, epochs, threads)
    recipes = check_recipes(base, recipes)
    target = base.target if target is None else float(target)
    ds = dataset if dataset is not None else datasets.load(base.dataset, data, new_test)
    dev = check_device(device)

    cfg = load_config(config)  # bench.toml (--config): its noise and conditions settings
    look = Conditions(cfg.conditions, gpu_index=0 if dev.is_gpu else None).start()
    saved_threads = torch.get_num_threads()
    writer = None
    try:
        if threads:
            torch.set_num_threads(threads)
        header = _header(base, ds, dev, include_eval)
        if out is not None:
            writer = ResultsWriter(
                out,
                {
                    "hardware": header["hardware"],
                    "software": header["software"],
                    "config": {"profile": f"tta:{base.name}", "sha256": None},
                    "started": header["started"],
                    "notes": [header["timing"]],
                },
            )
        header["noise"] = cfg.noise
        done = [
            _run_recipe(base.with_recipe(r), ds, dev, target, seeds, epochs, include_eval, header, writer, on_epoch)
            for r in recipes
        ]
        docs = [doc for doc, _ in done]
        conditions = look.stop()
        for doc in docs:
            doc["conditions"] = conditions
        if writer:
            writer.set("conditions", conditions)
        if profile:
            _profile(docs[0], done[0][1], base, ds, device, on_progress)
        return docs[0] if len(docs) == 1 else recipes_document(docs)
    finally:
        torch.set_num_threads(saved_threads)
        if writer:
            writer.close()


def check_device(device: str):
    """The device `--device` names, detected; a device that is not here is bad input (one line), found before any
    work is started (the command checks it before its progress bar)."""
    from microbench.core import device as devmod

    try:
        return devmod.detect(device)
    except (RuntimeError, ValueError) as e:
        raise _bad("--device", device, str(e)) from None


def _header(spec, ds, dev, include_eval: bool) -> dict:
    from microbench.core import device as devmod

    return {
        "schema": SCHEMA,
        "model": spec.name,
        "model_class": spec.model,
        "dataset": ds.source,
        "new_test_set": ds.new_source,
        "device": dev.torch_device,
        "hardware": devmod.fingerprint(dev),
        "software": devmod.software(),
        "started": _dt.datetime.now(_dt.timezone.utc).isoformat(),
        "timing": (
            "wall clock from the first batch: data loading, augmentation, copies and training steps; "
            + ("evaluation included" if include_eval else "evaluation after each epoch excluded")
        ),
        "torch_threads": torch.get_num_threads(),
        "source": spec.source,
    }


def _run_recipe(
    spec, ds, dev, target: float, seeds: int, epochs: int | None, include_eval: bool, header: dict, writer, on_epoch
) -> tuple[dict, list[SeedRun]]:
    """Every seed of one recipe: the run document and the runs, its rows written as each seed finishes."""
    spec, precision_note = choose_precision(spec, dev)
    epochs = epochs or spec.epochs
    shape = case_shape(spec.name, ds.name, target, spec.recipe)
    noise = header.get("noise")  # the [noise] thresholds: the judge's, not part of the document
    doc = {
        **{k: v for k, v in header.items() if k != "noise"},
        "recipe": spec.recipe,
        "precision": spec.precision,
        "target": target,
        "epochs": epochs,
        "batch": spec.batch,
        "seeds": seeds,
        "optimizer": spec.optimizer,
        "lr_schedule": {"epochs": spec.lr_epochs, "values": spec.lr_values},
        "notes": [precision_note] if precision_note else [],
        "runs": [],
    }
    runs = []
    for s in range(seeds):
        run = train_seed(spec, ds, s, torch.device(dev.torch_device), target, epochs, include_eval, on_epoch)
        runs.append(run)
        doc["runs"].append(run.as_dict())
        if writer:
            writer.add(seed_row(run, shape, dev.name, target, spec.precision))
    summary = summarize_runs(
        [r.tta_s for r in runs], [r.epochs_to_target for r in runs], [r.final_accuracy for r in runs], target
    )
    doc["summary"] = summary.as_dict()
    if ds.x_new is not None:
        doc["generalization"] = generalization(runs).as_dict()
    if writer:
        writer.add(summary_row(summary, shape, dev.name, target, runs, spec.precision, noise))
    return doc, runs


def _profile(doc: dict, runs: list[SeedRun], spec, ds, device: str, on_progress) -> None:
    from .profile import decompose_epoch, epoch_breakdown

    dec = decompose_epoch(spec, ds, device, on_progress)
    doc["profile"] = epoch_breakdown(runs, dec)
    doc["profile"]["notes"] += dec["notes"][:1]


def recipes_document(docs: list[dict]) -> dict:
    """Several recipes of one model: their run documents and whether the tuned one generalizes worse."""
    by_recipe = {d["recipe"]: d for d in docs}
    out = {"schema": RECIPES_SCHEMA, "model": docs[0]["model"], "recipes": docs}
    if {"tuned", "standard"} <= set(by_recipe) and all("generalization" in d for d in docs):
        out["comparison"] = compare_drops(by_recipe["tuned"]["runs"], by_recipe["standard"]["runs"]).as_dict()
    return out
