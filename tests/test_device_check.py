"""scripts/device-check refuses honestly where there is no GPU (it never reports skipped GPU tests as passed)."""
from __future__ import annotations

import subprocess

import pytest
import torch

from .conftest import REPO


def test_script_is_valid_bash():
    subprocess.run(["bash", "-n", str(REPO / "scripts" / "device-check")], check=True)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU: the script would really run")
def test_refuses_without_gpu(tmp_path):
    r = subprocess.run([str(REPO / "scripts" / "device-check"), str(tmp_path / "out")], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 3 and "no CUDA or ROCm device" in r.stderr
    assert not list((tmp_path / "out").iterdir())  # nothing written that could pass for a GPU result
