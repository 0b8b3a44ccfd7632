"""A MobileNet-style stack: depthwise 3x3 and pointwise 1x1 convolutions, 128 channels on 28x28 (a KernelBench
level-2 style block, where the depthwise convolutions are memory-bound)."""

import torch
from torch import nn


def _block(c):
    return nn.Sequential(nn.Conv2d(c, c, 3, padding=1, groups=c), nn.ReLU(), nn.Conv2d(c, c, 1), nn.ReLU())


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 128, 3, padding=1)
        self.body = nn.Sequential(*[_block(128) for _ in range(3)])
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(128, 10))

    def forward(self, x):
        return self.head(self.body(self.stem(x)))


def workload():
    def make_inputs(batch: int, device):
        gen = torch.Generator().manual_seed(0)
        return torch.randn(batch, 3, 28, 28, generator=gen).to(device), torch.randint(
            0, 10, (batch,), generator=gen
        ).to(device)

    return Model(), make_inputs, nn.functional.cross_entropy
