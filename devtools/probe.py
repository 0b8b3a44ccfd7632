"""The environment probe of scripts/device-check: versions, the device, and the NVRTC -> ptxas -> cuobjdump
chain that the static evidence of our CUDA C++ kernels needs, tried end to end on a one-line kernel.
Each item is recorded as found or as the one-line reason it is not: the probe never stops at the first gap.
"""

from __future__ import annotations

import json
import platform
import subprocess
import sys
from pathlib import Path

from devtools.wheels import load_image, requirement_name, runtime_requirements
from microbench.core.fingerprint import installed_version
from microbench.kernels import nvrtc
from microbench.roofline import sass

PACKAGES = (
    "torch",
    "triton",
    "numpy",
    "cupy-cuda12x",
    "cupy-cuda13x",
    "nvidia-cuda-nvrtc-cu12",
    "nvidia-cuda-nvrtc",
    "ml_dtypes",
    "nvtx",
    "msgspec",
    "mlperf-logging",
    "rich",
    "matplotlib",
    "pytest",
)
_SAXPY = 'extern "C" __global__ void saxpy(float a, const float* x, float* y) { y[threadIdx.x] += a * x[threadIdx.x]; }'


def _try(fn):
    try:
        return fn()
    except Exception as e:  # noqa: BLE001 - a probe records every failure as data
        return {"error": f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"}


def versions() -> dict:
    out = {"python": platform.python_version(), **{p: installed_version(p) for p in PACKAGES}}
    out["missing_dependencies"] = missing_dependencies()
    return out


def missing_dependencies(pyproject: Path = Path(__file__).resolve().parents[1] / "pyproject.toml") -> list[str]:
    """The project's declared dependencies this environment lacks (a GPU image is used as it is: a stage that
    imports one of these fails, and this says why before it does). A dependency served by an installed
    equivalent (devtools/gpu_image.toml, [equivalents]: CUDA 13's NVRTC for the cu12 wheel) is not
    missing."""
    equivalents = load_image().get("equivalents", {})
    names = [requirement_name(r) for r in runtime_requirements(pyproject)]
    return [n for n in names if all(installed_version(e) is None for e in (n, *equivalents.get(n, [])))]


def device(dry: bool) -> dict:
    import torch

    from microbench.core import device as devmod

    d = devmod.detect("cpu" if dry else "cuda")
    return {"fingerprint": devmod.fingerprint(d), "torch_cuda": torch.version.cuda, "arch": d.arch}


def _tool_version(path) -> str:
    out = subprocess.run([str(path), "--version"], capture_output=True, text=True, timeout=30).stdout
    return out.strip().splitlines()[-1] if out.strip() else "?"


def chain(arch: str) -> dict:
    """NVRTC -> PTX -> ptxas -> cubin -> cuobjdump for this device's architecture (sm_80 in a dry run)."""
    target = arch if arch.startswith("sm_") else "sm_80"
    tools = sass.toolchain()
    out = {
        "nvrtc_library": nvrtc.library_path(),
        "nvrtc_version": ".".join(map(str, nvrtc.version())),
        "ptxas": str(tools["ptxas"]),
        "ptxas_version": _tool_version(tools["ptxas"]),
        "cuobjdump_version": _tool_version(tools["cuobjdump"]),
        "target": target,
    }
    ptx = nvrtc.compile_ptx(_SAXPY, name="saxpy.cu", arch="compute_" + sass.ptxas_arch(target).removeprefix("sm_")).ptx
    out["ptx_version"] = sass.ptx_version(ptx)
    cubin, log = sass.assemble(ptx, target)
    out["ptxas_note"] = log.splitlines()[0] if log.startswith("PTX .version") else ""
    ops = sass.opcode_counts(sass.disassemble(cubin))
    out["sass_ffma"] = ops["FFMA"]
    out["ok"] = ops["FFMA"] > 0
    return out


def write_probe(path: Path, dry: bool = False) -> int:
    doc = {"dry_run": dry, "versions": _try(versions), "device": _try(lambda: device(dry))}
    arch = doc["device"].get("arch", "") if isinstance(doc["device"], dict) else ""
    doc["chain"] = _try(lambda: chain(arch))
    Path(path).write_text(json.dumps(doc, indent=1))
    failed = [k for k in ("versions", "device", "chain") if "error" in doc[k]]
    for k in failed:
        print(f"probe: {k}: {doc[k]['error']}", file=sys.stderr)
    print(json.dumps(doc, indent=1))
    return 1 if failed else 0
