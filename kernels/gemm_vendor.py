"""GEMM through the vendor libraries: torch.matmul (cuBLAS / hipBLASLt on a GPU, MKL / oneDNN on a CPU),
and cupy.matmul (cuBLAS through CuPy) when CuPy and a GPU are present."""

from __future__ import annotations

import torch

from microbench.core.dtypes import is_fp8
from microbench.core.tf32 import tf32_allowed
from microbench.roofline.evidence import vendor_evidence
from microbench.roofline.registry import Unsupported, provider


@provider(
    "gemm",
    "torch",
    baseline=True,
    library="torch.matmul: cuBLAS/hipBLASLt (GPU), MKL/oneDNN (CPU)",
    evidence=vendor_evidence,
)
def gemm_torch(a: torch.Tensor, b: torch.Tensor, *, allow_tf32: bool = False) -> torch.Tensor:
    if a.dtype != b.dtype:
        raise Unsupported(f"mixed operand dtypes {a.dtype} and {b.dtype}")
    if allow_tf32 and a.device.type != "cuda":
        raise Unsupported("TF32 is a GPU Tensor Core format; this device has none")
    if is_fp8(a.dtype):  # every flavour: gfx942's cases are stored as float8_e4m3fnuz
        raise Unsupported(
            f"fp8 GEMM through torch.matmul does not exist (torch._scaled_mm is not wired up) ({a.dtype})"
        )
    with tf32_allowed(allow_tf32):
        return torch.matmul(a, b)


def cupy_reason(device) -> str | None:
    try:
        import cupy
    except Exception as e:  # noqa: BLE001 - ImportError, or a CUDA library missing at import
        return f"unavailable: cupy not importable ({type(e).__name__})"
    if not device.is_gpu or device.kind != "cuda":
        return "unavailable: no GPU"
    try:
        if cupy.cuda.runtime.getDeviceCount() < 1:
            return "unavailable: no GPU"
    except Exception as e:  # noqa: BLE001 - cudaErrorInsufficientDriver and friends
        return f"unavailable: no GPU ({type(e).__name__})"
    return None


@provider(
    "gemm", "cupy_blas", library="cupy.matmul: cuBLAS through CuPy", enabled=cupy_reason, evidence=vendor_evidence
)
def gemm_cupy_blas(a: torch.Tensor, b: torch.Tensor, *, allow_tf32: bool = False) -> torch.Tensor:
    import cupy

    if allow_tf32:
        # CuPy reads its TF32 switch (CUPY_TF32) once at import; it cannot be set per call.
        raise Unsupported("cupy.matmul's TF32 switch is the CUPY_TF32 environment variable, fixed at import")
    if a.dtype not in (torch.float32, torch.float16):
        raise Unsupported(f"cupy.matmul has no {a.dtype}")
    # On torch's current stream, as our kernels (cuda_kernels.launch): CuPy's own default stream is another
    # stream, so torch's timing events would not bracket the GEMM and later torch work would not wait for it.
    stream = torch.cuda.current_stream(a.device)
    with cupy.cuda.Device(a.device.index), cupy.cuda.ExternalStream(stream.cuda_stream, a.device.index):
        c = cupy.matmul(cupy.from_dlpack(a), cupy.from_dlpack(b))
        return torch.from_dlpack(c)
