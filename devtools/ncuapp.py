"""The program devtools.ncucheck profiles under Nsight Compute (needs a CUDA device): one large GEMM
per entry of microbench/data/ncu_metrics.toml, in its order, each in a profiled window of its own: compiled and
run once (outside the window), then, between cudaProfilerStart and Stop, a marker kernel `dawnscope_mark_<label>`
followed by the GEMM. A GEMM that cannot run here is named with its reason and left out; the others are still
profiled.

A fault in a kernel ends the process's CUDA context (every later call fails), so:
- our CUDA C++ GEMMs, which no GPU has run, first run once each in a spawned process of their own
  (roofline/preflight.py); one that loses its context there is left out here, where the others still run;
- each GEMM is warmed up just before its own window, not all before the first, so a fault in one keeps the
  counters of every GEMM profiled before it, and the program stops at the first lost context, saying which.
"""

from __future__ import annotations

import sys

from microbench.core.shapes import Case, GemmShape
from microbench.roofline.faults import lost_context

# The GEMMs built from our own CUDA C++ (NVRTC through CuPy): label -> the provider that runs them.
_UNVERIFIED = {"cupy_mma_bf16": "cupy", "cupy_wgmma_bf16": "cupy_wgmma"}


def _gemms(n: int) -> dict:
    """label -> a call running that GEMM once, its operands made here (outside the profiled window)."""
    import torch

    from microbench.core.tf32 import tf32_allowed
    from microbench.kernels import gemm_cupy, gemm_triton

    a, b = (torch.randn(n, n, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    a32, b32 = (torch.randn(n, n, device="cuda", dtype=torch.float32) for _ in range(2))

    def fp32_no_tf32():
        with tf32_allowed(False):  # IEEE fp32: the FMA pipe only
            return a32 @ b32

    return {
        "cublas_bf16": lambda: a @ b,
        "cublas_fp32_no_tf32": fp32_no_tf32,
        "triton_bf16": lambda: gemm_triton.gemm_triton(a, b),
        "cupy_mma_bf16": lambda: gemm_cupy.gemm_cupy(a, b),
        "cupy_wgmma_bf16": lambda: gemm_cupy.gemm_cupy_wgmma(a, b),
    }


def _marker(label: str):
    import cupy

    name = f"dawnscope_mark_{label}"
    return cupy.RawKernel(f'extern "C" __global__ void {name}() {{}}', name)


def preflight_faults(labels: list[str], n: int) -> dict[str, str]:
    """label -> why it lost the CUDA context in a process of its own, for our CUDA C++ GEMMs among `labels`."""
    from microbench.roofline import preflight

    case = Case("gemm", GemmShape(n, n, n), "bf16")
    by_provider = {_UNVERIFIED[label]: label for label in labels if label in _UNVERIFIED}
    pairs = [preflight.Pair(case, p, "microbench.kernels.gemm_cupy") for p in by_provider]
    bad = preflight.faults(pairs, "cuda") if pairs else {}
    return {by_provider[provider]: why for (_, provider), why in bad.items()}


def _say(label: str, what: str) -> None:
    print(f"ncuapp: {label}: {what}", file=sys.stderr, flush=True)


def _profile_one(label: str, call) -> None:
    """Warm up (compiles: Triton, NVRTC) outside the window, then the marker and the GEMM inside it."""
    import torch

    call()
    mark = _marker(label)
    mark((1,), (1,), ())
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    try:
        mark((1,), (1,), ())
        call()
        torch.cuda.synchronize()
    finally:
        torch.cuda.profiler.stop()


def run_gemms(cfg: dict) -> int:
    labels = [g["label"] for g in cfg["gemm"]]
    bad = preflight_faults(labels, int(cfg["size"]))
    calls = _gemms(int(cfg["size"]))
    profiled = 0
    for label in labels:
        if label in bad:
            _say(label, f"not profiled: lost the CUDA context in its own pre-flight process ({bad[label]})")
            continue
        try:
            _profile_one(label, calls[label])
        except Exception as e:  # noqa: BLE001 - a GEMM that cannot run here is reported, the rest still run
            _say(label, f"not profiled: {type(e).__name__}: {str(e).strip()[:200]}")
            if fault := lost_context(e):
                rest = labels[labels.index(label) + 1 :]
                print(
                    f"ncuapp: stopped: {label} lost the CUDA context ({fault}); the GEMMs profiled before it "
                    f"keep their counters; not run: {', '.join(rest) or 'none'}",
                    file=sys.stderr,
                    flush=True,
                )
                return 1
            continue
        profiled += 1
        print(f"ncuapp: {label}: profiled", flush=True)
    return 0 if profiled == len(labels) else 1
