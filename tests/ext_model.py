"""Models from "outside the project" for the factory contract (docs/models.md): `--model tests.ext_model:make`."""

from __future__ import annotations

import torch
from torch import nn

IN_SHAPE = (3, 8, 8)
CLASSES = 4


class Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.act = nn.ReLU()
        self.flatten = nn.Flatten()
        self.hidden = nn.Linear(8 * 8 * 8, 16)
        self.head = nn.Linear(16, CLASSES)

    def forward(self, x):
        return self.head(torch.relu(self.hidden(self.flatten(self.act(self.conv(x))))))


class InPlaceResidual(nn.Module):
    """Modifies a submodule's output in place (`out += x`, as torchvision's ResNet does), which PyTorch's
    full backward hooks forbid."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(16, 16)
        self.fc2 = nn.Linear(16, CLASSES)

    def forward(self, x):
        out = self.fc1(x)
        out += x
        return self.fc2(out)


def make_inputs(batch: int, device):
    gen = torch.Generator().manual_seed(1)
    x = torch.randn((batch, *IN_SHAPE), generator=gen).to(device)
    return (x,), torch.randint(0, CLASSES, (batch,), generator=gen).to(device)


def make():
    return Tiny(), make_inputs


def make_inplace():
    def inputs(batch, device):
        return torch.randn(batch, 16, device=device), torch.randint(0, CLASSES, (batch,), device=device)

    return InPlaceResidual(), inputs


def make_wrong():
    return 42


def make_raises():
    raise RuntimeError("no weights here")
