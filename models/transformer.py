"""Transformer (base) for translation, as in the MLPerf Training v0.5 reference (TensorFlow official
model, TransformerBaseParams): 6 encoder and 6 decoder layers, model width 512, 8 heads, feed-forward
width 2048, a shared source/target vocabulary of 33945 tokens whose embedding matrix is also the output
projection, layer normalization before each sub-layer (pre-norm) and after each stack, sinusoidal
positions, dropout 0.1, label-smoothed cross-entropy (0.1).

Attention is written out (two batched GEMMs around a softmax), as the 2018 reference did: every GEMM of
the step is then a visible operator with its own shape, and on a GPU the decomposition shows what an
unfused attention costs (a fused kernel such as FlashAttention would hide the GEMMs in one kernel).
"""

from __future__ import annotations

import math

import torch
from torch import nn

VOCAB = 33945
D_MODEL = 512
HEADS = 8
FFN = 2048
LAYERS = 6
DROPOUT = 0.1
LABEL_SMOOTHING = 0.1


class DotProductAttention(nn.Module):
    """softmax(q k^T / sqrt(d) + mask) v over [batch, heads, length, d] tensors."""

    def __init__(self, dropout: float):
        super().__init__()
        self.softmax = nn.Softmax(dim=-1)
        self.dropout = nn.Dropout(dropout)

    def forward(self, q, k, v, mask=None):
        scores = torch.matmul(q * q.shape[-1] ** -0.5, k.transpose(-1, -2))
        if mask is not None:
            scores = scores + mask
        return torch.matmul(self.dropout(self.softmax(scores)), v)


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model: int = D_MODEL, heads: int = HEADS, dropout: float = DROPOUT):
        super().__init__()
        self.heads = heads
        # The reference's dense layers have no bias (attention_layer.py: use_bias=False).
        self.q = nn.Linear(d_model, d_model, bias=False)
        self.k = nn.Linear(d_model, d_model, bias=False)
        self.v = nn.Linear(d_model, d_model, bias=False)
        self.core = DotProductAttention(dropout)
        self.out = nn.Linear(d_model, d_model, bias=False)

    def _split(self, x):
        b, t, d = x.shape
        return x.view(b, t, self.heads, d // self.heads).transpose(1, 2)

    def forward(self, x, memory=None, mask=None):
        memory = x if memory is None else memory
        y = self.core(self._split(self.q(x)), self._split(self.k(memory)), self._split(self.v(memory)), mask)
        b, h, t, dh = y.shape
        return self.out(y.transpose(1, 2).reshape(b, t, h * dh))


class FeedForward(nn.Module):
    def __init__(self, d_model: int = D_MODEL, ffn: int = FFN, dropout: float = DROPOUT):
        super().__init__()
        self.filter = nn.Linear(d_model, ffn)
        self.relu = nn.ReLU()
        self.dropout = nn.Dropout(dropout)
        self.output = nn.Linear(ffn, d_model)

    def forward(self, x):
        return self.output(self.dropout(self.relu(self.filter(x))))


class EncoderLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm1 = nn.LayerNorm(D_MODEL)
        self.self_attn = MultiHeadAttention()
        self.drop1 = nn.Dropout(DROPOUT)
        self.norm2 = nn.LayerNorm(D_MODEL)
        self.ffn = FeedForward()
        self.drop2 = nn.Dropout(DROPOUT)

    def forward(self, x):
        x = x + self.drop1(self.self_attn(self.norm1(x)))
        return x + self.drop2(self.ffn(self.norm2(x)))


class DecoderLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm1 = nn.LayerNorm(D_MODEL)
        self.self_attn = MultiHeadAttention()
        self.drop1 = nn.Dropout(DROPOUT)
        self.norm2 = nn.LayerNorm(D_MODEL)
        self.cross_attn = MultiHeadAttention()
        self.drop2 = nn.Dropout(DROPOUT)
        self.norm3 = nn.LayerNorm(D_MODEL)
        self.ffn = FeedForward()
        self.drop3 = nn.Dropout(DROPOUT)

    def forward(self, x, memory, causal_mask):
        x = x + self.drop1(self.self_attn(self.norm1(x), mask=causal_mask))
        x = x + self.drop2(self.cross_attn(self.norm2(x), memory=memory))
        return x + self.drop3(self.ffn(self.norm3(x)))


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(EncoderLayer() for _ in range(LAYERS))
        self.norm = nn.LayerNorm(D_MODEL)

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return self.norm(x)


class Decoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(DecoderLayer() for _ in range(LAYERS))
        self.norm = nn.LayerNorm(D_MODEL)

    def forward(self, x, memory):
        t = x.shape[1]
        causal_mask = torch.full((t, t), float("-inf"), device=x.device, dtype=x.dtype).triu(1)
        for layer in self.layers:
            x = layer(x, memory, causal_mask)
        return self.norm(x)


def sinusoid_positions(length: int, d_model: int) -> torch.Tensor:
    pos = torch.arange(length, dtype=torch.float32)[:, None]
    inv = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(10000.0) / d_model))
    pe = torch.zeros(length, d_model)
    pe[:, 0::2], pe[:, 1::2] = torch.sin(pos * inv), torch.cos(pos * inv)
    return pe


class Transformer(nn.Module):
    def __init__(self, vocab: int = VOCAB, max_len: int = 256):
        super().__init__()
        self.embedding = nn.Embedding(vocab, D_MODEL)
        nn.init.normal_(self.embedding.weight, 0.0, D_MODEL**-0.5)
        self.register_buffer("positions", sinusoid_positions(max_len, D_MODEL), persistent=False)
        self.embed_dropout = nn.Dropout(DROPOUT)
        self.encoder = Encoder()
        self.decoder = Decoder()
        # Output projection shares the embedding matrix (the reference's EmbeddingSharedWeights).
        self.generator = nn.Linear(D_MODEL, vocab, bias=False)
        self.generator.weight = self.embedding.weight

    def _embed(self, tokens):
        x = self.embedding(tokens) * D_MODEL**0.5
        return self.embed_dropout(x + self.positions[: tokens.shape[1]])

    def forward(self, source, target_in):
        memory = self.encoder(self._embed(source))
        return self.generator(self.decoder(self._embed(target_in), memory))


def make_inputs_for(source_len: int, target_len: int, vocab: int = VOCAB):
    def make_inputs(batch: int, device) -> tuple[tuple, torch.Tensor]:
        gen = torch.Generator().manual_seed(0)
        src = torch.randint(1, vocab, (batch, source_len), generator=gen)
        tgt = torch.randint(1, vocab, (batch, target_len + 1), generator=gen)
        tgt[:, 0] = 0  # start-of-sentence id: the decoder reads the target shifted right by one
        return (src.to(device), tgt[:, :-1].contiguous().to(device)), tgt[:, 1:].contiguous().to(device)

    return make_inputs


def loss_fn(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return nn.functional.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), target.reshape(-1), label_smoothing=LABEL_SMOOTHING
    )


def build(facts):
    from .step import Workload

    source_len, target_len = facts.input_shape
    return Workload(
        name=facts.name,
        model=Transformer(max_len=max(256, source_len, target_len)),
        make_inputs=make_inputs_for(source_len, target_len),
        loss_fn=loss_fn,
        facts=facts,
    )
