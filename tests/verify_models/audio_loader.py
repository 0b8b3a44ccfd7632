"""A 1-D convolution net on one-second raw waveforms made and augmented per sample in its DataLoader (random gain,
shift, pre-emphasis and mu-law companding in the step's own process): a KernelBench-style single-file model with an
input pipeline, written after the dataloader and amp rules (held out of every range's derivation)."""

import torch
from torch import nn
from torch.utils.data import DataLoader

from microbench.models.step import Workload

RATE, CLASSES = 8000, 6


class Clips(torch.utils.data.Dataset):
    def __len__(self):
        return 1 << 14

    def __getitem__(self, i):
        gen = torch.Generator().manual_seed(i)
        label = int(torch.randint(0, CLASSES, (), generator=gen))
        t = torch.arange(RATE) / RATE
        x = torch.sin(2 * torch.pi * 110.0 * (label + 1) * t) + 0.2 * torch.randn(RATE, generator=gen)
        x = torch.roll(
            x * torch.empty(()).uniform_(0.3, 1.2, generator=gen), int(torch.randint(0, 800, (), generator=gen))
        )
        x = torch.cat([x[:1], x[1:] - 0.97 * x[:-1]])  # pre-emphasis
        x = torch.sign(x) * torch.log1p(255 * x.abs().clamp(max=1)) / torch.log1p(torch.tensor(255.0))  # mu-law
        return x[None], label


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        layers, c = [], 1
        for width, stride in ((32, 4), (64, 4), (64, 2), (128, 2)):
            layers += [nn.Conv1d(c, width, 9, stride=stride, padding=4), nn.BatchNorm1d(width), nn.ReLU()]
            c = width
        self.body = nn.Sequential(*layers, nn.AdaptiveAvgPool1d(1), nn.Flatten(), nn.Linear(c, CLASSES))

    def forward(self, x):
        return self.body(x)


def workload():
    return Workload(
        name="audio_loader",
        model=Model(),
        make_inputs=None,
        loss_fn=nn.functional.cross_entropy,
        make_loader=lambda batch: DataLoader(
            Clips(), batch_size=batch, shuffle=True, drop_last=True, generator=torch.Generator().manual_seed(0)
        ),
    )
