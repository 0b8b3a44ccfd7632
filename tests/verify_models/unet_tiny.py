"""A two-level U-Net (convolutions down, transposed convolutions up, skip connections) for per-pixel segmentation
of 64x64 images: a KernelBench-style single-file model written after every rule (held out of every range's
derivation)."""

import torch
from torch import nn

CLASSES = 4


def _double(cin, cout):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1), nn.ReLU(), nn.Conv2d(cout, cout, 3, padding=1), nn.ReLU())


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.down1, self.down2, self.mid = _double(3, 32), _double(32, 64), _double(64, 128)
        self.up2, self.dec2 = nn.ConvTranspose2d(128, 64, 2, stride=2), _double(128, 64)
        self.up1, self.dec1 = nn.ConvTranspose2d(64, 32, 2, stride=2), _double(64, 32)
        self.out = nn.Conv2d(32, CLASSES, 1)

    def forward(self, x):
        a = self.down1(x)
        b = self.down2(nn.functional.max_pool2d(a, 2))
        m = self.mid(nn.functional.max_pool2d(b, 2))
        b = self.dec2(torch.cat([self.up2(m), b], 1))
        return self.out(self.dec1(torch.cat([self.up1(b), a], 1)))


def workload():
    def make_inputs(batch: int, device):
        gen = torch.Generator().manual_seed(0)
        x = torch.randn(batch, 3, 64, 64, generator=gen)
        return x.to(device), torch.randint(0, CLASSES, (batch, 64, 64), generator=gen).to(device)

    return Model(), make_inputs, nn.functional.cross_entropy
