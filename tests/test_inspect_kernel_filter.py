"""`inspect --kernel NAME` with a name none of our kernels has: refused at once, one line naming our kernels,
without compiling anything (it compiled every kernel for every target first: 107 s on this 2-core CPU)."""

from __future__ import annotations

import pytest

from microbench.inspect import cli as inspect


def test_unknown_kernel_is_refused_before_compiling(monkeypatch, capsys):
    def compile_everything(*a, **kw):
        raise AssertionError("compiled before checking --kernel")

    monkeypatch.setattr(inspect, "run", compile_everything)
    assert inspect.main(["--kernel", "zzz"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --kernel = 'zzz': no kernel of ours has this in its name")
    assert len(err.splitlines()) == 1 and "triton_gemm" in err and "cuda_gemm_mma" in err


@pytest.mark.parametrize("name", ["gemm", "cuda", "triton_conv_bwd", "wgmma"])
def test_the_docs_filters_still_pass(name):
    # the filters docs/cuda.md, docs/triton.md and docs/commands.md use: each matches one of our kernel names
    assert any(name in n for n in inspect.kernel_names())
