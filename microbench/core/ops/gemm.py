"""GEMM, batched or not, either operand transposed: C[B?, M, N] = op(A)[B?, M, K] @ op(B)[B?, K, N]."""

from __future__ import annotations

from microbench.core.ops import aten
from microbench.core.ops.base import OpSpec, random_operand
from microbench.core.ops.work import Work, gemm_work
from microbench.core.shapes import Case, GemmShape


def layout_transposed(t) -> bool:
    """True when the matrix in the last two dimensions is stored column-major (as its transpose)."""
    rows, cols = t.shape[-2], t.shape[-1]
    s_row, s_col = t.stride(-2), t.stride(-1)
    row_major = (s_col == 1 or cols == 1) and (s_row >= cols or rows == 1)
    col_major = (s_row == 1 or rows == 1) and (s_col >= rows or cols == 1)
    return col_major and not row_major


class GemmSpec(OpSpec):
    family = "gemm"
    shape_keys = frozenset({"m", "n", "k", "batch", "trans_a", "trans_b"})
    required_keys = frozenset({"m", "n", "k"})
    data_row_fields = "m n k ta tb"
    signature = "fn(a, b, *, allow_tf32: bool) -> c     a: [B?, M, K], b: [B?, K, N] (any strides)"
    aten_ops = aten.replayed_ops("gemm")  # microbench/data/op_models.toml `replay`
    onednn_kind = "matmul"

    def parse_shape(self, rd, t: dict, where: str) -> GemmShape:
        rd.keys(t, where, self.shape_keys, self.required_keys)
        return GemmShape(
            m=rd.num(t, "m", where, integer=True),
            n=rd.num(t, "n", where, integer=True),
            k=rd.num(t, "k", where, integer=True),
            batch=rd.num(t, "batch", where, default=1, integer=True),
            trans_a=rd.flag(t, "trans_a", where, False),
            trans_b=rd.flag(t, "trans_b", where, False),
        )

    def data_row(self, row: list) -> dict:
        if len(row) != 5:  # DeepBench: [m, n, k, a_transposed, b_transposed]
            raise ValueError(f"has {len(row)} fields, expected 5 ({self.data_row_fields})")
        return {"m": row[0], "n": row[1], "k": row[2], "trans_a": row[3], "trans_b": row[4]}

    def inputs(self, case: Case, device, gen) -> tuple:
        """Logical A [B?, M, K] and B [B?, K, N]; a transposed operand is stored column-major (a transposed
        view of a contiguous tensor)."""
        s = case.shape
        lead = (s.batch,) if s.batch != 1 else ()
        a = random_operand(lead + ((s.k, s.m) if s.trans_a else (s.m, s.k)), case.dtype, device, gen)
        b = random_operand(lead + ((s.n, s.k) if s.trans_b else (s.k, s.n)), case.dtype, device, gen)
        return (a.transpose(-1, -2) if s.trans_a else a), (b.transpose(-1, -2) if s.trans_b else b)

    def compute(self, case: Case, a, b):
        import torch

        return torch.matmul(a, b)

    def work(self, case: Case) -> Work:
        return gemm_work(case.shape, case.dtype)

    def call(self, fn, case: Case, a, b, *, allow_tf32: bool):
        return fn(a, b, allow_tf32=allow_tf32)

    def aten_cases(self, op: str, args, dtype: str) -> tuple[list[Case], str]:
        ia, ib = aten.operands(op)
        a, b = args[ia], args[ib]
        batch = a.shape[0] if a.dim() == 3 else 1
        shape = GemmShape(
            m=a.shape[-2],
            n=b.shape[-1],
            k=a.shape[-1],
            batch=batch,
            trans_a=layout_transposed(a),
            trans_b=layout_transposed(b),
        )
        return [Case(self.family, shape, dtype)], ""

    def problem_key(self, case: Case) -> tuple:
        s = case.shape
        return ("gemm", s.batch, s.m, s.k, s.n)

    def onednn_key(self, rec) -> tuple | None:
        try:  # "2x7200:7200x10" (batch dimensions lead)
            a, b = rec.problem.split(":")[:2]
            da, db = [int(x) for x in a.split("x")], [int(x) for x in b.split("x")]
        except ValueError:
            return None
        batch = 1
        for d in da[:-2]:
            batch *= d
        return ("gemm", batch, da[-2], da[-1], db[-1])


SPEC = GemmSpec()
