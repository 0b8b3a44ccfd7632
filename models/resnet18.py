"""ResNet-18 for CIFAR10 (32x32 inputs): the variant DAWNBench CIFAR10 entries used (e.g. basenet,
"Resnet18 + minor modifications"): a 3x3 stride-1 stem without max pooling, four stages of two basic
blocks (64, 128, 256, 512 channels), global average pooling and a 10-way classifier."""

from __future__ import annotations

import torch
from torch import nn

NUM_CLASSES = 10


class BasicBlock(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, stride: int = 1):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, out_channels, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(out_channels)
        self.relu1 = nn.ReLU()
        self.conv2 = nn.Conv2d(out_channels, out_channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(out_channels)
        self.relu2 = nn.ReLU()
        self.shortcut = None
        if stride != 1 or in_channels != out_channels:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_channels, out_channels, 1, stride=stride, bias=False), nn.BatchNorm2d(out_channels)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.shortcut is None else self.shortcut(x)
        out = self.relu1(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu2(out + identity)  # out of place: full backward hooks forbid in-place on outputs


class ResNet18Cifar(nn.Module):
    def __init__(self, num_classes: int = NUM_CLASSES):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU()
        stages, in_ch = [], 64
        for i, width in enumerate((64, 128, 256, 512)):
            stages.append(nn.Sequential(BasicBlock(in_ch, width, stride=1 if i == 0 else 2), BasicBlock(width, width)))
            in_ch = width
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.flatten = nn.Flatten()
        self.fc = nn.Linear(512, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.relu(self.bn1(self.conv1(x)))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(self.flatten(self.avgpool(x)))


def build(facts):
    from .step import Workload, image_inputs

    return Workload(
        name=facts.name,
        model=ResNet18Cifar(),
        make_inputs=image_inputs(facts.input_shape, NUM_CLASSES),
        loss_fn=nn.functional.cross_entropy,
        facts=facts,
    )
