"""The program microbench.devtools.ncucheck profiles under Nsight Compute (needs a CUDA device): one large GEMM
per entry of microbench/data/ncu_metrics.toml, each compiled and run once before profiling starts, then, between
cudaProfilerStart and Stop, a marker kernel `dawnscope_mark_<label>` followed by the GEMM. A GEMM that cannot run
here is named with its reason and left out; the others are still profiled."""
from __future__ import annotations

import sys


def _gemms(n: int) -> dict:
    """label -> a call running that GEMM once, its operands made here (outside the profiled window)."""
    import torch

    from microbench.kernels import gemm_cupy, gemm_triton

    a, b = (torch.randn(n, n, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    a32, b32 = (torch.randn(n, n, device="cuda", dtype=torch.float32) for _ in range(2))

    def fp32_no_tf32():
        torch.backends.cuda.matmul.allow_tf32 = False  # IEEE fp32: the FMA pipe only
        return a32 @ b32

    return {"cublas_bf16": lambda: a @ b, "cublas_fp32_no_tf32": fp32_no_tf32,
            "triton_bf16": lambda: gemm_triton.gemm_triton(a, b),
            "cupy_mma_bf16": lambda: gemm_cupy.gemm_cupy(a, b),
            "cupy_wgmma_bf16": lambda: gemm_cupy.gemm_cupy_wgmma(a, b)}


def _marker(label: str):
    import cupy

    name = f"dawnscope_mark_{label}"
    return cupy.RawKernel(f'extern "C" __global__ void {name}() {{}}', name)


def run_gemms(cfg: dict) -> int:
    import torch

    calls = _gemms(int(cfg["size"]))
    ready = []
    for g in cfg["gemm"]:
        label = g["label"]
        try:
            calls[label]()  # compiles (Triton, NVRTC) and warms up outside the profiled window
            mark = _marker(label)
            mark((1,), (1,), ())
            torch.cuda.synchronize()
        except Exception as e:  # noqa: BLE001 - a GEMM that cannot run here is reported, the rest still run
            print(f"ncuapp: {label}: not profiled: {type(e).__name__}: {str(e).strip()[:200]}", file=sys.stderr)
            continue
        ready.append((label, mark))
    torch.cuda.profiler.start()
    try:
        for label, mark in ready:
            mark((1,), (1,), ())
            calls[label]()
            torch.cuda.synchronize()
            print(f"ncuapp: {label}: profiled", flush=True)
    finally:
        torch.cuda.profiler.stop()
    return 0 if len(ready) == len(cfg["gemm"]) else 1
