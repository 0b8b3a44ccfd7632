"""What every op family spec provides (microbench.core.ops.gemm and .conv2d are the two we have).

A spec is everything the tool knows about one op family, in one place: its bench.toml shape keys and the
rows of data files, the operands of a case and their float64 reference, the work a case does (the formulas
of microbench.core.ops.work), the call signature of its providers, the ATen operators of a training step that
are cases of it, and the problem descriptors oneDNN prints for it.

Tensor methods import torch when called: the config loader reads specs and must not pay for torch.
"""

from __future__ import annotations

from collections.abc import Callable

from microbench.core.dtypes import storage_dtype
from microbench.core.ops.work import Work
from microbench.core.shapes import Case


def random_operand(shape, dtype: str, device, gen):
    """Standard normal values, never zeros or constants: a kernel timed on zeros can run faster than on real
    data (measured: 894 vs 769-798 TFLOP/s bf16 on an H200) and an all-zero output would pass."""
    import torch

    t = torch.randn(shape, generator=gen, dtype=torch.float32, device="cpu")
    if dtype == "fp8_e4m3":
        t = t * 0.5  # keep within e4m3's range with room for the K-sum in the reference
    return t.to(device=device, dtype=storage_dtype(dtype, device))


class OpSpec:
    """One op family. Subclasses set the class attributes and implement the methods."""

    family: str = ""  # the registry op, the bench.toml table ([[profiles.X.<family>]]), Case.family
    shape_keys: frozenset[str] = frozenset()  # keys of one shape table
    required_keys: frozenset[str] = frozenset()
    group_keys: frozenset[str] = frozenset()  # extra keys of a case group besides dtypes, shapes, from
    data_row_fields: str = ""  # the layout of one row of a data file (microbench/data/*.toml), for errors
    signature: str = ""  # the provider call signature, for the registry's documentation
    aten_ops: frozenset[str] = frozenset()  # ATen operators of a training step that are cases of this family
    onednn_kind: str = ""  # oneDNN's primitive kind for it (its verbose log)

    # ---- configuration ---------------------------------------------------------------------------------
    def parse_shape(self, rd, table: dict, where: str):
        """A shape table of bench.toml -> the shape; `rd` is the config reader (errors name file and key)."""
        raise NotImplementedError

    def data_row(self, row: list) -> dict:
        """One row of a data file (DeepBench's layouts) -> a shape table; ValueError names what is wrong."""
        raise NotImplementedError

    def case_ops(self, rd, group: dict, where: str) -> list[str]:
        """The row ops one case group asks for (conv2d: one per direction)."""
        return [self.family]

    # ---- operands, reference, work ---------------------------------------------------------------------
    def inputs(self, case: Case, device, gen) -> tuple:
        raise NotImplementedError

    def compute(self, case: Case, a, b):
        """The op in whatever dtype a and b have (the float64 reference; the vendor provider too)."""
        raise NotImplementedError

    def reference(self, case: Case, a, b):
        """float64 result from the same (already rounded) operands."""
        import torch

        return self.compute(case, a.to(torch.float64), b.to(torch.float64))

    def work(self, case: Case) -> Work:
        raise NotImplementedError

    # ---- providers -------------------------------------------------------------------------------------
    def call(self, fn: Callable, case: Case, a, b, *, allow_tf32: bool):
        """Call a provider of this family with its signature."""
        raise NotImplementedError

    def bind(self, fn: Callable, case: Case, a, b) -> Callable[[], object]:
        """A no-argument call of provider function `fn` on these operands (what checks and timing run)."""
        allow_tf32 = case.dtype == "tf32"
        return lambda: self.call(fn, case, a, b, allow_tf32=allow_tf32)

    # ---- a training step's operators and oneDNN's records -----------------------------------------------
    def aten_cases(self, op: str, args, dtype: str) -> tuple[list[Case], str]:
        """The cases an ATen operator of `aten_ops` computes, or ([], why none)."""
        return [], f"{op}: no replayable case"

    def problem_key(self, case: Case) -> tuple:
        """What identifies a case's problem in oneDNN's verbose log (see `onednn_key`)."""
        raise NotImplementedError

    def onednn_key(self, rec) -> tuple | None:
        """A oneDNN record (microbench.roofline.evidence.OneDnnExec) of `onednn_kind` -> its problem_key."""
        return None

    def short_op(self, op: str) -> str:
        """A row op as a table shows it."""
        return op
