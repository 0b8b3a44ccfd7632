"""A three-layer 2048-wide MLP classifier over 512 features, 100 classes (a KernelBench level-1/2 style GEMM chain)."""

import torch
from torch import nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(512, 2048), nn.GELU(), nn.Linear(2048, 2048), nn.GELU(), nn.Linear(2048, 100)
        )

    def forward(self, x):
        return self.net(x)


def workload():
    def make_inputs(batch: int, device):
        gen = torch.Generator().manual_seed(0)
        return torch.randn(batch, 512, generator=gen).to(device), torch.randint(0, 100, (batch,), generator=gen).to(
            device
        )

    return Model(), make_inputs, nn.functional.cross_entropy
