"""An MLP-Mixer of four blocks on 8x8 patches of 64x64 images (token-mixing and channel-mixing MLPs, LayerNorm,
GELU): a KernelBench-style single-file model written after every rule (held out of every range's derivation)."""

import torch
from torch import nn

PATCH, SIZE, DIM, CLASSES = 8, 64, 256, 10
TOKENS = (SIZE // PATCH) ** 2


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(DIM), nn.LayerNorm(DIM)
        self.tokens = nn.Sequential(nn.Linear(TOKENS, 256), nn.GELU(), nn.Linear(256, TOKENS))
        self.channels = nn.Sequential(nn.Linear(DIM, 1024), nn.GELU(), nn.Linear(1024, DIM))

    def forward(self, x):
        x = x + self.tokens(self.norm1(x).transpose(1, 2)).transpose(1, 2)
        return x + self.channels(self.norm2(x))


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.patch = nn.Conv2d(3, DIM, PATCH, stride=PATCH)
        self.blocks = nn.Sequential(*[Block() for _ in range(4)])
        self.head = nn.Linear(DIM, CLASSES)

    def forward(self, x):
        x = self.patch(x).flatten(2).transpose(1, 2)
        return self.head(self.blocks(x).mean(1))


def workload():
    def make_inputs(batch: int, device):
        gen = torch.Generator().manual_seed(0)
        x = torch.randn(batch, 3, SIZE, SIZE, generator=gen)
        return x.to(device), torch.randint(0, CLASSES, (batch,), generator=gen).to(device)

    return Model(), make_inputs, nn.functional.cross_entropy
