"""A training step per model: forward, loss, backward, optimizer step, as the benchmark trained (SGD with
momentum for the CNNs, Adam for the Transformer and NCF), with optional mixed precision (bf16 or fp16
autocast; a gradient scaler for fp16) and channels-last memory format for the CNNs.

A `Workload` is what a model factory returns: the model, an input maker, the loss and the optimizer.
`TrainingStep` binds it to a device, a batch size and a precision; calling it runs one step inside the
step and phase ranges of `models.ranges.StepRanges` (when given).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from microbench.core import dtypes

from .loader import endless, with_workers
from .ranges import LOSS_LAYER, STEP_RANGE, StepRanges

# Step dtype -> the autocast dtype, None for a step run as stored (microbench.core.dtypes decides which).
STEP_DTYPES = {
    name: (dtypes.torch_dtype(name) if dtypes.get(name).step == "autocast" else None) for name in dtypes.STEP_DTYPES
}
# Without benchmark facts (a model from outside the project): plain SGD with momentum.
DEFAULT_OPTIMIZER = {"name": "SGD", "lr": 0.01, "momentum": 0.9}


@dataclass(frozen=True)
class BenchmarkFacts:
    """One model's entry of models/benchmarks.toml."""

    name: str
    title: str
    module: str
    dataset: str
    task: str
    input_shape: tuple[int, ...]
    target_metric: str
    reference_batch: int
    cpu_batch: int
    channels_last: bool
    optimizer: dict
    source: str

    def as_dict(self) -> dict:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.__dict__.items()}


@dataclass
class Workload:
    """What a model factory provides.

    make_inputs(batch, device) -> (inputs, target): `inputs` is a tuple of positional arguments of the
    model (or one tensor); `target` is what `loss_fn(output, target)` compares against. With `loss_fn`
    None the model's output itself must be the (scalar) loss and `target` is ignored.
    """

    name: str
    model: nn.Module
    make_inputs: Callable[[int, torch.device], tuple[Any, Any]]
    loss_fn: Callable[[Any, Any], torch.Tensor] | None = None
    optimizer: Callable[[Iterable[nn.Parameter]], torch.optim.Optimizer] | None = None
    facts: BenchmarkFacts | None = None
    channels_last: bool | None = None  # None: from the facts (False without facts)
    # make_loader(batch) -> an iterable of (inputs, target) batches (a DataLoader: models/loader.py). Given, each
    # step takes its batch from it inside the step range, loading included; None: the inputs are made once.
    make_loader: Callable[[int], Iterable[tuple[Any, Any]]] | None = None

    def build_optimizer(self, params) -> torch.optim.Optimizer:
        if self.optimizer is not None:
            return self.optimizer(params)
        spec = dict(self.facts.optimizer if self.facts else DEFAULT_OPTIMIZER)
        cls = getattr(torch.optim, spec.pop("name"))
        if "betas" in spec:
            spec["betas"] = tuple(spec["betas"])
        return cls(params, **spec)

    @property
    def uses_channels_last(self) -> bool:
        if self.channels_last is not None:
            return self.channels_last
        return bool(self.facts and self.facts.channels_last)


def image_inputs(input_shape, num_classes: int):
    """Input maker for image classifiers: standard-normal images and random class labels."""

    def make_inputs(batch: int, device) -> tuple[tuple, torch.Tensor]:
        gen = torch.Generator().manual_seed(0)
        x = torch.randn((batch, *input_shape), generator=gen)
        y = torch.randint(0, num_classes, (batch,), generator=gen)
        return (x.to(device),), y.to(device)

    return make_inputs


def default_loss(output, target) -> torch.Tensor:
    """The loss for a factory that gives none: the model's output when there is no target (it must be a
    scalar), cross-entropy against integer targets (class indices), mean squared error otherwise."""
    if target is None:
        if not (isinstance(output, torch.Tensor) and output.dim() == 0):
            raise TypeError(
                "no target and no loss_fn: the model's output must be a scalar loss, "
                f"got {type(output).__name__} {tuple(getattr(output, 'shape', ()))}"
            )
        return output
    if isinstance(target, torch.Tensor) and not target.is_floating_point():
        return nn.functional.cross_entropy(output, target)
    return nn.functional.mse_loss(output, target.to(output.dtype) if isinstance(target, torch.Tensor) else target)


def _as_tuple(inputs) -> tuple:
    return inputs if isinstance(inputs, tuple) else (inputs,)


class NoDataLoader(ValueError):
    """Workers asked for (TrainingStep(num_workers=...)) of a workload that loads from no torch DataLoader."""


def _with_workers(workload: Workload, loader, num_workers: int, pin_memory: bool | None = None):
    """`loader` with `num_workers` workers (the dataloader finding's fix) and `pin_memory` (None: its own), or
    ValueError naming why it cannot be."""
    if loader is None:
        raise NoDataLoader(
            f"workload {workload.name!r} has no DataLoader: its inputs are made once, in memory "
            "(a workload takes its batches from a loader through make_loader: models/loader.py)"
        )
    copy = with_workers(loader, num_workers, pin_memory)
    if copy is None:
        raise NoDataLoader(
            f"workload {workload.name!r} loads from a {type(loader).__name__}, not a torch DataLoader: "
            "no workers to set"
        )
    return copy


class TrainingStep:
    """One training step of a workload on a device, batch size and precision (`fp32`, `bf16`, `fp16`).

    fp32 means IEEE fp32: TF32 is switched off for the step (a GPU would otherwise run convolutions on
    TF32 Tensor Cores by default, and "fp32" would not say what ran). The inputs are made once, so every
    step trains on the same synthetic batch: the work per step is what matters here, not convergence. A
    workload with a loader (`make_loader`) takes each step's batch from it instead, inside the step range.
    """

    def __init__(
        self,
        workload: Workload,
        batch: int,
        device: torch.device | str,
        dtype: str = "fp32",
        ranges: StepRanges | None = None,
        num_workers: int | None = None,
        pin_memory: bool | None = None,
    ):
        if dtype not in STEP_DTYPES:
            raise ValueError(f"unknown dtype {dtype!r} (use {', '.join(STEP_DTYPES)})")
        self.workload = workload
        self.device = torch.device(device)
        self.dtype = dtype
        self.batch = batch
        self.ranges = ranges
        model = workload.model.to(self.device)
        if workload.uses_channels_last:
            model = model.to(memory_format=torch.channels_last)
        self.model = model.train()
        self.loader = workload.make_loader(batch) if workload.make_loader is not None else None
        if num_workers is not None or pin_memory is not None:  # the loader's own workers where only pinning changes
            workers = num_workers if num_workers is not None else getattr(self.loader, "num_workers", 0)
            self.loader = _with_workers(workload, self.loader, workers, pin_memory)
        self._next = endless(self.loader) if self.loader is not None else None
        if self.loader is None:
            self._use(*workload.make_inputs(batch, self.device))
        self.loss_fn = workload.loss_fn or default_loss
        self.optimizer = workload.build_optimizer(self.model.parameters())
        self.scaler = torch.amp.GradScaler(self.device.type) if dtype == "fp16" else None
        self.last_loss: torch.Tensor | None = None
        # Called as the last thing inside the `step` range (a profiled step: torch.cuda.synchronize), so that
        # the range closes when the GPU has finished the step, not when the CPU has launched it.
        self.sync_at_end = None

    def _use(self, inputs, target) -> None:
        self.inputs = tuple(self._layout(t) for t in _as_tuple(inputs))
        self.target = target

    def _next_batch(self) -> None:
        """The loader's next batch, moved to the device (from pinned memory without blocking where it is pinned);
        at an epoch's end the loader starts the next one."""
        inputs, target = self._next()

        def move(t):
            return t.to(self.device, non_blocking=True) if isinstance(t, torch.Tensor) else t

        self._use(tuple(move(t) for t in _as_tuple(inputs)), move(target))

    def _layout(self, t):
        if self.workload.uses_channels_last and isinstance(t, torch.Tensor) and t.dim() == 4 and t.is_floating_point():
            return t.contiguous(memory_format=torch.channels_last)
        return t

    def _range(self, name: str):
        return self.ranges.phase(name) if self.ranges is not None else contextlib.nullcontext()

    def __call__(self, load: bool = True) -> None:
        """One step; `load=False` trains on the batch it has, without taking the loader's next (decompose's loader
        probe runs that between its timed batches)."""
        from microbench.core.tf32 import tf32_allowed

        autocast = torch.autocast(
            self.device.type,
            dtype=STEP_DTYPES[self.dtype] or torch.bfloat16,
            enabled=STEP_DTYPES[self.dtype] is not None,
        )
        loss_range = self.ranges.layer(LOSS_LAYER) if self.ranges is not None else contextlib.nullcontext()
        with tf32_allowed(False), self._range(STEP_RANGE):
            if self.loader is not None and load:
                self._next_batch()
            with self._range("forward"):
                with autocast:
                    output = self.model(*self.inputs)
                    with loss_range:
                        loss = self.loss_fn(output, self.target)
            with self._range("backward"):
                (self.scaler.scale(loss) if self.scaler is not None else loss).backward()
            with self._range("optimizer"):
                if self.scaler is not None:
                    self.scaler.step(self.optimizer)
                    self.scaler.update()
                else:
                    self.optimizer.step()
                self.optimizer.zero_grad(set_to_none=True)
            if self.sync_at_end is not None:
                self.sync_at_end()
        self.last_loss = loss.detach()
