"""cupy_blas runs on torch's current stream, not on CuPy's own default stream.

No GPU here: CuPy is replaced by a model of the documented behaviour (cupy.cuda.ExternalStream(ptr, device_id)
used as a context manager makes that stream CuPy's current one; cupy.matmul launches on the current stream;
leaving the block restores the previous one) and torch.cuda.current_stream by a stream with a known handle.
Whether cuBLAS then orders correctly with torch's events only a GPU shows."""

from __future__ import annotations

import contextlib
import sys
import types

import torch

from microbench.kernels import gemm_vendor

TORCH_STREAM = 0xBEEF


def _fake_cupy(launches: list):
    state = {"stream": "cupy default stream"}

    @contextlib.contextmanager
    def external_stream(ptr, device_id=-1):
        before, state["stream"] = state["stream"], ptr
        try:
            yield
        finally:
            state["stream"] = before

    def matmul(a, b):
        launches.append(state["stream"])
        return a @ b

    cuda = types.SimpleNamespace(ExternalStream=external_stream, Device=lambda index=None: contextlib.nullcontext())
    return types.SimpleNamespace(cuda=cuda, matmul=matmul, from_dlpack=lambda t: t)


def test_cupy_blas_launches_on_torchs_current_stream(monkeypatch):
    launches: list = []
    monkeypatch.setitem(sys.modules, "cupy", _fake_cupy(launches))
    monkeypatch.setattr(
        torch.cuda, "current_stream", lambda device=None: types.SimpleNamespace(cuda_stream=TORCH_STREAM)
    )
    a, b = torch.randn(8, 4), torch.randn(4, 8)
    c = gemm_vendor.gemm_cupy_blas(a, b)
    assert launches == [TORCH_STREAM]  # before: "cupy default stream"
    assert torch.equal(c, a @ b)
