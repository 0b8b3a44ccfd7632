"""Kernels and vendor baselines, one op per file. Each module registers its providers with
`microbench.registry.provider`; importing this package registers them all."""
import importlib

# The provider modules; a module whose optional dependency is missing still imports and
# registers its providers, which then report why they are unavailable.
PROVIDER_MODULES = (
    "kernels.gemm_vendor",
    "kernels.conv_vendor",
)


def load_all() -> None:
    for name in PROVIDER_MODULES:
        importlib.import_module(name)
