"""The data sets of our own runs, held in memory as tensors, and the batches of one epoch.

- digits: scikit-learn's copy of the UCI handwritten digits (1797 8x8 grey images, 10 classes), shipped
  inside the scikit-learn wheel: no download. One fixed stratified 80/20 split (seed 0), so every seed of a
  run is judged on the same test images; the seed changes the initial weights and the batch order.
- cifar10: the binary version (cifar-10-batches-bin: data_batch_1..5.bin, test_batch.bin; each record is one
  label byte and 3072 pixel bytes, 3x32x32 channel-major) read from a local folder. Training batches get
  the DAWNBench record entries' augmentation: a random 32x32 crop of the 4-pixel padded image and a random
  horizontal flip.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from microbench.core.errors import InputError

CIFAR_RECORD_BYTES = 1 + 3 * 32 * 32
CIFAR_TRAIN_FILES = tuple(f"data_batch_{i}.bin" for i in range(1, 6))
CIFAR_TEST_FILE = "test_batch.bin"
DATASETS = ("digits", "cifar10")


@dataclass
class Dataset:
    name: str
    x_train: torch.Tensor  # float32, N x C x H x W, normalised with the training set's per-channel statistics
    y_train: torch.Tensor  # int64 class indices
    x_test: torch.Tensor
    y_test: torch.Tensor
    num_classes: int
    augment: bool  # random crop + flip on training batches
    source: str

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.x_train.shape[1:])


def _normalise(train: torch.Tensor, test: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    mean = train.mean(dim=(0, 2, 3), keepdim=True)
    std = train.std(dim=(0, 2, 3), keepdim=True).clamp_min(1e-6)
    return (train - mean) / std, (test - mean) / std


def digits() -> Dataset:
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    d = load_digits()
    x = d.images.astype(np.float32)[:, None, :, :]
    x_tr, x_te, y_tr, y_te = train_test_split(x, d.target, test_size=0.2, random_state=0, stratify=d.target)
    xtr, xte = _normalise(torch.from_numpy(x_tr), torch.from_numpy(x_te))
    return Dataset("digits", xtr, torch.from_numpy(y_tr).long(), xte, torch.from_numpy(y_te).long(), 10, False,
                   "sklearn.datasets.load_digits (UCI ML hand-written digits, 8x8), 80/20 stratified split, seed 0")


def read_cifar_bin(path: Path) -> tuple[torch.Tensor, torch.Tensor]:
    """One file of the CIFAR-10 binary version -> (uint8 images N x 3 x 32 x 32, int64 labels)."""
    try:
        raw = np.fromfile(path, dtype=np.uint8)
    except OSError as e:
        raise InputError(path, f"cannot read: {e.strerror or e}") from None
    if raw.size == 0 or raw.size % CIFAR_RECORD_BYTES:
        raise InputError(path, f"{raw.size} bytes is not a whole number of {CIFAR_RECORD_BYTES}-byte CIFAR-10 records")
    rec = raw.reshape(-1, CIFAR_RECORD_BYTES)
    labels = rec[:, 0].astype(np.int64)
    if labels.max() > 9:
        bad = int(np.argmax(labels > 9))
        raise InputError(path, "label byte is not a CIFAR-10 class (0-9)", key=f"record {bad}", value=int(labels[bad]))
    images = rec[:, 1:].reshape(-1, 3, 32, 32)
    return torch.from_numpy(images.copy()), torch.from_numpy(labels)


def cifar10(folder: str | Path) -> Dataset:
    root = Path(folder)
    if (root / "cifar-10-batches-bin").is_dir():
        root = root / "cifar-10-batches-bin"
    if not root.is_dir():
        raise InputError(root, "no such folder (give the cifar-10-batches-bin folder or its parent)", key="--data")
    missing = [n for n in (*CIFAR_TRAIN_FILES, CIFAR_TEST_FILE) if not (root / n).is_file()]
    if missing:
        raise InputError(root, f"missing {', '.join(missing)} (the binary version of CIFAR-10)", key="--data")
    parts = [read_cifar_bin(root / n) for n in CIFAR_TRAIN_FILES]
    x_te, y_te = read_cifar_bin(root / CIFAR_TEST_FILE)
    x_tr = torch.cat([p[0] for p in parts]).float() / 255
    y_tr = torch.cat([p[1] for p in parts])
    xtr, xte = _normalise(x_tr, x_te.float() / 255)
    return Dataset("cifar10", xtr, y_tr, xte, y_te, 10, True, f"CIFAR-10 binary version from {root}")


def load(name: str, folder: str | Path | None = None) -> Dataset:
    if name == "digits":
        return digits()
    if name == "cifar10":
        if folder is None:
            raise InputError("--data", "this model trains on CIFAR-10: give --data FOLDER (cifar-10-batches-bin)")
        return cifar10(folder)
    raise InputError(None, f"unknown data set (known: {', '.join(DATASETS)})", key="dataset", value=name)


def _augment(x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """Random crop of the 4-pixel reflect-padded image, then a random horizontal flip, per image."""
    n, _, h, w = x.shape
    padded = torch.nn.functional.pad(x, (4, 4, 4, 4), mode="reflect")
    dy = torch.randint(0, 9, (n,), generator=gen)
    dx = torch.randint(0, 9, (n,), generator=gen)
    rows = (dy[:, None] + torch.arange(h))[:, None, :, None].expand(n, x.shape[1], h, w + 8)
    cropped = padded.gather(2, rows)
    cols = (dx[:, None] + torch.arange(w))[:, None, None, :].expand(n, x.shape[1], h, w)
    cropped = cropped.gather(3, cols)
    flip = torch.rand(n, generator=gen) < 0.5
    cropped[flip] = cropped[flip].flip(3)
    return cropped


def batches(ds: Dataset, batch: int, gen: torch.Generator, device: torch.device):
    """One epoch of shuffled training batches (the last partial batch dropped, as the entries did)."""
    perm = torch.randperm(len(ds.y_train), generator=gen)
    for i in range(0, len(perm) - batch + 1, batch):
        idx = perm[i:i + batch]
        x = ds.x_train[idx]
        if ds.augment:
            x = _augment(x, gen)
        yield x.to(device, non_blocking=True), ds.y_train[idx].to(device, non_blocking=True)
