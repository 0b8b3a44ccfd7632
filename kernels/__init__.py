"""Kernels and vendor baselines, one op per file. Each module registers its providers with
`microbench.roofline.registry.provider`; importing this package registers them all."""

import importlib

# The provider modules; a module whose optional dependency is missing still imports and
# registers its providers, which then report why they are unavailable.
PROVIDER_MODULES = (
    "microbench.kernels.gemm_vendor",
    "microbench.kernels.conv_vendor",
    "microbench.kernels.gemm_triton",
    "microbench.kernels.conv_triton",
    "microbench.kernels.gemm_cupy",
    "microbench.kernels.conv_cupy",
    "microbench.kernels.attention_vendor",
)


def load_all() -> None:
    for name in PROVIDER_MODULES:
        importlib.import_module(name)


# Modules that define `aot_builds(target)` (see microbench/roofline/sass.py): compiled ahead of time for sm_80 and
# sm_90 and inspected by `python -m microbench.inspect` without a GPU.
STATIC_MODULES: tuple[str, ...] = (
    "microbench.kernels.gemm_triton",
    "microbench.kernels.conv_triton",
    "microbench.kernels.gemm_cupy",
    "microbench.kernels.conv_cupy",
)
