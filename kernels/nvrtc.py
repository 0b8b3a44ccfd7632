"""CUDA C++ -> PTX with NVRTC, called directly through ctypes: no CUDA toolkit, no driver, no GPU.

CuPy's own compile path asks the driver for the device first and fails on a machine without one
(`cudaErrorInsufficientDriver`), and CuPy is an optional dependency; the static inspection must work
without either. Where the library is found, first hit wins (`candidates()` lists them in this order):

1. a libnvrtc already mapped into this process (torch's CUDA build loads its own: /proc/self/maps), so
   that one process never holds two NVRTCs;
2. the pip wheels: CUDA 12's `nvidia-cuda-nvrtc-cu12` (site-packages/nvidia/cuda_nvrtc/lib/libnvrtc.so.12)
   and CUDA 13's `nvidia-cuda-nvrtc` (site-packages/nvidia/cu13/lib/libnvrtc.so.13), newest major first;
3. CUDA_HOME / CUDA_PATH (lib64/, lib/, targets/*/lib/), then /usr/local/cuda;
4. the loader's search path (ctypes.util.find_library).

`compile_ptx` raises `NvrtcError` carrying NVRTC's log when a source does not compile, and caches
results in-process by (source text, headers, options, name expressions), so a test session or a
benchmark run compiles each program once.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import hashlib
import os
import re
import sys
import threading
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from microbench.core.args import digits

KERNEL_DIR = Path(__file__).resolve().parent

_NVRTC_SUCCESS = 0


class NvrtcError(RuntimeError):
    """NVRTC could not load or could not compile. `log` holds NVRTC's program log (compile errors with
    file:line, as the compiler printed them); `result` NVRTC's status string."""

    def __init__(self, message: str, log: str = "", result: str = ""):
        self.log = log
        self.result = result
        super().__init__(f"{message}\n{log.strip()}" if log.strip() else message)


# libnvrtc.so.13, libnvrtc.so.12.9, or auditwheel's hashed copy inside a wheel (libnvrtc-672ee683.so.11.2);
# not libnvrtc-builtins, not the .alt. variant
_SONAME = re.compile(r"libnvrtc(-[0-9a-f]{8})?\.so(\.\d+)*$")


def _is_nvrtc(path: Path) -> bool:
    return bool(_SONAME.match(path.name))


def _major(path: Path) -> int:
    """libnvrtc.so.13 -> 13 (0 for an unversioned name), to try the newest major first."""
    parts = path.name.split(".so.")
    return int(parts[1].split(".")[0]) if len(parts) == 2 and digits(parts[1].split(".")[0]) else 0


def _in_dirs(dirs) -> list[str]:
    found = [p for d in dirs if Path(d).is_dir() for p in Path(d).iterdir() if _is_nvrtc(p)]
    return [str(p) for p in sorted(found, key=lambda p: (-_major(p), p.name))]


def loaded_in_process(maps: Path = Path("/proc/self/maps")) -> list[str]:
    """libnvrtc files this process has already mapped (torch's CUDA build loads one at start-up)."""
    try:
        text = maps.read_text()
    except OSError:
        return []
    paths = {line.split(None, 5)[5].strip() for line in text.splitlines() if len(line.split(None, 5)) == 6}
    return sorted(p for p in paths if _is_nvrtc(Path(p)))


def wheel_dirs(site_dirs=None) -> list[Path]:
    """lib/ folders of the NVRTC wheels under each site-packages folder: nvidia/cu13/lib (CUDA 13's
    `nvidia-cuda-nvrtc`), nvidia/cuda_nvrtc/lib (CUDA 12's `nvidia-cuda-nvrtc-cu12`), any nvidia/cu*/lib."""
    if site_dirs is None:
        site_dirs = [p for p in sys.path if p and Path(p).is_dir()]
    out = []
    for site in site_dirs:
        nv = Path(site) / "nvidia"
        if nv.is_dir():
            out += sorted((d / "lib" for d in nv.glob("cu[0-9]*")), reverse=True)
            out.append(nv / "cuda_nvrtc" / "lib")
    return [d for d in dict.fromkeys(out) if d.is_dir()]


def toolkit_dirs(environ=None) -> list[Path]:
    env = os.environ if environ is None else environ
    roots = [Path(env[k]) for k in ("CUDA_HOME", "CUDA_PATH") if env.get(k)] + [Path("/usr/local/cuda")]
    out = []
    for root in roots:
        out += [root / "lib64", root / "lib", *sorted(root.glob("targets/*/lib"))]
    return out


def candidates(site_dirs=None, environ=None, maps: Path = Path("/proc/self/maps")) -> list[str]:
    """Every libnvrtc this process could load, in the order they are tried (see the module's docstring)."""
    out = loaded_in_process(maps) + _in_dirs(wheel_dirs(site_dirs)) + _in_dirs(toolkit_dirs(environ))
    found = ctypes.util.find_library("nvrtc")
    if found:
        out.append(found)
    return list(dict.fromkeys(out))


@lru_cache(maxsize=1)
def _lib() -> ctypes.CDLL:
    errors = []
    for path in candidates():
        try:
            _preload_builtins(Path(path))
            lib = ctypes.CDLL(path)
        except OSError as e:
            errors.append(f"{path}: {e}")
            continue
        _declare(lib)
        return lib
    raise NvrtcError(
        "libnvrtc not found: install the pip package nvidia-cuda-nvrtc-cu12 (CUDA 12) or "
        "nvidia-cuda-nvrtc (CUDA 13), or set CUDA_HOME" + ("".join(f"\n  {e}" for e in errors))
    )


def _preload_builtins(lib_path: Path) -> None:
    """NVRTC 13 opens libnvrtc-builtins.so.13.x by name at its first compile, and the loader does not look
    beside libnvrtc (the CUDA 13 wheel's nvidia/cu13/lib is on no search path): "failed to open
    libnvrtc-builtins.so.13.0". Loading it first from the same folder makes that name resolve."""
    for p in sorted(lib_path.resolve().parent.glob("libnvrtc-builtins.so*")):
        if ".alt." not in p.name:
            ctypes.CDLL(str(p), mode=ctypes.RTLD_GLOBAL)


def library_path() -> str:
    """The file of the libnvrtc this process uses (raises NvrtcError when there is none)."""
    return _lib()._name


def _declare(lib: ctypes.CDLL) -> None:
    c_int, c_size, c_char_p, c_void_p = ctypes.c_int, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_void_p
    prog_p = ctypes.POINTER(c_void_p)
    sigs = {
        "nvrtcVersion": (ctypes.POINTER(c_int), ctypes.POINTER(c_int)),
        "nvrtcCreateProgram": (prog_p, c_char_p, c_char_p, c_int, ctypes.POINTER(c_char_p), ctypes.POINTER(c_char_p)),
        "nvrtcDestroyProgram": (prog_p,),
        "nvrtcAddNameExpression": (c_void_p, c_char_p),
        "nvrtcCompileProgram": (c_void_p, c_int, ctypes.POINTER(c_char_p)),
        "nvrtcGetProgramLogSize": (c_void_p, ctypes.POINTER(c_size)),
        "nvrtcGetProgramLog": (c_void_p, c_char_p),
        "nvrtcGetPTXSize": (c_void_p, ctypes.POINTER(c_size)),
        "nvrtcGetPTX": (c_void_p, c_char_p),
        "nvrtcGetLoweredName": (c_void_p, c_char_p, ctypes.POINTER(c_char_p)),
    }
    for name, args in sigs.items():
        fn = getattr(lib, name)
        fn.argtypes = list(args)
        fn.restype = c_int
    lib.nvrtcGetErrorString.argtypes = [c_int]
    lib.nvrtcGetErrorString.restype = c_char_p


def _status(code: int) -> str:
    return _lib().nvrtcGetErrorString(code).decode()


def _check(code: int, what: str) -> None:
    if code != _NVRTC_SUCCESS:
        raise NvrtcError(f"{what} failed: {_status(code)}", result=_status(code))


def version() -> tuple[int, int]:
    major, minor = ctypes.c_int(), ctypes.c_int()
    _check(_lib().nvrtcVersion(ctypes.byref(major), ctypes.byref(minor)), "nvrtcVersion")
    return major.value, minor.value


@dataclass(frozen=True)
class PtxProgram:
    """The PTX of one NVRTC compilation and the mangled name of every requested name expression."""

    name: str
    ptx: str
    lowered: dict[str, str]  # name expression -> mangled symbol in the PTX
    log: str  # warnings, if any
    options: tuple[str, ...]


def _arr(items: list[bytes]):
    return (ctypes.c_char_p * len(items))(*items) if items else None


def _compile(
    source: str,
    name: str,
    options: tuple[str, ...],
    name_expressions: tuple[str, ...],
    headers: tuple[tuple[str, str], ...],
) -> PtxProgram:
    lib = _lib()
    prog = ctypes.c_void_p()
    hdr_src = [h[1].encode() for h in headers]
    hdr_name = [h[0].encode() for h in headers]
    _check(
        lib.nvrtcCreateProgram(
            ctypes.byref(prog), source.encode(), name.encode(), len(headers), _arr(hdr_src), _arr(hdr_name)
        ),
        "nvrtcCreateProgram",
    )
    try:
        for expr in name_expressions:
            _check(lib.nvrtcAddNameExpression(prog, expr.encode()), f"nvrtcAddNameExpression({expr})")
        opts = [o.encode() for o in options]
        code = lib.nvrtcCompileProgram(prog, len(opts), _arr(opts))
        size = ctypes.c_size_t()
        _check(lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size)), "nvrtcGetProgramLogSize")
        buf = ctypes.create_string_buffer(size.value)
        _check(lib.nvrtcGetProgramLog(prog, buf), "nvrtcGetProgramLog")
        log = buf.value.decode(errors="replace")
        if code != _NVRTC_SUCCESS:
            raise NvrtcError(
                f"NVRTC could not compile {name} ({_status(code)}; options: {' '.join(options)})",
                log=log,
                result=_status(code),
            )
        _check(lib.nvrtcGetPTXSize(prog, ctypes.byref(size)), "nvrtcGetPTXSize")
        buf = ctypes.create_string_buffer(size.value)
        _check(lib.nvrtcGetPTX(prog, buf), "nvrtcGetPTX")
        ptx = buf.value.decode()
        lowered = {}
        for expr in name_expressions:
            out = ctypes.c_char_p()
            _check(lib.nvrtcGetLoweredName(prog, expr.encode(), ctypes.byref(out)), f"nvrtcGetLoweredName({expr})")
            lowered[expr] = out.value.decode()
        return PtxProgram(name=name, ptx=ptx, lowered=lowered, log=log, options=options)
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))


_cache: dict[str, PtxProgram] = {}
_cache_lock = threading.Lock()


def compile_ptx(
    source: str,
    *,
    name: str = "program.cu",
    arch: str = "compute_80",
    options: tuple[str, ...] = (),
    name_expressions: tuple[str, ...] = (),
    headers: dict[str, str] | None = None,
    include_dirs: tuple[Path, ...] = (),
) -> PtxProgram:
    """Compile CUDA C++ `source` to PTX for the virtual architecture `arch` (compute_80, compute_90a).

    `headers` maps include names to their text (NVRTC's in-memory headers: no file lookup, and part of
    the cache key); `include_dirs` adds `-I` directories. Raises NvrtcError with NVRTC's log on failure.
    """
    hdrs = tuple(sorted((headers or {}).items()))
    opts = (f"--gpu-architecture={arch}", "-std=c++17", *(f"-I{d}" for d in include_dirs), *options)
    key = hashlib.sha256(repr((source, name, opts, tuple(name_expressions), hdrs)).encode()).hexdigest()
    with _cache_lock:
        hit = _cache.get(key)
    if hit is not None:
        return hit
    prog = _compile(source, name, opts, tuple(name_expressions), hdrs)
    with _cache_lock:
        _cache[key] = prog
    return prog


def kernel_source(filename: str) -> tuple[str, dict[str, str]]:
    """A .cu file beside this module and the .cuh headers it may include (passed to NVRTC in memory, so
    that the cache key covers them and no include path is needed)."""
    source = (KERNEL_DIR / filename).read_text()
    headers = {p.name: p.read_text() for p in sorted(KERNEL_DIR.glob("*.cuh"))}
    return source, headers
