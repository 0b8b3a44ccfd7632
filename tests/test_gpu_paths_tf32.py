"""core.tf32.tf32_allowed sets and restores TF32 through one API, so that both spellings of the
switches (legacy `allow_tf32` / `get_float32_matmul_precision()` and the new `fp32_precision` strings) read
correctly inside the context and after it. The switches are PyTorch's global context flags, the same on a CPU
build as on a CUDA one (the check that raised, aten's allowTF32CuBLAS / allowTF32CuDNN, runs on reading, not on
a GPU), so this runs here on the real torch; the caller who mixed the APIs first runs in its own process, to
leave this one's flags as they were."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import torch

from microbench.core.tf32 import tf32_allowed


def _both_spellings() -> dict:
    m, c = torch.backends.cuda.matmul, torch.backends.cudnn
    return {
        "matmul.allow_tf32": m.allow_tf32,
        "cudnn.allow_tf32": c.allow_tf32,
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "matmul.fp32_precision": m.fp32_precision,
        "conv.fp32_precision": c.conv.fp32_precision,
        "rnn.fp32_precision": c.rnn.fp32_precision,
    }


@pytest.mark.parametrize("allowed", [True, False])
def test_both_spellings_read_inside_and_after(allowed):
    before = _both_spellings()
    with tf32_allowed(allowed):
        inside = _both_spellings()  # raised RuntimeError here (tf32 on) before the fix
    assert inside["matmul.allow_tf32"] is allowed and inside["cudnn.allow_tf32"] is allowed
    assert inside["float32_matmul_precision"] == ("high" if allowed else "highest")
    want = "tf32" if allowed else ("ieee", "none")
    for key in ("matmul.fp32_precision", "conv.fp32_precision", "rnn.fp32_precision"):
        assert inside[key] in ((want,) if allowed else want), (key, inside[key])
    assert _both_spellings() == before


def test_nested_contexts_restore_in_order():
    before = _both_spellings()
    with tf32_allowed(True):
        with tf32_allowed(False):
            assert torch.backends.cuda.matmul.allow_tf32 is False
        assert torch.backends.cuda.matmul.allow_tf32 is True
        assert torch.backends.cudnn.conv.fp32_precision == "tf32"
    assert _both_spellings() == before


def test_a_caller_who_set_the_new_api_first():
    """The caller set only the new strings (legacy reads then raise in their own code); inside the context
    both spellings read, and on the way out the caller's new strings are back."""
    script = textwrap.dedent("""
        import torch
        from microbench.core.tf32 import tf32_allowed
        m, c = torch.backends.cuda.matmul, torch.backends.cudnn
        m.fp32_precision = "tf32"; c.conv.fp32_precision = "ieee"; c.rnn.fp32_precision = "ieee"
        with tf32_allowed(False):
            assert (m.allow_tf32, c.allow_tf32, torch.get_float32_matmul_precision()) == (False, False, "highest")
        assert (m.fp32_precision, c.conv.fp32_precision, c.rnn.fp32_precision) == ("tf32", "ieee", "ieee")
        assert (m.allow_tf32, c.allow_tf32) == (True, False)
        print("ok")
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]
