"""A transformer encoder block (multi-head self-attention, 256 wide, 4 heads, 128 tokens) and a mean-pooled
regression head (a KernelBench level-3 style block)."""

import torch
from torch import nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = nn.TransformerEncoderLayer(256, 4, dim_feedforward=1024, batch_first=True)
        self.head = nn.Linear(256, 1)

    def forward(self, x):
        return self.head(self.block(x).mean(dim=1))


def workload():
    def make_inputs(batch: int, device):
        gen = torch.Generator().manual_seed(0)
        return torch.randn(batch, 128, 256, generator=gen).to(device), torch.randn(batch, 1, generator=gen).to(device)

    return Model(), make_inputs, nn.functional.mse_loss
