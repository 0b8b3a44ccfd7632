"""Our CUDA C++ kernels from source to launch, shared by the CuPy wrappers (gemm_cupy.py, conv_cupy.py):

    .cu + mma_common.cuh --NVRTC (nvrtc.py)--> PTX --Triton's ptxas--> cubin for one sm_XY
         |                                                 |
         +--> static inspection (aot_builds, evidence)     +--> cupy.RawModule(path=cubin) on a GPU

All configurations of one .cu file (one name expression per template instantiation) are compiled as
one NVRTC program into one cubin per architecture, so the cubin that `python -m microbench.inspect`
disassembles for an architecture is, byte for byte, the cubin a GPU of that architecture loads, and the
providers' Tensor Core evidence is the SASS of the kernel they launched in it. Builds are cached
in-process (a GPU process compiles its architecture's cubin at the first call, in a few seconds).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from microbench.core.args import digits
from microbench.roofline import launches
from microbench.roofline.registry import Evidence
from microbench.roofline.sass import (
    AotBuild,
    StaticRecord,
    ToolchainError,
    assemble,
    inspect_build,
    ptxas_arch,
    toolchain,
)

from . import nvrtc

# mma.sync.m16n8k16 with bf16 operands and cp.async both need sm_80 (PTX ISA 9.7.14.5, 9.7.9.25).
MIN_SM = 80


@dataclass(frozen=True)
class Tile:
    """A CTA configuration: BM x BN output tile, BK-deep k-tiles, WM x WN per warp, STAGES in flight."""

    bm: int
    bn: int
    bk: int
    wm: int
    wn: int
    stages: int

    @property
    def threads(self) -> int:
        return 32 * (self.bm // self.wm) * (self.bn // self.wn)

    @property
    def smem_bytes(self) -> int:
        """Dynamic shared memory: STAGES x (A tile + B tile) of 16-bit elements (TileConfig::SMEM_BYTES)."""
        return self.stages * (self.bm + self.bn) * self.bk * 2

    @property
    def label(self) -> str:
        return f"{self.bm}x{self.bn}x{self.bk} w{self.wm}x{self.wn} s{self.stages}"

    def template_args(self) -> str:
        return f"{self.bm}, {self.bn}, {self.bk}, {self.wm}, {self.wn}, {self.stages}"


CPP_TYPES = {"fp16": "mma::F16", "bf16": "mma::BF16"}


def sm_number(arch: str) -> int | None:
    """ "sm_90" / "sm_90a" -> 90; None for anything else (gfx942, x86_64)."""
    if not arch.startswith("sm_"):
        return None
    number = "".join(ch for ch in arch[3:] if digits(ch))
    return int(number) if number else None


def virtual_arch(target: str) -> str:
    """The NVRTC architecture for a cubin target: sm_90 -> compute_90a (as ptxas builds sm_90a)."""
    return "compute_" + ptxas_arch(target).removeprefix("sm_")


@dataclass(frozen=True)
class Module:
    """Every configuration of one .cu file compiled for one target: one NVRTC program (one name
    expression per template instantiation), one PTX, one cubin."""

    source: str  # .cu file name in kernels/
    target: str
    ptx: str
    symbols: dict[str, str]  # name expression -> mangled kernel name in the PTX and the cubin
    cubin: bytes | None  # None when Triton's ptxas is unavailable (the driver then JIT-compiles the PTX)
    ptxas_log: str
    toolchain_error: str = ""


@cache
def build(source_file: str, exprs: tuple[str, ...], target: str) -> Module:
    """NVRTC -> PTX -> cubin for `target` (any sm_XY that ptxas knows). One program for all of a file's
    configurations: NVRTC and ptxas pay their start-up once, and cuobjdump disassembles once. Raises
    NvrtcError (with NVRTC's log) on a compile error; without ptxas, cubin is None and the error says why.
    A finished build is also kept on disk (cubin_cache_dir(), keyed by disk_key): the next process (the
    device check runs our kernels in several) loads it instead of compiling again."""
    src, headers = nvrtc.kernel_source(source_file)
    key = disk_key(src, headers, exprs, target)
    cached = _read_cached(key, source_file, target)
    if cached is not None:
        return cached
    prog = nvrtc.compile_ptx(src, name=source_file, arch=virtual_arch(target), name_expressions=exprs, headers=headers)
    try:
        cubin, log = assemble(prog.ptx, target)
        err = ""
    except ToolchainError as e:
        cubin, log, err = None, "", str(e)
    mod = Module(source_file, target, prog.ptx, dict(prog.lowered), cubin, log, err)
    if cubin is not None:
        _write_cached(key, mod)
    return mod


CUBIN_CACHE_ENV = "DAWNSCOPE_CUBIN_CACHE"  # a folder, or "0" for none


def cubin_cache_dir() -> Path | None:
    """$DAWNSCOPE_CUBIN_CACHE, else `cubins/` in the measured ceilings' cache folder (never the checkout)."""
    env = os.environ.get(CUBIN_CACHE_ENV)
    if env == "0":
        return None
    if env:
        return Path(env)
    from microbench.roofline.ceilings import cache_dir

    return cache_dir() / "cubins"


def disk_key(src: str, headers: dict[str, str], exprs: tuple[str, ...], target: str) -> str:
    """What a cubin depends on: the source and its headers, the name expressions, the target, NVRTC's version
    and the ptxas binary (its path, size and time: another Triton's ptxas is another key)."""
    h = hashlib.sha256()
    for part in (src, *(f"{k}\0{v}" for k, v in sorted(headers.items())), *exprs, target, repr(nvrtc.version())):
        h.update(part.encode() + b"\0")
    try:
        ptxas = toolchain()["ptxas"]
        st = ptxas.stat()
        h.update(f"{ptxas}\0{st.st_size}\0{st.st_mtime_ns}".encode())
    except (ToolchainError, OSError):
        h.update(b"no ptxas")
    return h.hexdigest()[:24]


def _read_cached(key: str, source_file: str, target: str) -> Module | None:
    folder = cubin_cache_dir()
    if folder is None:
        return None
    try:
        meta = json.loads((folder / f"{key}.json").read_text())
        cubin = (folder / f"{key}.cubin").read_bytes()
    except (OSError, ValueError):
        return None
    if hashlib.sha256(cubin).hexdigest() != meta.get("cubin_sha256"):
        return None  # a torn write: compile again
    return Module(source_file, target, meta["ptx"], dict(meta["symbols"]), cubin, meta["ptxas_log"], "")


def _write_cached(key: str, mod: Module) -> None:
    """The cubin, then its record (written last, naming the cubin's hash): each by a rename, so a reader sees
    a whole pair or none. A read-only cache folder only costs the next process a compile."""
    folder = cubin_cache_dir()
    if folder is None:
        return
    meta = {
        "source": mod.source,
        "target": mod.target,
        "ptx": mod.ptx,
        "symbols": mod.symbols,
        "ptxas_log": mod.ptxas_log,
        "cubin_sha256": hashlib.sha256(mod.cubin).hexdigest(),
    }
    try:
        folder.mkdir(parents=True, exist_ok=True)
        for name, data in ((f"{key}.cubin", mod.cubin), (f"{key}.json", json.dumps(meta).encode())):
            fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-")
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, folder / name)
    except OSError:
        pass


def build_many(jobs: Sequence[tuple[str, tuple[str, ...], str]]) -> list[Module]:
    """Builds in parallel: NVRTC runs in a foreign call without the GIL, ptxas in a subprocess."""
    with ThreadPoolExecutor(max_workers=max(1, min(len(jobs), os.cpu_count() or 1))) as pool:
        return list(pool.map(lambda j: build(*j), jobs))


def aot_build(
    mod: Module, expr: str, kernel: str, config: str, dtype: str, smem_bytes: int, wants_wgmma: bool = False
) -> AotBuild:
    if mod.cubin is None:
        raise ToolchainError(mod.toolchain_error)
    return AotBuild(
        kernel=kernel,
        config=config,
        target=mod.target,
        cubin=mod.cubin,
        default=True,
        wants_wgmma=wants_wgmma,
        dtype=dtype,
        ptxas_log=mod.ptxas_log,
        dynamic_shared_bytes=smem_bytes,
        function=mod.symbols[expr],
    )


@cache
def _record(
    source_file: str,
    exprs: tuple[str, ...],
    expr: str,
    target: str,
    kernel: str,
    config: str,
    dtype: str,
    smem: int,
    wants_wgmma: bool,
) -> StaticRecord:
    return inspect_build(aot_build(build(source_file, exprs, target), expr, kernel, config, dtype, smem, wants_wgmma))


def static_evidence(
    source_file: str,
    exprs: tuple[str, ...],
    expr: str,
    target: str,
    kernel: str,
    config: str,
    dtype: str,
    smem: int,
    wants_wgmma: bool = False,
) -> Evidence:
    """The SASS of exactly the cubin this architecture runs: Tensor Core instructions present or not."""
    try:
        rec = _record(source_file, exprs, expr, target, kernel, config, dtype, smem, wants_wgmma)
    except Exception as e:  # noqa: BLE001 - evidence is best effort; the measurement stands without it
        return Evidence("unknown", f"static SASS inspection failed: {type(e).__name__}: {e}")
    return Evidence("yes" if rec.tensor_core_instructions else "no", rec.evidence())


@dataclass(frozen=True)
class Launch:
    source: str
    exprs: tuple[str, ...]  # the module's configurations (the build it came from)
    expr: str
    kernel: str
    config: str
    dtype: str
    smem_bytes: int
    wants_wgmma: bool = False


def report(launch: Launch) -> None:
    """A wrapper's launch, into microbench.roofline.launches' record: the evidence hook then names the kernel
    that really ran (the tile and layout depend on the operands' strides and the device), not a guess."""
    launches.report_launch(launch.kernel, launch.config, detail=launch)


def evidence_of_launch(device, call: Callable[[], object]) -> Evidence:
    target = device_target(device)
    if target is None:
        return Evidence("unknown", f"no SASS for {device.kind} {device.arch}")
    with launches.launch_record() as ran:
        call()
        device.synchronize()
    ours = [r.detail for r in ran if isinstance(r.detail, Launch)]
    if not ours:
        return Evidence("unknown", "the call launched no kernel (an empty problem)")
    launch = ours[-1]
    return static_evidence(
        launch.source,
        launch.exprs,
        launch.expr,
        target,
        launch.kernel,
        launch.config,
        launch.dtype,
        launch.smem_bytes,
        launch.wants_wgmma,
    )


def device_target(device) -> str | None:
    """The cubin target of a measured device (`Device.arch` is sm_XY on NVIDIA GPUs)."""
    return device.arch if device.kind == "cuda" and sm_number(device.arch) else None


def cupy_kernel_reason(device) -> str | None:
    """`enabled` hook of the `cupy` providers: CuPy and an NVIDIA GPU of sm_80 or newer, and NVRTC."""
    from .gemm_vendor import cupy_reason

    why = cupy_reason(device)
    if why:
        return why
    sm = sm_number(device.arch)
    if sm is None or sm < MIN_SM:
        return f"unavailable: {device.arch} is older than sm_{MIN_SM} (mma.sync m16n8k16 bf16, cp.async)"
    try:
        nvrtc.version()
    except nvrtc.NvrtcError as e:
        return f"unavailable: {str(e).splitlines()[0]}"
    return None


# ---------------------------------------------------------------------------------------------------
# Running on a GPU through CuPy
# ---------------------------------------------------------------------------------------------------
_tmpdir: Path | None = None


def _scratch() -> Path:
    global _tmpdir
    if _tmpdir is None:
        _tmpdir = Path(tempfile.mkdtemp(prefix="dawnscope-cubin-"))
    return _tmpdir


@cache
def _module(source_file: str, exprs: tuple[str, ...], device_index: int, target: str):
    import cupy

    mod = build(source_file, exprs, target)
    stem = f"{Path(source_file).stem}-{hashlib.sha1(f'{exprs} {target}'.encode()).hexdigest()[:16]}"
    if mod.cubin is not None:
        path = _scratch() / f"{stem}.cubin"
        path.write_bytes(mod.cubin)
    else:
        path = _scratch() / f"{stem}.ptx"
        path.write_text(mod.ptx)
    with cupy.cuda.Device(device_index):
        return cupy.RawModule(path=str(path)), mod.symbols


@cache
def load(source_file: str, exprs: tuple[str, ...], expr: str, device_index: int, target: str, smem_bytes: int):
    """A cupy.RawKernel for one configuration on one device, from the file's cubin built by Triton's ptxas
    for this device's architecture (the cubin the static inspection reads), or from its PTX, for the
    driver to JIT-compile, when ptxas cannot build for this architecture."""
    import cupy

    raw, symbols = _module(source_file, exprs, device_index, target)
    with cupy.cuda.Device(device_index):
        kernel = raw.get_function(symbols[expr])
        # Above 48 KiB of dynamic shared memory a kernel must opt in (cudaFuncAttributeMaxDynamicSharedMemorySize).
        kernel.max_dynamic_shared_size_bytes = smem_bytes
    return kernel


@cache
def _properties(device_index: int) -> dict:
    import cupy

    return cupy.cuda.runtime.getDeviceProperties(device_index)


def smem_limit(device_index: int) -> int:
    """The most dynamic shared memory one CTA may opt in to (cudaDevAttrMaxSharedMemoryPerBlockOptin)."""
    return int(_properties(device_index)["sharedMemPerBlockOptin"])


def sm_count(device_index: int) -> int:
    return int(_properties(device_index)["multiProcessorCount"])


@cache
def _capability(device_index: int) -> tuple[int, int]:
    import torch

    return torch.cuda.get_device_capability(device_index)


def target_of(t) -> str:
    """The cubin target of a CUDA tensor's device: sm_XY."""
    major, minor = _capability(t.device.index)
    return f"sm_{major}{minor}"


def launch(kernel, grid: tuple[int, int, int], block: tuple[int, int, int], smem_bytes: int, args: tuple, like) -> None:
    """Launch on the torch tensor `like`'s device and on torch's current stream there, so that timing with
    torch.cuda events and later torch work order correctly after the kernel. Torch tensors among `args`
    cross into CuPy with DLPack (zero copy) under that same stream, so the exchange needs no extra
    synchronisation; the kernel receives each view's data pointer (RawKernel ignores strides)."""
    import cupy
    import torch

    stream = torch.cuda.current_stream(like.device)
    with cupy.cuda.Device(like.device.index), cupy.cuda.ExternalStream(stream.cuda_stream, like.device.index):
        kernel(
            grid,
            block,
            tuple(cupy.from_dlpack(dlpack_view(a)) if isinstance(a, torch.Tensor) else a for a in args),
            shared_mem=smem_bytes,
        )


# dtypes CuPy cannot import through DLPack without the optional package ml_dtypes (CuPy 14: bf16, fp8)
_DLPACK_BITS = {"bfloat16": "int16", "float8_e4m3fn": "int8", "float8_e5m2": "int8"}


def dlpack_view(t):
    """`t` as a tensor CuPy imports without ml_dtypes: a bf16 (fp8) tensor as its int16 (int8) view, the
    same bytes at the same address. The kernels receive only the data pointer, so the dtype CuPy sees
    does not matter, and no optional dependency is needed to launch bf16 kernels."""
    import torch

    bits = _DLPACK_BITS.get(str(t.dtype).removeprefix("torch."))
    return t.view(getattr(torch, bits)) if bits else t


def pick(tiles: Sequence[Tile], ctas: Callable[[Tile], int], sms: int, smem_max: int) -> Tile:
    """The first (largest) tile that both fits in shared memory and yields at least one CTA per SM; else
    the smallest that fits (a small problem gets more, smaller CTAs)."""
    fitting = [t for t in tiles if t.smem_bytes <= smem_max]
    if not fitting:
        raise ValueError(f"no tile configuration fits in {smem_max} bytes of shared memory")
    for t in fitting:
        if ctas(t) >= sms:
            return t
    return fitting[-1]
