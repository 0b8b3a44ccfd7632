"""Four 3x3 convolutions of 64 channels on 32x32 images with a linear head (a KernelBench level-2 style stack)."""

import torch
from torch import nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        layers, c = [], 3
        for _ in range(4):
            layers += [nn.Conv2d(c, 64, 3, padding=1), nn.ReLU()]
            c = 64
        self.body = nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10))

    def forward(self, x):
        return self.body(x)


def workload():
    def make_inputs(batch: int, device):
        gen = torch.Generator().manual_seed(0)
        return torch.randn(batch, 3, 32, 32, generator=gen).to(device), torch.randint(
            0, 10, (batch,), generator=gen
        ).to(device)

    return Model(), make_inputs, nn.functional.cross_entropy
