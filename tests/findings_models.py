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

    return Workload(name=f"digits_loader_w{num_workers}", model=DigitsNet(), make_inputs=None,
                    loss_fn=nn.functional.cross_entropy,
                    make_loader=augmented_loader((1, 8, 8), NUM_CLASSES, num_workers=num_workers, pad=1, flip=False))


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

    model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Flatten(), nn.Linear(32 * 8 * 8, 10))
    return Workload(name=f"small_cifar_loader_w{num_workers}", model=model, make_inputs=None,
                    loss_fn=nn.functional.cross_entropy,
                    make_loader=augmented_loader((3, 32, 32), 10, num_workers=num_workers))


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
