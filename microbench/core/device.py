"""Which device we run on, and its fingerprint: hardware and software provenance for every result."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from dataclasses import asdict, dataclass, field

import torch

from microbench.core.args import digits
from microbench.core.conditions import usable_cores
from microbench.core.datasheet import amd_product_name
from microbench.core.dtypes import cpu_native_bf16
from microbench.core.fingerprint import (
    fingerprint_line,  # noqa: F401 - where callers have found it
    installed_version,
)

# CPU flags that decide which vector / matrix units oneDNN and MKL can use.
CPU_ISA_FLAGS = (
    "avx2",
    "fma",
    "avx512f",
    "avx512_bf16",
    "avx512_fp16",
    "avx512_vnni",
    "amx_tile",
    "amx_bf16",
    "amx_int8",
    "amx_fp16",
)


@dataclass
class Device:
    """The device a run measures. `kind` is cpu, cuda (NVIDIA) or rocm (AMD through PyTorch's HIP build)."""

    kind: str
    torch_device: str  # "cpu" or "cuda:0" (ROCm devices are also "cuda" in PyTorch)
    name: str
    arch: str  # sm_90, gfx942, or the CPU architecture
    units: int  # SMs, CUs, or CPU cores available to this process
    memory_bytes: int
    clock_mhz: float | None
    isa_flags: tuple[str, ...] = ()
    l2_bytes: int | None = None
    extra: dict = field(default_factory=dict)

    @property
    def is_gpu(self) -> bool:
        return self.kind in ("cuda", "rocm")

    @property
    def native_bf16(self) -> bool:
        """bf16 arithmetic in hardware: a GPU that PyTorch says has it, or a CPU with AVX512-BF16 / AMX-BF16
        (on other CPUs PyTorch emulates bf16, slower than fp32)."""
        if self.is_gpu:
            return bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported())
        return cpu_native_bf16(self.isa_flags)

    def synchronize(self) -> None:
        if self.is_gpu:
            torch.cuda.synchronize()


def _cpuinfo() -> dict[str, str]:
    info: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if not line.strip():
                    if info:
                        break  # first processor block is enough
                    continue
                k, _, v = line.partition(":")
                info[k.strip()] = v.strip()
    except OSError:
        pass
    return info


def _cpu_clock_mhz(info: dict[str, str]) -> float | None:
    # cpufreq's maximum is the clock the estimate should use; virtual machines often lack it and
    # report only the nominal "cpu MHz".
    try:
        with open("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq") as f:
            return int(f.read()) / 1000.0
    except (OSError, ValueError):
        pass
    try:
        return float(info.get("cpu MHz", ""))
    except ValueError:
        return None


def _meminfo_bytes() -> int:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def cpu_device() -> Device:
    info = _cpuinfo()
    flags = set(info.get("flags", "").split())
    return Device(
        kind="cpu",
        torch_device="cpu",
        name=info.get("model name", platform.processor() or "cpu"),
        arch=platform.machine(),
        units=usable_cores(),
        memory_bytes=_meminfo_bytes(),
        clock_mhz=_cpu_clock_mhz(info),
        isa_flags=tuple(f for f in CPU_ISA_FLAGS if f in flags),
        extra={"torch_threads": torch.get_num_threads(), "vendor": info.get("vendor_id", "")},
    )


def _smi_query(fields: str) -> list[str] | None:
    exe = shutil.which("nvidia-smi")
    if not exe:
        return None
    try:
        out = subprocess.run(
            [exe, f"--query-gpu={fields}", "--format=csv,noheader,nounits", "-i", "0"],
            capture_output=True,
            text=True,
            timeout=20,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    return [s.strip() for s in out.stdout.strip().split(",")]


def gpu_device(index: int = 0) -> Device:
    props = torch.cuda.get_device_properties(index)
    rocm = torch.version.hip is not None
    extra: dict = {}
    clock = None
    if rocm:
        arch = getattr(props, "gcnArchName", "gfx?").split(":")[0]
        extra["hip_version"] = torch.version.hip
    else:
        arch = f"sm_{props.major}{props.minor}"
        extra["cuda_runtime"] = torch.version.cuda
        q = _smi_query("driver_version,clocks.max.sm,clocks.max.mem,power.limit")
        if q and len(q) == 4:
            extra["driver"] = q[0]
            extra["max_mem_clock_mhz"] = q[2]
            extra["power_limit_w"] = q[3]
            try:
                clock = float(q[1])
            except ValueError:
                pass
    try:
        extra["cudnn"] = torch.backends.cudnn.version()
    except Exception:  # noqa: BLE001 - optional library; absence is recorded, not fatal
        extra["cudnn"] = None
    name = props.name
    if rocm and not any(digits(ch) for ch in name):  # "AMD Radeon Graphics": no model in the name
        product = amd_product_name(arch, props.multi_processor_count, props.total_memory)
        if product:
            extra["reported_name"] = name
            name = product
    return Device(
        kind="rocm" if rocm else "cuda",
        torch_device=f"cuda:{index}",
        name=name,
        arch=arch,
        units=props.multi_processor_count,
        memory_bytes=props.total_memory,
        clock_mhz=clock,
        l2_bytes=getattr(props, "L2_cache_size", None),
        extra=extra,
    )


DEVICE_REQUESTS = ("auto", "cpu", "cuda")


def detect(requested: str = "auto") -> Device:
    """`auto` picks the GPU when PyTorch sees one; `cuda` without one is a clear error."""
    if requested not in DEVICE_REQUESTS:
        raise ValueError(f"unknown device {requested!r} (use auto, cpu or cuda)")
    if requested == "cpu":
        return cpu_device()
    if torch.cuda.is_available():
        return gpu_device()
    if requested == "cuda":
        raise RuntimeError(
            "--device cuda: PyTorch sees no CUDA or ROCm device here "
            f"(torch {torch.__version__}, built for CUDA {torch.version.cuda}, HIP {torch.version.hip})"
        )
    return cpu_device()


def software() -> dict:
    cupy = next(
        (v for d in ("cupy-cuda12x", "cupy-cuda13x", "cupy-cuda11x", "cupy") if (v := installed_version(d))), None
    )
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "torch_hip": torch.version.hip,
        "triton": installed_version("triton") or installed_version("pytorch-triton-rocm"),
        "cupy": cupy,
        "numpy": installed_version("numpy"),
        "onednn": torch.backends.mkldnn.is_available(),
        "os": platform.platform(),
    }


def fingerprint(device: Device) -> dict:
    """The `hardware` block of results.json."""
    d = asdict(device)
    d["isa_flags"] = list(device.isa_flags)
    d["memory_gib"] = round(device.memory_bytes / 2**30, 1)
    d["host_cpu"] = _cpuinfo().get("model name")
    return d


def quiet_profiler() -> None:
    """Keep Kineto's start/stop log lines (`USDT:... profiler_start`, `STAGE:...`) out of the commands' output:
    they are written to stderr at its default log level by every torch.profiler session. Read when the profiler
    first starts, so this runs before each `profile(...)`; a KINETO_LOG_LEVEL the user set wins."""
    os.environ.setdefault("KINETO_LOG_LEVEL", "6")  # above Kineto's highest (USDT) level
