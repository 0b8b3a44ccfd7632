"""The one dtype table: every fact about a number format that more than one module needs.

Nothing here imports torch at module level (the config loader uses this table and must fail fast on a bad
file without paying for torch); `torch_dtype` resolves the storage type when it is asked for.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from microbench.core import targets


@dataclass(frozen=True)
class DType:
    name: str  # our name: in bench.toml, result rows, the `[tolerance]` keys
    bytes: int  # per element as stored in memory
    torch_name: str  # attribute of the torch module holding the storage type
    precision: str  # the datasheet's precision column ([devices.*] in bench.toml) and the ceiling it is judged on
    matrix_units: bool  # Tensor Cores / matrix cores can compute in it (fp32 cannot: it would be tf32)
    case: bool  # a dtype of kernel cases: bench.toml `dtypes`, `[tolerance]`, `[ceilings.*.gemm_sizes]`
    step: str | None  # a training-step dtype: "ieee" (as stored) or "autocast"; None: not one
    triton: str  # Triton's type name in kernel signatures
    color: str  # its colour on the roofline plot
    note: str = ""


# Order matters where a torch storage type is shared: the first entry names it (float32 -> fp32, not tf32).
TABLE: tuple[DType, ...] = (
    DType("fp64", 8, "float64", "fp64", False, False, None, "fp64", "tab:brown"),
    DType("fp32", 4, "float32", "fp32", False, True, "ieee", "fp32", "tab:blue"),
    DType(
        "tf32",
        4,
        "float32",
        "tf32",
        True,
        True,
        None,
        "fp32",
        "tab:cyan",
        "fp32 storage; TF32 Tensor Core math allowed",
    ),
    DType("fp16", 2, "float16", "fp16", True, True, "autocast", "fp16", "tab:orange"),
    DType("bf16", 2, "bfloat16", "bf16", True, True, "autocast", "bf16", "tab:red"),
    DType(
        "fp8_e4m3",
        1,
        "float8_e4m3fn",
        "fp8",
        True,
        True,
        None,
        "fp8e4nv",
        "tab:purple",
        "scaled by 0.5 in case inputs to stay within e4m3's range",
    ),
    # The e4m3 "fnuz" flavour (no negative zero, bias 8, max 240) that CDNA 3 (gfx942) multiplies natively:
    # fp8_e4m3 cases are stored in it there (`storage_dtype`), and our Triton GEMM takes it as fp8_e4m3.
    DType(
        "fp8_e4m3_fnuz",
        1,
        "float8_e4m3fnuz",
        "fp8",
        True,
        False,
        None,
        "fp8e4b8",
        "tab:purple",
        "fp8_e4m3 as gfx942's matrix cores take it",
    ),
    DType("fp8_e5m2", 1, "float8_e5m2", "fp8", True, False, None, "fp8e5", "tab:pink"),
    DType("int8", 1, "int8", "int8", True, False, None, "i8", "tab:gray"),
)
BY_NAME = {d.name: d for d in TABLE}

CASE_DTYPES: tuple[str, ...] = tuple(d.name for d in TABLE if d.case)
STEP_DTYPES: tuple[str, ...] = tuple(d.name for d in TABLE if d.step)
# The datasheet's precision columns, in table order, each once.
PRECISIONS: tuple[str, ...] = tuple(dict.fromkeys(d.precision for d in TABLE))
# Our dtype name -> the datasheet precision column it is judged on.
PRECISION_OF: dict[str, str] = {d.name: d.precision for d in TABLE}


def get(name: str) -> DType:
    try:
        return BY_NAME[name]
    except KeyError:
        raise ValueError(f"unknown dtype {name!r} (known: {', '.join(BY_NAME)})") from None


def bytes_per_element(name: str) -> int:
    return get(name).bytes


def torch_dtype(name: str):
    """Our dtype name -> the torch storage dtype; ValueError when this torch has none (an old float8)."""
    import torch

    t = getattr(torch, get(name).torch_name, None)
    if t is None:
        raise ValueError(f"dtype {name!r} is not available in torch {torch.__version__}")
    return t


def storage_dtype(name: str, device=None):
    """The torch storage of a case of dtype `name` on `device`: `torch_dtype(name)`, except fp8 e4m3 on an AMD
    GPU whose matrix cores take the other flavour (gfx942: fnuz; microbench/data/targets.toml), where the OCP
    flavour would run upcast to fp16."""
    import torch

    t = torch_dtype(name)
    if name != "fp8_e4m3" or torch.version.hip is None or device is None or torch.device(device).type != "cuda":
        return t

    arch = torch.cuda.get_device_properties(torch.device(device)).gcnArchName.split(":")[0]
    flavour = targets.fp8_e4m3_flavour(arch) if targets.known(arch) else "fp8e4nv"
    return next(
        (getattr(torch, d.torch_name) for d in TABLE if d.triton == flavour and hasattr(torch, d.torch_name)), t
    )


def is_fp8(torch_dtype_) -> bool:
    """Any fp8 flavour (OCP e4m3 / e5m2, gfx942's e4m3 fnuz): what a library without fp8 must skip, not fail."""
    return PRECISION_OF.get(name_of(torch_dtype_)) == "fp8"


def name_of(torch_dtype_) -> str | None:
    """A torch storage dtype -> our name (float32 -> fp32), None for one the table does not know."""
    return _by_torch().get(torch_dtype_)


@lru_cache(maxsize=1)
def _by_torch() -> dict:
    import torch

    out: dict = {}
    for d in TABLE:
        t = getattr(torch, d.torch_name, None)
        if t is not None:
            out.setdefault(t, d.name)  # the first entry names a shared storage type
    return out


NATIVE_BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})


def cpu_native_bf16(isa_flags) -> bool:
    """A CPU computes bf16 in hardware where it has AVX512-BF16 or AMX-BF16; elsewhere PyTorch and oneDNN convert
    to fp32 and back around every operator (an AVX2 EPYC: ResNet-9's step 15x slower, docs/findings.md)."""
    return bool(NATIVE_BF16_FLAGS & set(isa_flags or ()))
