"""AMD paths on a CPU. The ROCm device is faked by patching torch.version.hip and
torch.cuda.get_device_properties with the properties ROCm reports for an MI300X under a generic name
(gcnArchName "gfx942:sramecc+:xnack-", 304 CUs, 192 GiB, a 4 MiB L2 and no Infinity Cache among them); the
hipBLASLt TF32 path is faked by a torch.matmul that rounds its operands to TF32's 10-bit mantissa (what xf32
computes), the IEEE path is this CPU's own fp32 matmul."""

from __future__ import annotations

import types

import pytest
import torch

from microbench.core import device as device_mod
from microbench.core.config import load_config
from microbench.core.datasheet import amd_product_name, match_datasheet
from microbench.core.device import Device
from microbench.roofline import evidence
from microbench.roofline.registry import Evidence, Unsupported
from microbench.roofline.timing import flush_bytes

MI300X_PROPS = types.SimpleNamespace(
    name="AMD Radeon Graphics",
    gcnArchName="gfx942:sramecc+:xnack-",
    multi_processor_count=304,
    total_memory=205_822_885_888,
    L2_cache_size=4 * 2**20,
    major=9,
    minor=4,
)


@pytest.fixture
def rocm_mi300x(monkeypatch):
    monkeypatch.setattr(torch.version, "hip", "6.4.43482")
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: MI300X_PROPS)


def test_a_generically_named_mi300x_is_matched_by_arch_and_cu_count(rocm_mi300x):
    dev = device_mod.gpu_device(0)
    assert dev.kind == "rocm" and dev.arch == "gfx942"
    assert dev.name == "AMD Instinct MI300X" and dev.extra["reported_name"] == "AMD Radeon Graphics"
    entry, note = match_datasheet(dev.name, load_config().devices)
    assert entry is not None and "MI300X" in entry.name and "VF" not in entry.name, note
    # without the mapping, the reported name matches nothing
    assert match_datasheet("AMD Radeon Graphics", load_config().devices)[0] is None


def test_arch_and_cu_count_alone_never_guess():
    assert amd_product_name("gfx942", 304, 256 * 2**30) == "AMD Instinct MI325X"  # same die, more memory
    assert amd_product_name("gfx942", 38, 24 * 2**30) is None  # a CPX partition: no whole chip's peaks
    assert amd_product_name("gfx1100", 96, 24 * 2**30) is None


def test_a_named_device_keeps_its_name(rocm_mi300x, monkeypatch):
    monkeypatch.setattr(
        torch.cuda,
        "get_device_properties",
        lambda i: types.SimpleNamespace(**{**vars(MI300X_PROPS), "name": "AMD Instinct MI300X VF"}),
    )
    dev = device_mod.gpu_device(0)
    assert dev.name == "AMD Instinct MI300X VF" and "reported_name" not in dev.extra


def test_the_flush_is_larger_than_the_infinity_cache():
    mi300x = Device("rocm", "cuda:0", "AMD Instinct MI300X", "gfx942", 304, 192 * 2**30, None, l2_bytes=4 * 2**20)
    assert flush_bytes(mi300x) >= 2 * (256 * 2**20 + 4 * 2**20)
    h200 = Device("cuda", "cuda:0", "NVIDIA H200", "sm_90", 132, 141 * 2**30, None, l2_bytes=50 * 2**20)
    assert flush_bytes(h200) == 256 * 2**20  # the minimum: twice its 50 MiB L2 is less


@pytest.mark.parametrize("fp8", ["float8_e4m3fnuz", "float8_e4m3fn", "float8_e5m2"])
def test_fp8_in_every_flavour_is_skipped_by_the_vendor_providers(fp8):
    from microbench.kernels.conv_vendor import conv2d_torch
    from microbench.kernels.gemm_vendor import gemm_torch

    a = torch.zeros(8, 8).to(getattr(torch, fp8))
    with pytest.raises(Unsupported, match=fp8):
        gemm_torch(a, a)
    with pytest.raises(Unsupported, match=fp8):
        conv2d_torch(a, a, shape=None, direction="fwd")


def _rocm_cpu() -> Device:
    return Device("rocm", "cpu", "AMD Instinct MI300X", "gfx942", 304, 192 * 2**30, None)


def test_a_tf32_row_that_ran_as_ieee_fp32_is_flagged(monkeypatch):
    monkeypatch.setattr(evidence, "_TF32_RAN", {})
    monkeypatch.delenv("HIPBLASLT_ALLOW_TF32", raising=False)
    case = types.SimpleNamespace(op="gemm", dtype="tf32")
    ev = evidence._with_tf32_check(Evidence("yes", "kernel name Cijk_..."), case, _rocm_cpu())
    assert "IEEE fp32 ran" in ev.evidence
    assert ev.fallback and "HIPBLASLT_ALLOW_TF32=unset" in ev.fallback


def test_a_tf32_row_that_ran_as_tf32_says_so(monkeypatch):
    monkeypatch.setattr(evidence, "_TF32_RAN", {})
    real = torch.matmul

    def xf32(a, b):  # TF32: operands rounded to a 10-bit mantissa, products summed in fp32
        def tf32(t):
            return (t.view(torch.int32) & ~0x1FFF).view(torch.float32)

        return real(tf32(a), tf32(b))

    monkeypatch.setattr(torch, "matmul", xf32)
    case = types.SimpleNamespace(op="gemm", dtype="tf32")
    ev = evidence._with_tf32_check(Evidence("yes", "kernel name"), case, _rocm_cpu())
    assert "TF32 (xf32) ran" in ev.evidence and ev.fallback is None
    fp32 = types.SimpleNamespace(op="gemm", dtype="fp32")
    assert evidence._with_tf32_check(Evidence("yes", "k"), fp32, _rocm_cpu()).evidence == "k"
