"""The 9-layer residual network of the DAWNBench CIFAR10 record entries (David Page, myrtle.ai, "DavidNet";
also the Kakao Brain, Apple and BaiduNet9 entries): prep conv, three stages of conv-BN-ReLU(-max pool),
residual pairs after stages 1 and 3, global max pooling, a bias-free linear classifier scaled by 1/8."""

from __future__ import annotations

import torch
from torch import nn

NUM_CLASSES = 10


class ConvBN(nn.Module):
    def __init__(self, c_in: int, c_out: int, pool: bool = False):
        super().__init__()
        self.conv = nn.Conv2d(c_in, c_out, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(c_out)
        self.relu = nn.ReLU()
        self.pool = nn.MaxPool2d(2) if pool else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.relu(self.bn(self.conv(x)))
        return self.pool(x) if self.pool is not None else x


class Residual(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.res1 = ConvBN(channels, channels)
        self.res2 = ConvBN(channels, channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.res2(self.res1(x))


class Scale(nn.Module):
    """Page's classifier output multiplier (0.125): keeps the logits small without a bias or BN."""

    def __init__(self, weight: float):
        super().__init__()
        self.weight = weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.weight


class ResNet9(nn.Module):
    def __init__(self, num_classes: int = NUM_CLASSES):
        super().__init__()
        self.prep = ConvBN(3, 64)
        self.layer1 = ConvBN(64, 128, pool=True)
        self.res1 = Residual(128)
        self.layer2 = ConvBN(128, 256, pool=True)
        self.layer3 = ConvBN(256, 512, pool=True)
        self.res3 = Residual(512)
        self.pool = nn.AdaptiveMaxPool2d(1)
        self.flatten = nn.Flatten()
        self.fc = nn.Linear(512, num_classes, bias=False)
        self.scale = Scale(0.125)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.res1(self.layer1(self.prep(x)))
        x = self.res3(self.layer3(self.layer2(x)))
        return self.scale(self.fc(self.flatten(self.pool(x))))


def build(facts):
    from .step import Workload, image_inputs

    return Workload(
        name=facts.name,
        model=ResNet9(),
        make_inputs=image_inputs(facts.input_shape, NUM_CLASSES),
        loss_fn=nn.functional.cross_entropy,
        facts=facts,
    )
