"""A sequence tagger: embeddings, a two-layer GRU of 256 and a linear tag head over 64 tokens (a KernelBench-style
recurrent model, written after every rule: held out of every range's derivation)."""

import torch
from torch import nn

VOCAB, TAGS, LENGTH = 5000, 17, 64


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, 128)
        self.gru = nn.GRU(128, 256, num_layers=2, batch_first=True)
        self.head = nn.Linear(256, TAGS)

    def forward(self, tokens):
        out, _ = self.gru(self.embed(tokens))
        return self.head(out).flatten(0, 1)


def workload():
    def make_inputs(batch: int, device):
        gen = torch.Generator().manual_seed(0)
        tokens = torch.randint(0, VOCAB, (batch, LENGTH), generator=gen)
        return tokens.to(device), torch.randint(0, TAGS, (batch * LENGTH,), generator=gen).to(device)

    return Model(), make_inputs, nn.functional.cross_entropy
