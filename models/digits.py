"""A small CNN for scikit-learn's 8x8 handwritten digits: the default model of `python -m microbench.tta run`,
small enough that a run reaches its target in seconds on a CPU. Conv-BN-ReLU twice, max pooling, a linear
classifier: the same operator classes (convolution, normalisation, element-wise, GEMM) as the CIFAR ResNets,
so a profiled epoch shows where such a model's time goes, at a size any machine can train."""

from __future__ import annotations

import torch
from torch import nn

NUM_CLASSES = 10


class DigitsNet(nn.Module):
    def __init__(self, num_classes: int = NUM_CLASSES, width: int = 32):
        super().__init__()
        self.conv1 = nn.Conv2d(1, width, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu1 = nn.ReLU()
        self.conv2 = nn.Conv2d(width, 2 * width, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(2 * width)
        self.relu2 = nn.ReLU()
        self.pool = nn.MaxPool2d(2)  # 8x8 -> 4x4
        self.flatten = nn.Flatten()
        self.fc = nn.Linear(2 * width * 4 * 4, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.relu1(self.bn1(self.conv1(x)))
        x = self.pool(self.relu2(self.bn2(self.conv2(x))))
        return self.fc(self.flatten(x))
