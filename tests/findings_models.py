"""--model factories for the before/after pairs of docs/findings.md ("Checks"): the DAWNBench ResNet-9 as the table
builds it, with one setting changed (`python -m microbench.decompose --model tests.findings_models:resnet9_nchw`)."""

from __future__ import annotations

import dataclasses


def resnet9_nchw():
    """ResNet-9 in NCHW: the table's resnet9 runs channels_last (models/benchmarks.toml); this is its "before"."""
    from microbench import models

    return dataclasses.replace(models.load("resnet9"), channels_last=False)


def matmul_mlp():
    """Two 1024-wide linear layers at batch 256 (the test's pair): GEMM-dominated, so its fp32 step's matrix work
    is most of the step on any CPU, and the bf16 autocast finding has something to move."""
    import torch
    from torch import nn

    def make_inputs(batch: int, device):
        gen = torch.Generator().manual_seed(1)
        x = torch.randn(batch, 1024, generator=gen).to(device)
        return x, torch.randn(batch, 1024, generator=gen).to(device)

    model = nn.Sequential(nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 1024))
    return model, make_inputs, nn.functional.mse_loss


def _digits_with_loader(num_workers: int):
    from torch import nn

    from microbench.models.digits import NUM_CLASSES, DigitsNet
    from microbench.models.loader import augmented_loader
    from microbench.models.step import Workload

    return Workload(
        name=f"digits_loader_w{num_workers}",
        model=DigitsNet(),
        make_inputs=None,
        loss_fn=nn.functional.cross_entropy,
        make_loader=augmented_loader((1, 8, 8), NUM_CLASSES, num_workers=num_workers, pad=1, flip=False),
    )


def digits_loader():
    """The 8x8 digits CNN (models/digits.py) taking each batch from a DataLoader that augments every sample in the
    step's own process (num_workers=0): the DataLoader pair's "before" (docs/findings.md)."""
    return _digits_with_loader(0)


def digits_loader_worker_core():
    """The fix as the CPU finding gives it: one persistent DataLoader worker, and the step's own operators on the
    remaining cores (torch.set_num_threads(cores - 1)), so that the worker has a core of its own."""
    import os

    import torch

    torch.set_num_threads(max(len(os.sched_getaffinity(0)) - 1, 1))
    return _digits_with_loader(1)


def digits_loader_one_thread():
    """The "before" with the step's operators on one thread (torch.set_num_threads(1), as where several processes
    share a machine): the loading stays in the step's process while a core is free."""
    import torch

    torch.set_num_threads(1)
    return _digits_with_loader(0)


def digits_loader_two_workers():
    """The fix as commonly written, without regard to cores: two workers beside the step's own threads."""
    return _digits_with_loader(2)


def _small_cifar_with_loader(num_workers: int):
    """A two-convolution CNN on CIFAR-sized images (3 x 32 x 32), each batch from a DataLoader that puts every sample
    through the CIFAR10 training augmentation (pad 4, random crop, flip, normalize): a second loader and model for
    the DataLoader checks, held out from the digits pairs the CPU rule was shaped on (docs/findings.md)."""
    from torch import nn

    from microbench.models.loader import augmented_loader
    from microbench.models.step import Workload

    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(32 * 8 * 8, 10),
    )
    return Workload(
        name=f"small_cifar_loader_w{num_workers}",
        model=model,
        make_inputs=None,
        loss_fn=nn.functional.cross_entropy,
        make_loader=augmented_loader((3, 32, 32), 10, num_workers=num_workers),
    )


def small_cifar_loader_one_thread():
    """The "before": one thread, the CIFAR augmentation in the step's own process."""
    import torch

    torch.set_num_threads(1)
    return _small_cifar_with_loader(0)


def small_cifar_loader_worker_core():
    """The CPU finding's fix: one persistent worker, the step's operators on the remaining cores."""
    import os

    import torch

    torch.set_num_threads(max(len(os.sched_getaffinity(0)) - 1, 1))
    return _small_cifar_with_loader(1)


class _Spectrograms:
    """One-second 8 kHz clips made per sample (a few tones and noise, a random gain and time shift) and turned into
    a normalized log-magnitude spectrogram in the loader (STFT, 256-point window, hop 128: 129 x 63), as audio
    pipelines do: a third loader and model for the DataLoader checks, of another kind than the image ones, written
    after the CPU rule and its ranges were committed (docs/findings.md)."""

    RATE, CLASSES = 8000, 10

    def __len__(self) -> int:
        return 1 << 16

    def __getitem__(self, i: int):
        import torch

        gen = torch.Generator().manual_seed(i)
        label = int(torch.randint(0, self.CLASSES, (), generator=gen))
        t = torch.arange(self.RATE) / self.RATE
        tones = 200.0 * (label + 1) * torch.rand(3, 1, generator=gen).add(0.5)
        clip = torch.sin(2 * torch.pi * tones * t).sum(0) + 0.3 * torch.randn(self.RATE, generator=gen)
        clip = torch.roll(
            clip * torch.empty(()).uniform_(0.5, 1.5, generator=gen),
            int(torch.randint(0, self.RATE // 10, (), generator=gen)),
        )
        spec = torch.stft(clip, 256, hop_length=128, window=torch.hann_window(256), return_complex=True).abs()
        spec = spec.add(1e-3).log()
        return ((spec - spec.mean()) / spec.std())[None], label


def spectrogram_loader():
    """A two-convolution CNN on spectrograms made per sample in a DataLoader in the step's own process (the
    "before"; `decompose --num-workers 1` and `pair --workers-after 1` make the "after")."""
    import torch
    from torch import nn
    from torch.utils.data import DataLoader

    from microbench.models.step import Workload

    model = nn.Sequential(
        nn.Conv2d(1, 16, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.Conv2d(16, 32, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(32, _Spectrograms.CLASSES),
    )
    return Workload(
        name="spectrogram_loader",
        model=model,
        make_inputs=None,
        loss_fn=nn.functional.cross_entropy,
        make_loader=lambda batch: DataLoader(
            _Spectrograms(), batch_size=batch, shuffle=True, drop_last=True, generator=torch.Generator().manual_seed(0)
        ),
    )


class _Reviews:
    """Short synthetic product reviews made per sample (a seeded choice of words, numbers and punctuation) and
    tokenized in the loader as a bag-of-words text classifier's input pipeline does: lower-cased, split, stripped of
    punctuation, each word and bigram hashed into a fixed vocabulary, cut or padded to a fixed length. Pure Python
    per sample: a fourth loader for the DataLoader checks, of another kind than the image and audio ones, written
    after the CPU rule and its ranges were committed (docs/findings.md, check 19)."""

    WORDS = (
        "the",
        "battery",
        "screen",
        "lasted",
        "broke",
        "after",
        "two",
        "weeks",
        "great",
        "terrible",
        "price",
        "shipping",
        "was",
        "slow",
        "fast",
        "would",
        "buy",
        "again",
        "never",
        "works",
        "as",
        "described",
        "not",
        "worth",
        "it",
        "excellent",
        "quality",
        "cheap",
        "plastic",
        "love",
        "this",
        "product",
        "returned",
    )
    BUCKETS, LENGTH, CLASSES = 1 << 16, 256, 4

    def __len__(self) -> int:
        return 1 << 16

    def __getitem__(self, i: int):
        import random
        import zlib

        import torch

        rng = random.Random(i)
        label = rng.randrange(self.CLASSES)
        words = [rng.choice(self.WORDS) + rng.choice(("", "", "", ",", ".", "!")) for _ in range(rng.randint(80, 160))]
        words[rng.randrange(len(words))] = f"{rng.randint(1, 99)}/10"
        tokens = [w.strip(",.!").lower() for w in " ".join(words).split()]
        grams = tokens + [a + " " + b for a, b in zip(tokens, tokens[1:])]
        ids = [zlib.crc32(g.encode()) % (self.BUCKETS - 1) + 1 for g in grams][: self.LENGTH]
        ids += [0] * (self.LENGTH - len(ids))  # 0: padding, left out of the bag (padding_idx)
        return torch.tensor(ids), label


def text_loader():
    """A bag-of-words classifier (an EmbeddingBag of the hashed words and bigrams, then a two-layer MLP) taking its
    batches from a DataLoader that tokenizes every review in the step's own process (the "before"; `decompose
    --num-workers 1` and `pair --workers-after 1` make the "after")."""
    import torch
    from torch import nn
    from torch.utils.data import DataLoader

    from microbench.models.step import Workload

    class BagOfWords(nn.Module):
        def __init__(self):
            super().__init__()
            self.bag = nn.EmbeddingBag(_Reviews.BUCKETS, 64, mode="mean", padding_idx=0)
            self.mlp = nn.Sequential(
                nn.Linear(64, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, _Reviews.CLASSES)
            )

        def forward(self, ids):
            return self.mlp(self.bag(ids))

    return Workload(
        name="text_loader",
        model=BagOfWords(),
        make_inputs=None,
        loss_fn=nn.functional.cross_entropy,
        make_loader=lambda batch: DataLoader(
            _Reviews(), batch_size=batch, shuffle=True, drop_last=True, generator=torch.Generator().manual_seed(0)
        ),
    )
