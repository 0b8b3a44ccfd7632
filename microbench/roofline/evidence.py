"""How we know whether a vendor-library call used Tensor Cores (GPU) or matrix units (CPU).

GPU: run the call once under torch.profiler, read the names of the kernels it launched and classify them
with the shared kernel rules (evidence 3 of docs/design.md: the kernel name). CPU: run it once with oneDNN's
verbose mode on and classify the implementation oneDNN reports (`brg_matmul:avx512_core_bf16`). Our own
kernels bring stronger evidence (their SASS) through their provider's `evidence` hook instead.
"""

from __future__ import annotations

import ctypes
import os
import sys
import tempfile
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, replace

import tomllib
import torch

from microbench.core.device import Device
from microbench.core.resources import data_file
from microbench.roofline.registry import Evidence
from microbench.trace.classify import classify_cpu_impl, classify_kernel


def gpu_kernels(call: Callable[[], object]) -> dict[str, float]:
    """Kernel name -> total device time (us) of one call of `call`."""
    from torch.profiler import ProfilerActivity, profile

    from microbench.core.device import quiet_profiler

    quiet_profiler()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        call()
        torch.cuda.synchronize()
    times: dict[str, float] = defaultdict(float)
    for ev in prof.events():
        if ev.device_type == torch.autograd.DeviceType.CUDA:
            times[ev.name] += ev.device_time_total if hasattr(ev, "device_time_total") else ev.cuda_time_total
    return dict(times)


def from_kernel_names(times_us: dict[str, float]) -> Evidence:
    """Decide from the kernels of one call: the GEMM/conv kernels carry the verdict, weighted by time."""
    if not times_us:
        return Evidence("unknown", "the profiler saw no kernel")
    matrix = {n: t for n, t in times_us.items() if classify_kernel(n).cls in ("tc_gemm", "gemm")}
    if not matrix:
        top = max(times_us, key=times_us.get)
        return Evidence("no", f"no GEMM/conv kernel; top kernel {top!r} ({classify_kernel(top).rule})")
    top = max(matrix, key=matrix.get)
    share = matrix[top] / sum(times_us.values())
    c = classify_kernel(top)
    # the layer is named: a library name rule, or the name's structure (an inference, classify.EVIDENCE_LAYERS)
    how = "inferred from its structure" if c.basis == "structure (inferred)" else "matched"
    return Evidence(c.tensor_cores, f"kernel name {top!r} ({share:.0%} of the call's kernel time) {how} {c.rule}")


class _CaptureStdout:
    """Capture what C code writes to file descriptor 1 (oneDNN prints its verbose lines there)."""

    def __enter__(self):
        sys.stdout.flush()
        self._libc = ctypes.CDLL(None)
        self._tmp = tempfile.TemporaryFile(mode="w+b")
        self._saved = os.dup(1)
        self._libc.fflush(None)
        os.dup2(self._tmp.fileno(), 1)
        return self

    def __exit__(self, *exc):
        self._libc.fflush(None)
        os.dup2(self._saved, 1)
        os.close(self._saved)
        self._tmp.seek(0)
        self.text = self._tmp.read().decode(errors="replace")
        self._tmp.close()
        return False


@dataclass(frozen=True)
class OneDnnExec:
    """One executed oneDNN primitive, from its verbose line."""

    kind: str  # convolution, matmul, inner_product, reorder, ...
    impl: str  # brg_conv_fwd:avx512_core_bf16
    prop: str  # forward_training, backward_data, backward_weights, undef
    problem: str  # mb2_ic3oc8_ih32oh30kh3sh1dh0ph0_iw32ow30kw3sw1dw0pw0, 2x7200:7200x10
    time_ms: float | None


def onednn_records(call: Callable[[], object]) -> list[OneDnnExec]:
    """Every oneDNN primitive one call of `call` executed, with its problem and oneDNN's own time."""
    with _CaptureStdout() as cap:
        with torch.backends.mkldnn.verbose(torch.backends.mkldnn.VERBOSE_ON):
            call()
    out = []
    for line in cap.text.splitlines():
        f = line.split(",")
        # onednn_verbose,v1,primitive,exec,cpu,<kind>,<implementation>,<prop_kind>,<memory descriptors>,
        # <attributes>,<auxiliary>,<problem>,<exec time ms>
        if len(f) > 6 and f[0] == "onednn_verbose" and f[2] == "primitive" and f[3] == "exec":
            try:
                t = float(f[-1])
            except ValueError:
                t = None
            out.append(OneDnnExec(f[5], f[6], f[7] if len(f) > 7 else "", f[-2] if len(f) > 9 else "", t))
    return out


def onednn_implementations(call: Callable[[], object]) -> list[tuple[str, str]]:
    """(primitive kind, implementation) of every oneDNN primitive one call of `call` executed."""
    return [(r.kind, r.impl) for r in onednn_records(call)]


def from_onednn(impls: list[tuple[str, str]]) -> Evidence:
    compute = [(k, i) for k, i in impls if k in ("matmul", "convolution", "inner_product", "deconvolution")]
    if not compute:
        return Evidence("unknown", "no oneDNN primitive ran (MKL or an ATen kernel): its instructions are not visible")
    kind, impl = compute[0]
    c = classify_cpu_impl(impl)
    return Evidence(c.tensor_cores, f"oneDNN {kind} implementation {impl!r} matched {c.rule}")


def vendor_evidence(case, device: Device, call: Callable[[], object]) -> Evidence:
    """The `evidence` hook of the vendor-library providers."""
    try:
        if device.is_gpu:
            return _with_tf32_check(from_kernel_names(gpu_kernels(call)), case, device)
        return from_onednn(onednn_implementations(call))
    except Exception as e:  # noqa: BLE001 - evidence is best effort; the measurement stands without it
        return Evidence("unknown", f"could not profile the call: {type(e).__name__}: {e}")


_TF32_RAN: dict[str, tuple[bool, float]] = {}  # torch device -> (reduced precision ran, its relative error)


def tf32_ran(torch_device: str) -> tuple[bool, float]:
    """Whether torch.matmul with TF32 allowed really computes in reduced precision on this device, from its
    error against float64 (microbench/data/amd_chips.toml [tf32_probe]). On ROCm PyTorch's switch is not
    enough: hipBLASLt takes TF32 (xf32) only with HIPBLASLT_ALLOW_TF32=1 in some PyTorch versions, and gfx950
    has no xf32 at all; otherwise the call silently runs in IEEE fp32. Once per device and process."""
    if torch_device not in _TF32_RAN:
        from microbench.core.tf32 import tf32_allowed

        probe = tomllib.loads(data_file("amd_chips.toml").read_text())["tf32_probe"]
        g = torch.Generator(device="cpu").manual_seed(0)
        a, b = (torch.randn(probe["size"], probe["size"], generator=g, dtype=torch.float64) for _ in range(2))
        with tf32_allowed(True):
            got = torch.matmul(a.float().to(torch_device), b.float().to(torch_device)).double().cpu()
        ref = a.float().double() @ b.float().double()
        err = float((got - ref).norm() / ref.norm())
        _TF32_RAN[torch_device] = (err > probe["min_tf32_rel_err"], err)
    return _TF32_RAN[torch_device]


def _with_tf32_check(ev: Evidence, case, device: Device) -> Evidence:
    """A vendor tf32 GEMM row on ROCm says which precision ran; flagged as a fallback when it was IEEE fp32."""
    if device.kind != "rocm" or getattr(case, "dtype", None) != "tf32" or getattr(case, "op", None) != "gemm":
        return ev
    ran, err = tf32_ran(device.torch_device)
    said = (
        f"{ev.evidence}; tf32 probe: relative error {err:.2g} vs float64: {'TF32 (xf32)' if ran else 'IEEE fp32'} ran"
    )
    if ran:
        return replace(ev, evidence=said)
    env = os.environ.get("HIPBLASLT_ALLOW_TF32")
    return replace(
        ev,
        evidence=said,
        fallback="tf32 requested, IEEE fp32 ran (hipBLASLt: HIPBLASLT_ALLOW_TF32="
        f"{env if env is not None else 'unset'}; gfx950 has no xf32)",
    )
