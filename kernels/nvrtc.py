"""CUDA C++ -> PTX with NVRTC, called directly through ctypes: no CUDA toolkit, no driver, no GPU.

CuPy's own compile path asks the driver for the device first and fails on a machine without one
(`cudaErrorInsufficientDriver`), and CuPy is an optional dependency; the static inspection must work
without either. The library comes from the pip package `nvidia-cuda-nvrtc-cu12` (site-packages/nvidia/
cuda_nvrtc/lib/libnvrtc.so.12), else from CUDA_HOME / CUDA_PATH, else from the loader's search path.

`compile_ptx` raises `NvrtcError` carrying NVRTC's log when a source does not compile, and caches
results in-process by (source text, headers, options, name expressions), so a test session or a
benchmark run compiles each program once.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import hashlib
import os
import threading
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

KERNEL_DIR = Path(__file__).resolve().parent

_NVRTC_SUCCESS = 0


class NvrtcError(RuntimeError):
    """NVRTC could not load or could not compile. `log` holds NVRTC's program log (compile errors with
    file:line, as the compiler printed them); `result` NVRTC's status string."""

    def __init__(self, message: str, log: str = "", result: str = ""):
        self.log = log
        self.result = result
        super().__init__(f"{message}\n{log.strip()}" if log.strip() else message)


def _candidates() -> list[str]:
    out = []
    try:
        import nvidia.cuda_nvrtc as pkg  # the pip wheel: a namespace package holding lib/libnvrtc.so.12

        for base in getattr(pkg, "__path__", []):
            out += sorted(str(p) for p in Path(base, "lib").glob("libnvrtc.so*") if "builtins" not in p.name
                          and ".alt." not in p.name)
    except ImportError:
        pass
    for env in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(env):
            out += sorted(str(p) for p in Path(os.environ[env], "lib64").glob("libnvrtc.so*"))
    found = ctypes.util.find_library("nvrtc")
    if found:
        out.append(found)
    return out


@lru_cache(maxsize=1)
def _lib() -> ctypes.CDLL:
    errors = []
    for path in _candidates():
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            errors.append(f"{path}: {e}")
            continue
        _declare(lib)
        return lib
    raise NvrtcError("libnvrtc not found: install the pip package nvidia-cuda-nvrtc-cu12 (or set CUDA_HOME)"
                     + ("".join(f"\n  {e}" for e in errors)))


def _declare(lib: ctypes.CDLL) -> None:
    c_int, c_size, c_char_p, c_void_p = ctypes.c_int, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_void_p
    prog_p = ctypes.POINTER(c_void_p)
    sigs = {
        "nvrtcVersion": (ctypes.POINTER(c_int), ctypes.POINTER(c_int)),
        "nvrtcCreateProgram": (prog_p, c_char_p, c_char_p, c_int, ctypes.POINTER(c_char_p),
                               ctypes.POINTER(c_char_p)),
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


def _compile(source: str, name: str, options: tuple[str, ...], name_expressions: tuple[str, ...],
             headers: tuple[tuple[str, str], ...]) -> PtxProgram:
    lib = _lib()
    prog = ctypes.c_void_p()
    hdr_src = [h[1].encode() for h in headers]
    hdr_name = [h[0].encode() for h in headers]
    _check(lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), name.encode(), len(headers),
                                  _arr(hdr_src), _arr(hdr_name)), "nvrtcCreateProgram")
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
            raise NvrtcError(f"NVRTC could not compile {name} ({_status(code)}; options: {' '.join(options)})",
                             log=log, result=_status(code))
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


def compile_ptx(source: str, *, name: str = "program.cu", arch: str = "compute_80",
                options: tuple[str, ...] = (), name_expressions: tuple[str, ...] = (),
                headers: dict[str, str] | None = None, include_dirs: tuple[Path, ...] = ()) -> PtxProgram:
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
