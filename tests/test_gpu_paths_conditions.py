"""GPU conditions (core.gpumon through core.conditions) with fake NVML and amdsmi modules in sys.modules, modelling
their documented behaviour: NVML numbers every GPU of the machine whatever CUDA_VISIBLE_DEVICES says
(nvmlDeviceGetHandleByPciBusId finds ours by the bus id PyTorch reports), nvmlDeviceGetViolationStatus returns
a struct whose violationTime is cumulative nanoseconds, nvmlDeviceGetTotalEnergyConsumption cumulative
millijoules, and an unsupported query raises NVMLError_NotSupported; amdsmi_get_energy_count gives an
accumulator and its resolution in microjoules, amdsmi_get_violation_status accumulated counters with max uint64
meaning unsupported. The fake torch side is torch.cuda.is_initialized / get_device_properties patched."""

from __future__ import annotations

import sys
import types

import pytest
import torch

from microbench.core import conditions, gpumon


class NotSupported(Exception):
    pass


def _fake_nvml(throttle_ns_after: int, clocks=None):
    """Two GPUs on the bus; ours (CUDA 0, as CUDA_VISIBLE_DEVICES=1 makes it) is NVML's index 1 at 0000:41:00.0.
    Each sample advances energy by 50 J and, on the second, the thermal policy by `throttle_ns_after`; the
    power limit is unsupported (as on many virtualised boards)."""
    nv = types.SimpleNamespace()
    state = {"samples": 0}
    gpus = {b"0000:01:00.0": "other", b"0000:41:00.0": "ours"}
    nv.NVML_CLOCK_SM, nv.NVML_CLOCK_MEM, nv.NVML_TEMPERATURE_GPU = 1, 2, 0
    for i, name in enumerate(gpumon.VIOLATION_POLICIES):
        setattr(nv, name, i)
    nv.nvmlClocksEventReasonSwPowerCap, nv.nvmlClocksEventReasonHwThermalSlowdown = 0x4, 0x40
    nv.nvmlInit = lambda: state.__setitem__("samples", state["samples"] + 1)
    nv.nvmlShutdown = lambda: None
    nv.nvmlDeviceGetHandleByIndex = lambda i: ["other", "ours"][i]
    nv.nvmlDeviceGetHandleByPciBusId = lambda bus: gpus[bus]

    def only_ours(value):
        def read(h, *args):
            assert h == "ours", "NVML asked about another GPU than PyTorch's"
            return value(*args) if callable(value) else value

        return read

    nv.nvmlDeviceGetClockInfo = only_ours(lambda kind: (clocks or {1: 1980, 2: 3201})[kind])
    nv.nvmlDeviceGetMaxClockInfo = only_ours(1980)
    nv.nvmlDeviceGetTemperature = only_ours(61)
    nv.nvmlDeviceGetPowerUsage = only_ours(612_000)

    def unsupported(h):
        raise NotSupported("Not Supported")

    nv.nvmlDeviceGetEnforcedPowerLimit = unsupported
    nv.nvmlDeviceGetTotalEnergyConsumption = only_ours(lambda: 1_000_000 + 50_000 * state["samples"])
    nv.nvmlDeviceGetComputeRunningProcesses = only_ours([])
    nv.nvmlDeviceGetCurrentClocksEventReasons = only_ours(0x4)  # at each sample: only the power cap

    def violation(h, policy):
        assert h == "ours"
        thermal = policy == list(gpumon.VIOLATION_POLICIES).index("NVML_PERF_POLICY_THERMAL")
        ns = 5_000_000_000 + (throttle_ns_after if thermal and state["samples"] > 1 else 0)
        return types.SimpleNamespace(referenceTime=0, violationTime=ns)

    nv.nvmlDeviceGetViolationStatus = violation
    return nv


@pytest.fixture
def cuda_device_on_bus_41(monkeypatch):
    props = types.SimpleNamespace(pci_domain_id=0, pci_bus_id=0x41, pci_device_id=0, name="NVIDIA H200")
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: props)
    monkeypatch.setattr(torch.version, "hip", None)


def _run(monkeypatch, nv) -> dict:
    monkeypatch.setitem(sys.modules, "pynvml", nv)
    look = conditions.Conditions(conditions.ConditionSettings(sample_s=0.0), gpu_index=0).start()
    return look.stop()


def test_throttling_in_the_middle_of_the_run_is_seen_though_neither_sample_shows_it(monkeypatch, cuda_device_on_bus_41):
    doc = _run(monkeypatch, _fake_nvml(throttle_ns_after=250_000_000))
    before, during = doc["before"]["gpu"], doc["during"]["gpu"]
    assert before["device"] == "PCI bus id 0000:41:00.0" and before["sm_clock_mhz"] == 1980
    assert before["throttle"] == [] and before["clock_events"] == ["software power cap"]  # not judged
    assert during["window_held_down_ms"]["thermal limit"] == pytest.approx(250.0)
    assert during["window_held_down_ms"]["power cap"] == 0
    assert during["window_energy_j"] == pytest.approx(50.0)
    assert during["throttle"] == ["thermal limit"]
    assert doc["busy"] and any("thermal limit" in r for r in doc["reasons"])


def test_a_quiet_window_is_not_busy_and_an_unsupported_query_loses_only_itself(monkeypatch, cuda_device_on_bus_41):
    doc = _run(monkeypatch, _fake_nvml(throttle_ns_after=0))
    during = doc["during"]["gpu"]
    assert during["available"] and "power_limit_w" not in during
    assert during["unsupported"]["power_limit_w"].startswith("NotSupported")
    assert during["power_w"] == pytest.approx(612.0) and during["temperature_c"] == 61
    assert during["throttle"] == [] and not any("GPU" in r for r in doc["reasons"])


def test_without_a_cuda_context_nvml_follows_cuda_visible_devices(monkeypatch):
    """No context yet (a parent that will fork ranks): no properties are asked; PyTorch's own translation of
    CUDA_VISIBLE_DEVICES=1 gives NVML index 1, our GPU, not NVML's index 0."""
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    monkeypatch.setattr(torch.version, "hip", None)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    monkeypatch.setitem(sys.modules, "pynvml", _fake_nvml(0))
    state = gpumon.gpu_state(0)
    assert state["available"] and state["device"].startswith("NVML index 1")


def _fake_amdsmi(fired_after: int):
    state = {"n": 0}
    ns = types.SimpleNamespace(
        AmdSmiClkType=types.SimpleNamespace(GFX="gfx", MEM="mem"),
        AmdSmiTemperatureType=types.SimpleNamespace(JUNCTION="junction"),
        AmdSmiTemperatureMetric=types.SimpleNamespace(CURRENT="current"),
    )
    ns.amdsmi_init = lambda: state.__setitem__("n", state["n"] + 1)
    ns.amdsmi_shut_down = lambda: None
    ns.amdsmi_get_processor_handle_from_bdf = lambda bdf: {"0000:41:00.0": "ours"}[bdf]
    ns.amdsmi_get_clock_info = lambda h, kind: (
        {"cur_clk": 2100, "max_clk": 2100} if kind == "gfx" else {"clk": "N/A", "max_clk": 1300}
    )
    ns.amdsmi_get_temp_metric = lambda h, t, m: 70
    ns.amdsmi_get_power_info = lambda h: {"average_socket_power": "N/A", "current_socket_power": 700}
    ns.amdsmi_get_energy_count = lambda h: {"energy_accumulator": 1_000_000 * state["n"], "counter_resolution": 15.3}
    ns.amdsmi_get_gpu_process_list = lambda h: ["us"]
    ns.amdsmi_get_violation_status = lambda h: {
        "acc_ppt_pwr": 3 * state["n"],
        "acc_socket_thrm": 0 + (fired_after if state["n"] > 1 else 0),
        "acc_hbm_thrm": 2**64 - 1,
    }
    return ns


def test_rocm_conditions_through_amdsmi(monkeypatch, cuda_device_on_bus_41):
    monkeypatch.setattr(torch.version, "hip", "6.4")
    monkeypatch.setitem(sys.modules, "amdsmi", _fake_amdsmi(fired_after=2))
    look = conditions.Conditions(conditions.ConditionSettings(sample_s=0.0), gpu_index=0).start()
    doc = look.stop()
    during = doc["during"]["gpu"]
    assert during["device"] == "PCI BDF 0000:41:00.0" and during["sm_clock_mhz"] == 2100
    assert "mem_clock_mhz" in during["unsupported"] and during["power_w"] == 700
    assert during["window_energy_j"] == pytest.approx(15.3)  # 1e6 counts of 15.3 uJ between the samples
    assert during["window_violations"] == {"package power limit (PPT)": 3, "socket thermal limit": 2}
    assert "HBM thermal limit" not in during["violation_counts"]  # max uint64: unsupported
    assert during["throttle"] == ["socket thermal limit"] and doc["busy"]


def test_rocm_without_amdsmi_says_so(monkeypatch):
    monkeypatch.setattr(torch.version, "hip", "6.4")
    monkeypatch.setitem(sys.modules, "amdsmi", None)  # import fails
    state = gpumon.gpu_state(0)
    assert state["available"] is False and "amdsmi" in state["why"]
