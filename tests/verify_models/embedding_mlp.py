"""A recommender in the DLRM style: 8 sparse features through embedding tables of 64, a bottom MLP for 13 dense
features, their pairwise dot products and a top MLP of 512 (a KernelBench-style single-file model written after
every rule: held out of every range's derivation)."""

import torch
from torch import nn

TABLES, ROWS, DIM, DENSE = 8, 20000, 64, 13


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.tables = nn.ModuleList(nn.EmbeddingBag(ROWS, DIM, mode="sum") for _ in range(TABLES))
        self.bottom = nn.Sequential(nn.Linear(DENSE, 256), nn.ReLU(), nn.Linear(256, DIM), nn.ReLU())
        pairs = (TABLES + 1) * TABLES // 2
        self.top = nn.Sequential(
            nn.Linear(DIM + pairs, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 1)
        )

    def forward(self, inputs):
        dense, sparse = inputs[:, :DENSE], inputs[:, DENSE:].long()
        vecs = [self.bottom(dense)] + [t(sparse[:, i : i + 1]) for i, t in enumerate(self.tables)]
        z = torch.stack(vecs, 1)
        dots = torch.bmm(z, z.transpose(1, 2))
        i, j = torch.triu_indices(TABLES + 1, TABLES + 1, offset=1)
        return self.top(torch.cat([vecs[0], dots[:, i, j]], 1)).squeeze(1)


def workload():
    def make_inputs(batch: int, device):
        gen = torch.Generator().manual_seed(0)
        dense = torch.randn(batch, DENSE, generator=gen)
        sparse = torch.randint(0, ROWS, (batch, TABLES), generator=gen).float()
        y = torch.randint(0, 2, (batch,), generator=gen).float()
        return torch.cat([dense, sparse], 1).to(device), y.to(device)

    return Model(), make_inputs, nn.functional.binary_cross_entropy_with_logits
