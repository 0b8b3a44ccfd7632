"""A small MobileNetV2-style network (Sandler et al. 2018, "MobileNetV2: Inverted Residuals and Linear
Bottlenecks"): inverted residual blocks of a 1x1 expansion, a 3x3 depthwise convolution (groups = channels)
and a 1x1 linear projection. A test model for work counting: depthwise convolutions are where
torch.utils.flop_counter goes wrong (it counts a grouped convolution's backward as ungrouped).

Not one of the DAWNBench / MLPerf benchmark models (models/benchmarks.toml): reach it through the factory
contract, `--model models.mobilenet:make`. Sizes are MobileNetV2's first stages at width 0.5 on 64x64
inputs, small enough for a CPU test.
"""

from __future__ import annotations

from torch import nn

from .step import image_inputs

IN_SHAPE = (3, 64, 64)
CLASSES = 10
# (expansion t, output channels c, repeats n, first stride s), MobileNetV2's table at width 0.5, first stages
BLOCKS = ((1, 8, 1, 1), (6, 12, 2, 2), (6, 16, 2, 2), (6, 32, 2, 2))


def conv_bn(c_in: int, c_out: int, kernel: int, stride: int = 1, groups: int = 1, act: bool = True) -> nn.Sequential:
    layers = [nn.Conv2d(c_in, c_out, kernel, stride, kernel // 2, groups=groups, bias=False), nn.BatchNorm2d(c_out)]
    if act:
        layers.append(nn.ReLU6())
    return nn.Sequential(*layers)


class InvertedResidual(nn.Module):
    def __init__(self, c_in: int, c_out: int, stride: int, expand: int):
        super().__init__()
        hidden = c_in * expand
        layers = [conv_bn(c_in, hidden, 1)] if expand != 1 else []
        layers += [
            conv_bn(hidden, hidden, 3, stride, groups=hidden),  # depthwise
            conv_bn(hidden, c_out, 1, act=False),
        ]  # linear bottleneck
        self.block = nn.Sequential(*layers)
        self.residual = stride == 1 and c_in == c_out

    def forward(self, x):
        y = self.block(x)
        return x + y if self.residual else y


class MobileNetV2Small(nn.Module):
    def __init__(self, num_classes: int = CLASSES):
        super().__init__()
        layers, c = [conv_bn(3, 16, 3, 2)], 16
        for t, c_out, n, s in BLOCKS:
            for i in range(n):
                layers.append(InvertedResidual(c, c_out, s if i == 0 else 1, t))
                c = c_out
        layers.append(conv_bn(c, 128, 1))
        self.features = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.flatten = nn.Flatten()
        self.classifier = nn.Linear(128, num_classes)

    def forward(self, x):
        return self.classifier(self.flatten(self.pool(self.features(x))))


def make():
    """The factory: (model, make_inputs); cross-entropy is the default loss for integer targets."""
    return MobileNetV2Small(), image_inputs(IN_SHAPE, CLASSES)
