"""Ceilings: the datasheet matching rule, the CPU estimate, and measured ceilings on this machine."""

from __future__ import annotations

import dataclasses

import pytest

from microbench.core.config import load_config
from microbench.core.device import Device, cpu_device
from microbench.roofline.ceilings import (
    Ceiling,
    Ceilings,
    build_ceilings,
    cpu_estimate,
    datasheet_ceilings,
    match_datasheet,
)


@pytest.mark.parametrize(
    "name, key",
    [
        ("NVIDIA H200", "h200_sxm"),
        ("NVIDIA H100 80GB HBM3", "h100_sxm5"),
        ("NVIDIA H100 PCIe", "h100_pcie"),
        ("NVIDIA A100-SXM4-80GB", "a100_sxm4_80gb"),
        ("Tesla V100-SXM2-32GB", "v100_sxm2"),
        ("NVIDIA A10", "a10"),
        ("AMD Instinct MI300X", "mi300x"),
    ],
)
def test_datasheet_match(cfg, name, key):
    entry, note = match_datasheet(name, cfg.devices)
    assert entry is not None and entry.key == key and "matched" in note


@pytest.mark.parametrize(
    "name, word",
    [
        ("NVIDIA A10G", "unknown device"),  # AWS's part: no public datasheet, no entry
        ("NVIDIA GeForce RTX 4070", "unknown device"),
    ],
)
def test_datasheet_unknown_falls_back(cfg, name, word):
    entry, note = match_datasheet(name, cfg.devices)
    assert entry is None and word in note and "measured ceilings only" in note


def test_datasheet_ambiguous(cfg):
    # two entries the name matches with other peaks: none is guessed
    twin = dataclasses.replace(cfg.devices[0], key="twin", peaks_tflops={**cfg.devices[0].peaks_tflops, "fp16": 1.0})
    entry, note = match_datasheet("Tesla V100-SXM2-16GB", cfg.devices + (twin,))
    assert entry is None and note.startswith("ambiguous device") and "twin" in note


def test_datasheet_twins_with_the_same_peaks_give_the_chip(cfg):
    # the same compute peaks, another memory bandwidth: the chip's compute, the bandwidth said unknown
    twin = dataclasses.replace(cfg.devices[0], key="twin", memory_tbs=0.5)
    entry, note = match_datasheet("Tesla V100-SXM2-16GB", cfg.devices + (twin,))
    assert entry is not None and entry.level == "chip" and entry.memory_tbs is None
    assert entry.peaks_tflops == cfg.devices[0].peaks_tflops
    assert "compute peaks of GV100" in note and "memory bandwidth of this SKU unknown" in note


def test_live_device_properties_settle_the_sku(cfg):
    dev = Device("cuda", "cuda:0", "NVIDIA A100-SXM-80GB", "sm_80", 108, 85_198_045_184, None)
    items, key, note = datasheet_ceilings(dev, cfg)
    assert key == "chip:ga100" and "compute peaks of GA100" in note
    assert not [c for c in items if c.kind == "memory"]  # the SKU's bandwidth is not guessed


def test_cpu_estimate_uses_first_matching_tier(cfg):
    dev = dataclasses.replace(cpu_device(), units=4, clock_mhz=2000.0, isa_flags=("avx2", "fma", "avx512f"))
    items, note = cpu_estimate(dev, cfg)
    fp32 = next(c for c in items if c.dtype == "fp32")
    assert fp32.source == "estimate" and fp32.value == pytest.approx(4 * 2.0e9 * 64 / 1e12)
    assert "estimate" in note
    bare = dataclasses.replace(dev, isa_flags=())
    assert next(c for c in cpu_estimate(bare, cfg)[0] if c.dtype == "fp32").value == pytest.approx(4 * 2e9 * 8 / 1e12)


def test_roof_picks_min_of_memory_and_compute():
    c = Ceilings(
        [
            Ceiling("c", "compute", "bf16", 2.0, "TFLOP/s", "measured"),
            Ceiling("m", "memory", None, 100.0, "GB/s", "measured"),
        ]
    )
    assert c.roof("bf16", 10.0) == (pytest.approx(1.0), "memory")  # 100 GB/s * 10 FLOP/B = 1 TFLOP/s
    assert c.roof("bf16", 1000.0) == (2.0, "compute")
    assert c.roof("fp16", 1000.0) == (pytest.approx(100.0), "memory")  # no fp16 compute roof: memory only
    assert Ceilings().roof("bf16", 1.0) == (None, None)


def test_measured_ceilings_on_this_cpu(tiny_config):
    cfg = load_config(tiny_config)
    c = build_ceilings(cpu_device(), cfg)
    for item in c.items:
        assert {"name", "kind", "dtype", "value", "unit", "source"} <= set(item.as_dict())
    fp32 = c.compute("fp32")
    mem = c.memory()
    assert fp32 is not None and fp32.source == "measured" and fp32.value > 0
    assert mem is not None and mem.unit == "GB/s" and mem.value > 0
    assert c.compute("fp32", ("estimate",)) is not None
