"""The GPU's side of a run's conditions (core.conditions): one sample of its clocks, temperature, power and the
reasons the driver holds its clocks down, and the window between two samples, from the driver's cumulative
counters, so that a slowdown in the middle of a run is seen even when it is over by the end.

NVIDIA through NVML (nvidia-ml-py):
- the device is looked up by the PCI bus id PyTorch reports for CUDA device `index`
  (torch.cuda.get_device_properties: pci_domain_id, pci_bus_id, pci_device_id; nvmlDeviceGetHandleByPciBusId):
  NVML numbers every GPU of the machine, ignoring CUDA_VISIBLE_DEVICES and CUDA's fastest-first order, so its
  index 0 need not be ours. Without a CUDA context in this process (looking up the properties would create
  one) PyTorch's own CUDA_VISIBLE_DEVICES translation (torch.cuda._get_nvml_device_index) is used;
- the cumulative counters: nvmlDeviceGetViolationStatus per performance policy (violationTime: nanoseconds the
  policy held the clocks below the application clocks) and nvmlDeviceGetTotalEnergyConsumption (millijoules
  since the driver loaded, Volta and newer); their differences over the run are the window;
- each query on its own: one the driver does not support (NVMLError_NotSupported on many boards, e.g. the
  power limit of a GPU in a VM) is named under `unsupported` and loses no other field.
AMD (ROCm) through amdsmi where it is installed (ROCm's own Python package): the device by PCI BDF, clocks,
temperature, power, the energy accumulator (amdsmi_get_energy_count) and, on MI300-class chips, the violation
counters (amdsmi_get_violation_status). Without amdsmi the sample says so (`available: false` and why).
"""

from __future__ import annotations

import os

# nvmlDeviceGetViolationStatus's policies (nvmlPerfPolicyType_t): (label, whether it makes a run untrustworthy).
# A power cap is what a GPU running GEMMs flat out normally hits (recorded, not judged); thermal, board and
# reliability limits are judged. Low utilization is the idle GPU between calls: not a slowdown of the work.
VIOLATION_POLICIES = {
    "NVML_PERF_POLICY_POWER": ("power cap", False),
    "NVML_PERF_POLICY_THERMAL": ("thermal limit", True),
    "NVML_PERF_POLICY_SYNC_BOOST": ("sync boost", False),
    "NVML_PERF_POLICY_BOARD_LIMIT": ("board limit", True),
    "NVML_PERF_POLICY_RELIABILITY": ("reliability limit", True),
}
# NVML's clock event (throttle) reasons at one sample: (label, judged), as above.
CLOCK_EVENTS = {
    "nvmlClocksEventReasonSwPowerCap": ("software power cap", False),
    "nvmlClocksEventReasonSyncBoost": ("sync boost", False),
    "nvmlClocksEventReasonHwSlowdown": ("hardware slowdown", True),
    "nvmlClocksEventReasonSwThermalSlowdown": ("software thermal slowdown", True),
    "nvmlClocksEventReasonHwThermalSlowdown": ("hardware thermal slowdown", True),
    "nvmlClocksEventReasonHwPowerBrakeSlowdown": ("power brake", True),
    "nvmlClocksEventReasonBoardLimit": ("board limit", True),  # newer NVML only (absent: never matched)
    "nvmlClocksEventReasonReliability": ("reliability limit", True),
}
# amdsmi_get_violation_status's accumulated counters (amdsmi_violation_status_t; MI300 and newer): (label,
# judged). PPT is the package power limit (the power cap, not judged); the thermal ones are.
AMD_VIOLATIONS = {
    "acc_ppt_pwr": ("package power limit (PPT)", False),
    "acc_socket_thrm": ("socket thermal limit", True),
    "acc_prochot_thrm": ("processor hot", True),
    "acc_vr_thrm": ("voltage regulator thermal limit", True),
    "acc_hbm_thrm": ("HBM thermal limit", True),
}
_UNSUPPORTED_U64 = 2**64 - 1  # amdsmi: "Max uint64 means unsupported"


def _guarded(out: dict, key: str, read) -> None:
    """out[key] = read(), or the failure under out["unsupported"][key]: one query never loses the others."""
    try:
        out[key] = read()
    except Exception as e:  # noqa: BLE001 - NVMLError_NotSupported, AmdSmiLibraryException, a missing binding
        out.setdefault("unsupported", {})[key] = f"{type(e).__name__}: {e}"[:160]


def _torch_cuda():
    try:
        import torch
    except ImportError:
        return None
    return torch


def pci_bus_id(index: int) -> str | None:
    """ "dddd:bb:dd.0" of CUDA/HIP device `index`, or None where no device context exists in this process yet
    (asking would create one: a parent that forks ranks afterwards must not)."""
    torch = _torch_cuda()
    if torch is None or not torch.cuda.is_initialized():
        return None
    try:
        p = torch.cuda.get_device_properties(index)
        return f"{p.pci_domain_id:04x}:{p.pci_bus_id:02x}:{p.pci_device_id:02x}.0"
    except (AttributeError, RuntimeError, AssertionError):
        return None


def gpu_state(index: int = 0) -> dict:
    """One sample of GPU `index` (PyTorch's numbering): NVML on NVIDIA, amdsmi on ROCm.
    {"available": False, "why": ...} where neither can say anything."""
    torch = _torch_cuda()
    if torch is not None and torch.version.hip is not None:
        return amd_state(index)
    return nvml_state(index)


def _nvml_handle(nv, index: int) -> tuple[object, str]:
    bus = pci_bus_id(index)
    if bus is not None:
        return nv.nvmlDeviceGetHandleByPciBusId(bus.encode()), f"PCI bus id {bus}"
    torch = _torch_cuda()
    try:
        nvml_index = torch.cuda._get_nvml_device_index(index) if torch is not None else index
    except Exception:  # noqa: BLE001 - a private helper; its absence leaves CUDA's index
        nvml_index = index
    return nv.nvmlDeviceGetHandleByIndex(nvml_index), f"NVML index {nvml_index} (CUDA_VISIBLE_DEVICES order)"


def nvml_state(index: int = 0) -> dict:
    try:
        import pynvml as nv
    except ImportError:
        return {"available": False, "why": "not available: nvidia-ml-py is not installed"}
    try:
        nv.nvmlInit()
    except Exception as e:  # noqa: BLE001 - NVMLError_LibraryNotFound, DriverNotLoaded, ...: no NVIDIA driver
        return {"available": False, "why": f"not available: {type(e).__name__}"}
    try:
        try:
            h, found = _nvml_handle(nv, index)
        except Exception as e:  # noqa: BLE001 - no such device
            return {"available": False, "why": f"not available: no NVML handle: {type(e).__name__}: {e}"}
        return {"available": True, "device": found, **_read_nvml(nv, h)}
    finally:
        try:
            nv.nvmlShutdown()
        except Exception:  # noqa: BLE001
            pass


def _read_nvml(nv, h) -> dict:
    out: dict = {}
    _guarded(out, "sm_clock_mhz", lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM))
    _guarded(out, "mem_clock_mhz", lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM))
    _guarded(out, "max_sm_clock_mhz", lambda: nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_SM))
    _guarded(out, "temperature_c", lambda: nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU))
    _guarded(out, "power_w", lambda: nv.nvmlDeviceGetPowerUsage(h) / 1000.0)
    _guarded(out, "power_limit_w", lambda: nv.nvmlDeviceGetEnforcedPowerLimit(h) / 1000.0)
    _guarded(out, "energy_mj", lambda: int(nv.nvmlDeviceGetTotalEnergyConsumption(h)))
    _guarded(
        out,
        "other_processes",
        lambda: sum(1 for p in nv.nvmlDeviceGetComputeRunningProcesses(h) if p.pid != os.getpid()),
    )
    get_reasons = (
        getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None)  # the name since NVML 12.2
        or nv.nvmlDeviceGetCurrentClocksThrottleReasons
    )
    _guarded(out, "clock_event_mask", lambda: int(get_reasons(h)))
    if "clock_event_mask" in out:
        seen = [v for attr, v in CLOCK_EVENTS.items() if out["clock_event_mask"] & getattr(nv, attr, 0)]
        out["clock_events"] = [label for label, _ in seen]
        out["throttle"] = [label for label, judged in seen if judged]
    violations: dict = {}
    for policy, (label, _) in VIOLATION_POLICIES.items():
        if hasattr(nv, policy):
            _guarded(
                violations,
                label,
                lambda p=getattr(nv, policy): int(nv.nvmlDeviceGetViolationStatus(h, p).violationTime),
            )
    out["violation_ns"] = {k: v for k, v in violations.items() if k != "unsupported"}
    if violations.get("unsupported"):
        out.setdefault("unsupported", {}).update({f"violation {k}": v for k, v in violations["unsupported"].items()})
    return out


def amd_state(index: int = 0) -> dict:
    try:
        import amdsmi
    except ImportError:
        return {
            "available": False,
            "why": "not recorded: amdsmi (ROCm's Python package, /opt/rocm/share/amd_smi) "
            "is not installed: no clocks, power or throttling of this AMD GPU",
        }
    try:
        amdsmi.amdsmi_init()
    except Exception as e:  # noqa: BLE001 - no amdgpu driver, no permission
        return {"available": False, "why": f"not available: amdsmi_init: {type(e).__name__}: {e}"[:200]}
    try:
        try:
            h, found = _amd_handle(amdsmi, index)
        except Exception as e:  # noqa: BLE001
            return {"available": False, "why": f"not available: no amdsmi handle: {type(e).__name__}: {e}"[:200]}
        return {"available": True, "device": found, **_read_amd(amdsmi, h)}
    finally:
        try:
            amdsmi.amdsmi_shut_down()
        except Exception:  # noqa: BLE001
            pass


def _amd_handle(amdsmi, index: int) -> tuple[object, str]:
    bus = pci_bus_id(index)
    if bus is not None:
        return amdsmi.amdsmi_get_processor_handle_from_bdf(bus), f"PCI BDF {bus}"
    return amdsmi.amdsmi_get_processor_handles()[index], f"amdsmi index {index}"


def _amd_number(info: dict, *keys: str) -> float:
    """The first of `keys` amdsmi gives a number for (ROCm 6.2 renamed clk to cur_clk; "N/A" where unsupported)."""
    for k in keys:
        v = info.get(k)
        if isinstance(v, (int, float)):
            return float(v)
    raise LookupError(f"none of {', '.join(keys)} given")


def _amd_energy_uj(amdsmi, h) -> float:
    e = amdsmi.amdsmi_get_energy_count(h)
    acc = e.get("energy_accumulator", e.get("power"))  # older bindings name the accumulator "power"
    return float(acc) * float(e["counter_resolution"])


def _read_amd(amdsmi, h) -> dict:
    out: dict = {}
    clk = amdsmi.AmdSmiClkType
    _guarded(out, "sm_clock_mhz", lambda: _amd_number(amdsmi.amdsmi_get_clock_info(h, clk.GFX), "cur_clk", "clk"))
    _guarded(out, "mem_clock_mhz", lambda: _amd_number(amdsmi.amdsmi_get_clock_info(h, clk.MEM), "cur_clk", "clk"))
    _guarded(out, "max_sm_clock_mhz", lambda: _amd_number(amdsmi.amdsmi_get_clock_info(h, clk.GFX), "max_clk"))
    _guarded(
        out,
        "temperature_c",
        lambda: amdsmi.amdsmi_get_temp_metric(  # the sensor PyTorch reads too
            h, amdsmi.AmdSmiTemperatureType.JUNCTION, amdsmi.AmdSmiTemperatureMetric.CURRENT
        ),
    )
    _guarded(
        out,
        "power_w",
        lambda: _amd_number(amdsmi.amdsmi_get_power_info(h), "average_socket_power", "current_socket_power"),
    )
    _guarded(out, "energy_mj", lambda: _amd_energy_uj(amdsmi, h) / 1000.0)
    _guarded(out, "other_processes", lambda: max(0, len(amdsmi.amdsmi_get_gpu_process_list(h)) - 1))
    status: dict = {}
    _guarded(status, "s", lambda: amdsmi.amdsmi_get_violation_status(h))
    raw = status.get("s") or {}
    out["violation_counts"] = {
        label: int(raw[k])
        for k, (label, _) in AMD_VIOLATIONS.items()
        if isinstance(raw.get(k), int) and raw[k] != _UNSUPPORTED_U64
    }
    if "unsupported" in status:
        out.setdefault("unsupported", {})["violation status"] = status["unsupported"]["s"]
    return out


def _judged_labels(table: dict) -> set[str]:
    return {label for label, judged in table.values() if judged}


def gpu_window(before: dict, after: dict, wall_s: float) -> dict:
    """The sample at the end with what happened in between, from the cumulative counters: energy and mean
    power, how long each policy held the clocks down (NVML) or how often each limit fired (amdsmi), and
    `throttle`, the judged reasons seen at either end or in between."""
    if not (before.get("available") and after.get("available")):
        return after
    out = dict(after)
    if "energy_mj" in before and "energy_mj" in after:
        energy_j = (after["energy_mj"] - before["energy_mj"]) / 1000.0
        out["window_energy_j"] = round(energy_j, 3)
        out["window_mean_power_w"] = round(energy_j / wall_s, 1) if wall_s > 0 else None
    throttle = set(after.get("throttle") or ()) | set(before.get("throttle") or ())
    held = {
        k: (after["violation_ns"][k] - v) / 1e6
        for k, v in (before.get("violation_ns") or {}).items()
        if k in (after.get("violation_ns") or {})
    }
    if held:
        out["window_held_down_ms"] = {k: round(v, 3) for k, v in held.items()}
        throttle |= {k for k, v in held.items() if v > 0} & _judged_labels(VIOLATION_POLICIES)
    fired = {
        k: after["violation_counts"][k] - v
        for k, v in (before.get("violation_counts") or {}).items()
        if k in (after.get("violation_counts") or {})
    }
    if fired:
        out["window_violations"] = fired
        throttle |= {k for k, v in fired.items() if v > 0} & _judged_labels(AMD_VIOLATIONS)
    out["throttle"] = sorted(throttle)
    return out
