"""ResNet-50 v1.5 for ImageNet at 224x224 (He et al. 2016, with the v1.5 change used by MLPerf and
NVIDIA: in each stage's first bottleneck the stride sits on the 3x3 convolution, not on the first 1x1).

Plain PyTorch, the same layer structure (and parameter names) as torchvision's resnet50, but every
activation is its own module, so that each appears as a layer of its own in the decomposition, and the
residual addition is out of place (an in-place add on a module's output breaks full backward hooks).
"""

from __future__ import annotations

import torch
from torch import nn

NUM_CLASSES = 1000


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, in_channels: int, width: int, stride: int = 1):
        super().__init__()
        out_channels = width * self.expansion
        self.conv1 = nn.Conv2d(in_channels, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu1 = nn.ReLU()
        self.conv2 = nn.Conv2d(width, width, 3, stride=stride, padding=1, bias=False)  # v1.5: stride here
        self.bn2 = nn.BatchNorm2d(width)
        self.relu2 = nn.ReLU()
        self.conv3 = nn.Conv2d(width, out_channels, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(out_channels)
        self.relu3 = nn.ReLU()
        self.downsample = None
        if stride != 1 or in_channels != out_channels:
            self.downsample = nn.Sequential(
                nn.Conv2d(in_channels, out_channels, 1, stride=stride, bias=False), nn.BatchNorm2d(out_channels)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu1(self.bn1(self.conv1(x)))
        out = self.relu2(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu3(out + identity)


class ResNet50(nn.Module):
    def __init__(self, num_classes: int = NUM_CLASSES, blocks=(3, 4, 6, 3)):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU()
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        in_ch = 64
        stages = []
        for i, (n, width) in enumerate(zip(blocks, (64, 128, 256, 512))):
            layers = []
            for j in range(n):
                layers.append(Bottleneck(in_ch, width, stride=2 if (j == 0 and i > 0) else 1))
                in_ch = width * Bottleneck.expansion
            stages.append(nn.Sequential(*layers))
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.flatten = nn.Flatten()
        self.fc = nn.Linear(in_ch, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(self.flatten(self.avgpool(x)))


def build(facts):
    from .step import Workload, image_inputs

    return Workload(
        name=facts.name,
        model=ResNet50(),
        make_inputs=image_inputs(facts.input_shape, NUM_CLASSES),
        loss_fn=nn.functional.cross_entropy,
        facts=facts,
    )
