"""NCF (NeuMF: generalized matrix factorization + MLP) for MovieLens 20M, as in the MLPerf Training v0.5
recommendation reference (neumf.py): 64-wide GMF embeddings, MLP embeddings of 128 per side, MLP layers
256-256-128-64 with ReLU, a final linear layer over [GMF, MLP] to one logit, binary cross-entropy on
implicit feedback with 4 sampled negatives per positive."""

from __future__ import annotations

import torch
from torch import nn

USERS = 138493
ITEMS = 26744
MF_DIM = 64
MLP_LAYERS = (256, 256, 128, 64)
NEGATIVES_PER_POSITIVE = 4


class NeuMF(nn.Module):
    def __init__(self, users: int = USERS, items: int = ITEMS, mf_dim: int = MF_DIM, mlp_layers=MLP_LAYERS):
        super().__init__()
        self.mf_user_embed = nn.Embedding(users, mf_dim)
        self.mf_item_embed = nn.Embedding(items, mf_dim)
        self.mlp_user_embed = nn.Embedding(users, mlp_layers[0] // 2)
        self.mlp_item_embed = nn.Embedding(items, mlp_layers[0] // 2)
        mlp = []
        for i in range(1, len(mlp_layers)):
            mlp += [nn.Linear(mlp_layers[i - 1], mlp_layers[i]), nn.ReLU()]
        self.mlp = nn.Sequential(*mlp)
        self.final = nn.Linear(mlp_layers[-1] + mf_dim, 1)
        for e in (self.mf_user_embed, self.mf_item_embed, self.mlp_user_embed, self.mlp_item_embed):
            nn.init.normal_(e.weight, 0.0, 0.01)

    def forward(self, user: torch.Tensor, item: torch.Tensor) -> torch.Tensor:
        xmf = self.mf_user_embed(user) * self.mf_item_embed(item)
        xmlp = self.mlp(torch.cat((self.mlp_user_embed(user), self.mlp_item_embed(item)), dim=1))
        return self.final(torch.cat((xmf, xmlp), dim=1))


def make_inputs(batch: int, device) -> tuple[tuple, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    user = torch.randint(0, USERS, (batch,), generator=gen)
    item = torch.randint(0, ITEMS, (batch,), generator=gen)
    label = (torch.arange(batch) % (NEGATIVES_PER_POSITIVE + 1) == 0).float().unsqueeze(1)
    return (user.to(device), item.to(device)), label.to(device)


def loss_fn(logits: torch.Tensor, label: torch.Tensor) -> torch.Tensor:
    return nn.functional.binary_cross_entropy_with_logits(logits, label.to(logits.dtype))


def build(facts):
    from .step import Workload

    return Workload(name=facts.name, model=NeuMF(), make_inputs=make_inputs, loss_fn=loss_fn, facts=facts)
