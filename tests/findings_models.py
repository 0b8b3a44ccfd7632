"""--model factories for the before/after pairs of docs/findings.md ("Checks"): the DAWNBench ResNet-9 as the table
builds it, with one setting changed (`python -m microbench.decompose --model tests.findings_models:resnet9_nchw`)."""
from __future__ import annotations

import dataclasses


def resnet9_nchw():
    """ResNet-9 in NCHW: the table's resnet9 runs channels_last (models/benchmarks.toml); this is its "before"."""
    from microbench import models
    return dataclasses.replace(models.load("resnet9"), channels_last=False)


def matmul_mlp():
    """Two 1024-wide linear layers at batch 256 (the test's pair): GEMM-dominated, so its fp32 step's matrix work
    is most of the step on any CPU, and the bf16 autocast finding has something to move."""
    import torch
    from torch import nn

    def make_inputs(batch: int, device):
        gen = torch.Generator().manual_seed(1)
        x = torch.randn(batch, 1024, generator=gen).to(device)
        return x, torch.randn(batch, 1024, generator=gen).to(device)

    model = nn.Sequential(nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 1024))
    return model, make_inputs, nn.functional.mse_loss
