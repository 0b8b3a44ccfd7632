"""The data sets of our own runs, held in memory as tensors, and the batches of one epoch.

- digits: scikit-learn's copy of the UCI handwritten digits (1797 8x8 grey images, 10 classes), shipped
  inside the scikit-learn wheel: no download. One fixed stratified 80/20 split (seed 0), so every seed of a
  run is judged on the same test images; the seed changes the initial weights and the batch order.
  A second test set, a stand-in for CIFAR-10.1 (new samples of the same classes from a slightly shifted
  distribution), is made by a fixed procedure: 15 % of the non-test images, stratified (seed 1), are held out
  of training, and each is redrawn through a small random affine map (seed 2: rotation within +-3 degrees,
  scale 0.97-1.03, shift within +-0.15 pixel, bilinear). New images of the same classes, never trained on,
  drawn a little differently (our digits model loses 6-12 points on it; models lose 4-10 on CIFAR-10.1).
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
    x_new: torch.Tensor | None = None  # a second test set drawn anew (CIFAR-10.1, or digits' stand-in)
    y_new: torch.Tensor | None = None
    new_source: str | None = None

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.x_train.shape[1:])


# The digits stand-in for a new test set (module docstring): its share of the non-test images and its seeds.
DIGITS_NEW_SHARE = 0.15
DIGITS_NEW_SPLIT_SEED, DIGITS_NEW_WARP_SEED = 1, 2
DIGITS_WARP = {
    "rotation_deg": 3.0,
    "scale": (0.97, 1.03),
    "shift_px": 0.15,
}  # drops of 6-12 points, as CIFAR-10.1's 4-10


def digits() -> Dataset:
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    d = load_digits()
    x = d.images.astype(np.float32)[:, None, :, :]
    x_tr, x_te, y_tr, y_te = train_test_split(x, d.target, test_size=0.2, random_state=0, stratify=d.target)
    x_tr, x_nw, y_tr, y_nw = train_test_split(
        x_tr, y_tr, test_size=DIGITS_NEW_SHARE, random_state=DIGITS_NEW_SPLIT_SEED, stratify=y_tr
    )
    x_nw = warp_digits(x_nw, np.random.default_rng(DIGITS_NEW_WARP_SEED))
    xtr, (xte, xnw) = _normalise_all(torch.from_numpy(x_tr), torch.from_numpy(x_te), torch.from_numpy(x_nw))
    return Dataset(
        "digits",
        xtr,
        torch.from_numpy(y_tr).long(),
        xte,
        torch.from_numpy(y_te).long(),
        10,
        False,
        "sklearn.datasets.load_digits (UCI ML hand-written digits, 8x8), 80/20 stratified split, seed 0; "
        f"{DIGITS_NEW_SHARE:.0%} of the rest held out as the new test set",
        xnw,
        torch.from_numpy(y_nw).long(),
        f"digits-shifted: a stand-in for CIFAR-10.1 ({len(y_nw)} held-out images, each redrawn by a "
        f"seeded random affine map: {DIGITS_WARP})",
    )


def warp_digits(images: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Each N x 1 x 8 x 8 image through its own small random affine map about the image centre."""
    from scipy.ndimage import affine_transform

    out = np.empty_like(images)
    centre = (np.array(images.shape[2:]) - 1) / 2
    for i, img in enumerate(images):
        angle = np.deg2rad(rng.uniform(-1, 1) * DIGITS_WARP["rotation_deg"])
        scale = rng.uniform(*DIGITS_WARP["scale"])
        shift = rng.uniform(-1, 1, size=2) * DIGITS_WARP["shift_px"]
        inv = np.array([[np.cos(angle), np.sin(angle)], [-np.sin(angle), np.cos(angle)]]) / scale
        offset = centre - inv @ (centre + shift)
        out[i, 0] = affine_transform(img[0], inv, offset=offset, order=1, mode="constant", cval=0.0)
    return out


def _normalise_all(train: torch.Tensor, *others: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Every set normalised with the training set's per-channel statistics."""
    mean = train.mean(dim=(0, 2, 3), keepdim=True)
    std = train.std(dim=(0, 2, 3), keepdim=True).clamp_min(1e-6)
    return (train - mean) / std, [(o - mean) / std for o in others]


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


def cifar10(folder: str | Path, new_test: str | Path | None = None) -> Dataset:
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
    extra = read_cifar101(Path(new_test)) if new_test is not None else None
    xtr, normalised = _normalise_all(x_tr, x_te.float() / 255, *([extra[0].float() / 255] if extra else []))
    return Dataset(
        "cifar10",
        xtr,
        y_tr,
        normalised[0],
        y_te,
        10,
        True,
        f"CIFAR-10 binary version from {root}",
        normalised[1] if extra else None,
        extra[1] if extra else None,
        f"CIFAR-10.1 v6 from {new_test}" if extra else None,
    )


CIFAR101_FILES = ("cifar10.1_v6_data.npy", "cifar10.1_v6_labels.npy")


def read_cifar101(folder: Path) -> tuple[torch.Tensor, torch.Tensor]:
    """CIFAR-10.1 v6 (Recht et al. 2018): uint8 N x 32 x 32 x 3 images and their labels, from `folder`."""
    paths = [folder / n for n in CIFAR101_FILES]
    missing = [p.name for p in paths if not p.is_file()]
    if missing:
        raise InputError(folder, f"missing {', '.join(missing)} (CIFAR-10.1 v6)", key="--new-test")
    try:
        images, labels = (np.load(p, allow_pickle=False) for p in paths)
    except (OSError, ValueError) as e:
        raise InputError(folder, f"cannot read CIFAR-10.1: {e}", key="--new-test") from None
    if images.dtype != np.uint8 or images.ndim != 4 or images.shape[1:] != (32, 32, 3):
        raise InputError(paths[0], f"{images.dtype} {images.shape} is not uint8 N x 32 x 32 x 3", key="--new-test")
    if labels.shape != (images.shape[0],) or labels.min(initial=0) < 0 or labels.max(initial=0) > 9:
        raise InputError(paths[1], "labels are not one CIFAR-10 class (0-9) per image", key="--new-test")
    return torch.from_numpy(images.transpose(0, 3, 1, 2).copy()), torch.from_numpy(labels.astype(np.int64))


def load(name: str, folder: str | Path | None = None, new_test: str | Path | None = None) -> Dataset:
    if name == "digits":
        return digits()
    if name == "cifar10":
        if folder is None:
            raise InputError("--data", "this model trains on CIFAR-10: give --data FOLDER (cifar-10-batches-bin)")
        return cifar10(folder, new_test)
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
        idx = perm[i : i + batch]
        x = ds.x_train[idx]
        if ds.augment:
            x = _augment(x, gen)
        yield x.to(device, non_blocking=True), ds.y_train[idx].to(device, non_blocking=True)
