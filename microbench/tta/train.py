"""Our own time-to-accuracy runs: train a model of tta.toml on its data set for its fixed budget of epochs,
once per seed, and read each run's time-to-accuracy off the first epoch whose test accuracy reaches the
target, as DAWNBench read its entries.

The clock (wall time, the device synchronised before each reading) starts at the first batch and counts
everything training does: batch assembly, augmentation, copies to the device, forward, backward, optimizer.
Evaluation after each epoch is excluded (the clock stops for it) unless `include_eval`; either way the
document says which. Building the model and loading the data set into memory are not counted.
"""

from __future__ import annotations

import importlib
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import numpy as np
import torch
from torch import nn

from .datasets import Dataset, batches
from .rules import TtaModel


@dataclass
class EpochRecord:
    epoch: int
    elapsed_s: float  # the time-to-accuracy clock at the end of this epoch
    accuracy: float  # test accuracy after this epoch, 0..1
    train_loss: float  # mean over the epoch's steps
    data_s: float  # of the epoch's training time: waiting for batches (assembly, augmentation, copy)
    train_s: float  # the epoch's training time (data included, evaluation excluded)
    eval_s: float
    steps: int


@dataclass
class SeedRun:
    seed: int
    epochs: list[EpochRecord] = field(default_factory=list)
    tta_s: float | None = None
    epochs_to_target: int | None = None
    recipe: str | None = None
    new_test_accuracy: float | None = None  # the final model on the second test set, if the data set has one

    @property
    def final_accuracy(self) -> float:
        return self.epochs[-1].accuracy if self.epochs else math.nan

    def as_dict(self) -> dict:
        return {
            "seed": self.seed,
            "recipe": self.recipe,
            "tta_s": self.tta_s,
            "epochs_to_target": self.epochs_to_target,
            "final_accuracy": self.final_accuracy,
            "test_accuracy": self.final_accuracy,
            "new_test_accuracy": self.new_test_accuracy,
            "epochs": [asdict(e) for e in self.epochs],
        }


def build_model(spec: TtaModel, num_classes: int) -> nn.Module:
    module, _, cls = spec.model.partition(":")
    return getattr(importlib.import_module(module), cls)(num_classes=num_classes)


def build_optimizer(spec: TtaModel, params) -> torch.optim.Optimizer:
    opt = dict(spec.optimizer)
    cls = getattr(torch.optim, opt.pop("name"))
    return cls(params, lr=float(spec.lr_values[0]), **opt)


def lr_at(spec: TtaModel, epoch: float) -> float:
    """The piecewise-linear schedule of tta.toml at a (fractional) epoch."""
    return float(np.interp(epoch, spec.lr_epochs, spec.lr_values))


@torch.no_grad()
def evaluate(model: nn.Module, ds: Dataset, device: torch.device, batch: int = 1000, new: bool = False) -> float:
    """Top-1 accuracy on the test set (or on the second test set drawn anew), in fp32."""
    x, y = (ds.x_new, ds.y_new) if new else (ds.x_test, ds.y_test)
    model.eval()
    correct = 0
    for i in range(0, len(y), batch):
        out = model(x[i : i + batch].to(device))
        correct += int((out.argmax(1).cpu() == y[i : i + batch]).sum())
    model.train()
    return correct / len(y)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def train_epoch(model, opt, spec: TtaModel, ds: Dataset, epoch: int, gen, device) -> tuple[float, float, int]:
    """One epoch of training: (mean loss, seconds waiting for batches, steps)."""
    steps_per_epoch = max(1, len(ds.y_train) // spec.batch)
    data_s, losses, step = 0.0, [], 0
    it = batches(ds, spec.batch, gen, device)
    while True:
        t0 = time.perf_counter()
        nxt = next(it, None)
        data_s += time.perf_counter() - t0
        if nxt is None:
            break
        x, y = nxt
        for g in opt.param_groups:
            g["lr"] = lr_at(spec, epoch + step / steps_per_epoch)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=spec.precision == "bf16"):
            loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.detach())
        step += 1
    return float(torch.stack(losses).mean()) if losses else math.nan, data_s, step


def train_seed(
    spec: TtaModel,
    ds: Dataset,
    seed: int,
    device: torch.device,
    target: float,
    epochs: int,
    include_eval: bool = False,
    on_epoch: Callable[[SeedRun, EpochRecord], None] | None = None,
) -> SeedRun:
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    model = build_model(spec, ds.num_classes).to(device).train()
    opt = build_optimizer(spec, model.parameters())
    run = SeedRun(seed, recipe=spec.recipe)
    clock = 0.0
    for epoch in range(epochs):
        _sync(device)
        t0 = time.perf_counter()
        loss, data_s, steps = train_epoch(model, opt, spec, ds, epoch, gen, device)
        _sync(device)
        t1 = time.perf_counter()
        acc = evaluate(model, ds, device)
        eval_s = time.perf_counter() - t1
        clock += (t1 - t0) + (eval_s if include_eval else 0.0)
        rec = EpochRecord(epoch + 1, clock, acc, loss, data_s, t1 - t0, eval_s, steps)
        run.epochs.append(rec)
        if run.tta_s is None and acc >= target:
            run.tta_s, run.epochs_to_target = clock, epoch + 1
        if on_epoch:
            on_epoch(run, rec)
    if ds.x_new is not None:
        run.new_test_accuracy = evaluate(model, ds, device, new=True)
    return run
