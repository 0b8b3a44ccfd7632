"""a GEMM that faults must not lose
the counters of the GEMMs profiled before it, and our CUDA C++ GEMMs meet their faults in a process of their own.

No GPU here: the CUDA calls the program makes (torch.cuda.synchronize, cudaProfilerStart/Stop, the marker
kernel, each GEMM) are replaced by a log, and a fault is modelled as the CUDA Runtime API documents a sticky
error: the faulting call raises PyTorch's text for cudaErrorIllegalAddress and every later call in the process
raises it too. ncu profiles only kernels inside a Start/Stop window (--profile-from-start off), so the GEMMs
whose window closed before the fault are the ones whose counters are kept."""

from __future__ import annotations

import pytest
import torch

from devtools import ncuapp
from microbench.roofline import preflight

LABELS = ["cublas_bf16", "cublas_fp32_no_tf32", "triton_bf16", "cupy_mma_bf16", "cupy_wgmma_bf16"]
ERROR = "CUDA error: an illegal memory access was encountered"


class Device:
    def __init__(self, faulty: str | None):
        self.faulty, self.lost, self.log = faulty, False, []

    def _ok(self):
        if self.lost:
            raise RuntimeError(ERROR)

    def gemm(self, label):
        def call():
            self._ok()
            if label == self.faulty:
                self.lost = True
                raise RuntimeError(ERROR)
            self.log.append(("gemm", label))

        return call

    def marker(self, label):
        def mark(*args):
            self._ok()
            self.log.append(("mark", label))

        return mark

    def start(self):
        self.log.append(("start",))

    def stop(self):
        self.log.append(("stop",))


@pytest.fixture
def device(monkeypatch):
    def make(faulty=None, preflight_bad=None):
        d = Device(faulty)
        monkeypatch.setattr(ncuapp, "_gemms", lambda n: {label: d.gemm(label) for label in LABELS})
        monkeypatch.setattr(ncuapp, "_marker", d.marker)
        monkeypatch.setattr(ncuapp, "preflight_faults", lambda labels, n: dict(preflight_bad or {}))
        monkeypatch.setattr(torch.cuda, "synchronize", d._ok)
        monkeypatch.setattr(torch.cuda.profiler, "start", d.start)
        monkeypatch.setattr(torch.cuda.profiler, "stop", d.stop)
        return d

    return make


CFG = {"size": 64, "gemm": [{"label": label} for label in LABELS]}


def _windows(log):
    """The GEMMs profiled inside a closed Start/Stop window."""
    out, inside = [], False
    for e in log:
        inside = {"start": True, "stop": False}.get(e[0], inside)
        if e[0] == "gemm" and inside:
            out.append(e[1])
    return out


def test_every_gemm_in_its_own_window(device):
    d = device()
    assert ncuapp.run_gemms(CFG) == 0
    assert _windows(d.log) == LABELS
    assert d.log.count(("start",)) == d.log.count(("stop",)) == len(LABELS)


def test_a_fault_keeps_the_counters_of_the_gemms_before_it(device, capsys):
    d = device(faulty="triton_bf16")
    assert ncuapp.run_gemms(CFG) == 1
    assert _windows(d.log) == ["cublas_bf16", "cublas_fp32_no_tf32"]  # before: a fault in warm-up lost all five
    err = capsys.readouterr().err
    assert "stopped: triton_bf16 lost the CUDA context (cudaErrorIllegalAddress)" in err
    assert "not run: cupy_mma_bf16, cupy_wgmma_bf16" in err


def test_a_cuda_cpp_gemm_that_faulted_in_its_own_process_is_left_out(device, capsys):
    d = device(preflight_bad={"cupy_mma_bf16": "cudaErrorIllegalAddress: an illegal memory access"})
    assert ncuapp.run_gemms(CFG) == 1
    assert _windows(d.log) == ["cublas_bf16", "cublas_fp32_no_tf32", "triton_bf16", "cupy_wgmma_bf16"]
    assert "cupy_mma_bf16: not profiled: lost the CUDA context in its own pre-flight process" in capsys.readouterr().err


def test_preflight_asks_for_our_cuda_cpp_gemms_only(monkeypatch):
    asked = []

    def faults(pairs, kind):
        asked.extend((p.provider, p.case.shape.label(), p.case.dtype, kind) for p in pairs)
        return {(pairs[1].case, "cupy_wgmma"): "the pre-flight process was ended by SIGABRT in this call"}

    monkeypatch.setattr(preflight, "faults", faults)
    got = ncuapp.preflight_faults(LABELS, 64)
    assert asked == [("cupy", "64x64x64", "bf16", "cuda"), ("cupy_wgmma", "64x64x64", "bf16", "cuda")]
    assert got == {"cupy_wgmma_bf16": "the pre-flight process was ended by SIGABRT in this call"}
