"""Scaled dot-product attention, forward: O = softmax(Q K^T / sqrt(d) [+ causal mask]) V over `batch_heads`
independent problems. Operands: `a` = Q [BH, Lq, D]; `b` = K and V stacked [2, BH, Lk, D] (the spec interface
has two operands). The cases come from traces (roofline --from-trace: an attention operator's shape, by the work
model of core.ops.aten) or a profile's `[[profiles.X.attention]]` tables."""

from __future__ import annotations

import math

from microbench.core.ops.base import OpSpec, random_operand
from microbench.core.ops.work import Work, attention_work
from microbench.core.shapes import AttentionShape, Case


class AttentionSpec(OpSpec):
    family = "attention"
    shape_keys = frozenset({"batch_heads", "q_len", "kv_len", "head_dim", "causal"})
    required_keys = frozenset({"batch_heads", "q_len", "kv_len", "head_dim"})
    data_row_fields = "(no data files)"
    signature = "fn(q, kv, *, causal: bool, allow_tf32: bool) -> o     q: [BH, Lq, D], kv: [2, BH, Lk, D]"
    aten_ops = frozenset()  # a model's step is not replayed through it (decompose); a trace's calls are

    def parse_shape(self, rd, t: dict, where: str) -> AttentionShape:
        rd.keys(t, where, self.shape_keys, self.required_keys)
        return AttentionShape(
            **{k: rd.num(t, k, where, integer=True) for k in sorted(self.required_keys)},
            causal=rd.flag(t, "causal", where, False),
        )

    def data_row(self, row: list) -> dict:
        raise ValueError("attention has no data files")

    def inputs(self, case: Case, device, gen) -> tuple:
        s = case.shape
        q = random_operand((s.batch_heads, s.q_len, s.head_dim), case.dtype, device, gen)
        kv = random_operand((2, s.batch_heads, s.kv_len, s.head_dim), case.dtype, device, gen)
        return q, kv

    def compute(self, case: Case, a, b):
        """The attention in a's dtype, written out (the float64 reference: no fused kernel takes float64)."""
        import torch

        s = case.shape
        scores = torch.matmul(a, b[0].transpose(-1, -2)) / math.sqrt(s.head_dim)
        if s.causal:
            mask = torch.ones(s.q_len, s.kv_len, dtype=torch.bool, device=a.device).tril()
            scores = scores.masked_fill(~mask, float("-inf"))
        return torch.matmul(torch.softmax(scores, dim=-1), b[1])

    def work(self, case: Case) -> Work:
        s = case.shape
        return attention_work(s.batch_heads, s.q_len, s.kv_len, s.head_dim, s.head_dim, case.dtype, "fwd", s.causal)

    def call(self, fn, case: Case, a, b, *, allow_tf32: bool):
        return fn(a, b, causal=case.shape.causal, allow_tf32=allow_tf32)

    def problem_key(self, case: Case) -> tuple:
        s = case.shape
        return ("attention", s.batch_heads, s.q_len, s.kv_len, s.head_dim, s.causal)


SPEC = AttentionSpec()
