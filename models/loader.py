"""A data loader for a training step, for workloads whose step should take its batch from a loader as a training
loop does (`Workload.make_loader`): the step then calls `next()` on it inside its step range, so the profiler
records the loading (`enumerate(DataLoader)#...__next__`, the range the TensorBoard plugin counts as DataLoader)
and the findings can say how long the step waits on it (docs/findings.md).

The images are synthetic (no downloads), the work per sample is real: each image is made as 8-bit pixels and put
through the CIFAR10 training augmentation of the DAWNBench entries (pad and random crop, random horizontal flip,
scale to [0, 1], normalize per channel), one sample at a time, as torchvision's transforms do.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset

# Samples per epoch: enough that no profiled run of decompose ends an epoch (an epoch's end restarts a loader's
# workers unless they persist; the step restarts the iterator then, models/step.py).
EPOCH_SAMPLES = 1 << 16


class AugmentedImages(Dataset):
    """`length` synthetic images of `input_shape` (C, H, W) with labels, augmented per sample: reflect-pad by
    `pad`, a random H x W crop, a random horizontal flip (`flip`), / 255, normalized. Sample i is the same image
    with the same crop in every worker (its own generator, seeded by i)."""

    def __init__(
        self, input_shape, num_classes: int, pad: int = 4, flip: bool = True, length: int = EPOCH_SAMPLES, seed: int = 0
    ):
        self.shape = tuple(input_shape)
        self.num_classes, self.pad, self.flip, self.length, self.seed = num_classes, pad, flip, length, seed
        channels = self.shape[0]
        self.mean = torch.full((channels, 1, 1), 0.5)
        self.std = torch.full((channels, 1, 1), 0.25)

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        gen = torch.Generator().manual_seed(self.seed * 1_000_003 + i)
        c, h, w = self.shape
        pixels = torch.randint(0, 256, (c, h, w), dtype=torch.uint8, generator=gen)
        x = pixels.float()
        if self.pad:
            x = torch.nn.functional.pad(x[None], (self.pad,) * 4, mode="reflect")[0]
            dy, dx = torch.randint(0, 2 * self.pad + 1, (2,), generator=gen).tolist()
            x = x[:, dy : dy + h, dx : dx + w]
        if self.flip and torch.rand((), generator=gen) < 0.5:
            x = x.flip(-1)
        x = (x / 255.0 - self.mean) / self.std
        return x.contiguous(), int(torch.randint(0, self.num_classes, (), generator=gen))


def worker_settings(num_workers: int) -> dict:
    """The DataLoader keywords for `num_workers` workers: persistent (an epoch's end would otherwise restart them
    inside a step) with two batches in flight each, the fix the dataloader finding prints; none for 0."""
    return {"persistent_workers": True, "prefetch_factor": 2} if num_workers else {}


def augmented_loader(
    input_shape, num_classes: int, num_workers: int = 0, pad: int = 4, flip: bool = True
) -> Callable[[int], DataLoader]:
    """`make_loader(batch)` for Workload.make_loader: a shuffling DataLoader over AugmentedImages, loading in the
    step's own process (`num_workers=0`) or in that many worker processes (persistent, pinned where a GPU is)."""

    def make_loader(batch: int) -> DataLoader:
        data = AugmentedImages(input_shape, num_classes, pad=pad, flip=flip)
        return DataLoader(
            data,
            batch_size=batch,
            shuffle=True,
            drop_last=True,
            num_workers=num_workers,
            pin_memory=torch.cuda.is_available(),
            generator=torch.Generator().manual_seed(0),
            **worker_settings(num_workers),
        )

    return make_loader


def endless(loader) -> Callable[[], object]:
    """next() over `loader` epoch after epoch: a new iterator where one ends (a step's batches, models/step.py; the
    loader probe of decompose). The first iterator is made now, so that a loader's workers start here."""
    batches = iter(loader)

    def next_batch():
        nonlocal batches
        try:
            return next(batches)
        except StopIteration:
            batches = iter(loader)
            return next(batches)

    return next_batch


def with_workers(loader, num_workers: int, pin_memory: bool | None = None) -> DataLoader | None:
    """A copy of `loader` that makes the same batches in `num_workers` persistent worker processes (0: in the
    calling process), for the CPU dataloader finding's fix: the hand-off probe of decompose (decompose/pipeline.py) and
    `decompose --num-workers`; None where `loader` is not a torch DataLoader (a user's own iterable: nothing to
    copy). `pin_memory`: the copy's (None: the loader's own; True: batches in page-locked memory, the pageable_copy
    finding's fix on a GPU)."""
    if not isinstance(loader, DataLoader):
        return None
    common = {
        "collate_fn": loader.collate_fn,
        "num_workers": num_workers,
        "pin_memory": loader.pin_memory if pin_memory is None else pin_memory,
        "worker_init_fn": loader.worker_init_fn,
        **worker_settings(num_workers),
    }
    if isinstance(loader.dataset, IterableDataset):
        return DataLoader(loader.dataset, batch_size=loader.batch_size, drop_last=loader.drop_last, **common)
    return DataLoader(loader.dataset, batch_sampler=loader.batch_sampler, **common)
