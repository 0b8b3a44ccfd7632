"""Which fix `verify` applies for a finding, and how (data/verify.toml): the "after" setting of the pair, or why the
fix is not applied to this model on this device."""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cache

import tomllib

from microbench.core.resources import data_file
from microbench.decompose import allocator

from .pair import Setting


@dataclass(frozen=True)
class Plan:
    finding: str
    fix: str
    after: Setting | None  # None: not applied
    why_not: str | None = None
    # the "after" process's added environment, where the fix acts from a process's start: timed in pairs of fresh
    # processes (pair.process_pairs), the setting itself unchanged
    env: dict[str, str] | None = None


@cache
def _data() -> dict:
    return tomllib.loads(data_file("verify.toml").read_text())


def best_16bit(device) -> str:
    """The chip's best 16-bit type for autocast: bf16 where the device computes it (every CPU torch runs bf16;
    a GPU from Ampere / CDNA2 on), else fp16."""
    if device.kind == "cpu":
        return "bf16"
    import torch

    return "bf16" if torch.cuda.is_bf16_supported() else "fp16"


def _env(name: str) -> dict[str, str]:
    """The environment a process-start fix sets (data/verify.toml `env`)."""
    if name == "allocator":
        return allocator.fixed_env()
    raise ValueError(f"data/verify.toml: unknown env {name!r}")


def plan(finding: dict, base: Setting, device) -> Plan:
    """The fix for one finding on this device: the pair's "after" setting, or why none. Where the finding states its
    fix as settings (`fix_setting`: the CPU dataloader rule's one worker, and the threads it leaves the
    step), those are applied, so that the check measures the fix the finding printed."""
    finding_id = finding["id"]
    own = finding.get("fix_setting") or {}
    data = _data()
    entry = data["fixes"].get(finding_id)
    kind = "cuda" if device.is_gpu else "cpu"
    if entry is None:
        why = data["unapplied"].get(finding_id, "no fix verify knows how to apply for this finding")
        return Plan(finding_id, "-", None, why)
    if kind not in entry["devices"]:
        return Plan(finding_id, entry["fix"], None, f"{entry.get('elsewhere', 'not on this device')} ({kind})")
    change = entry["change"]
    if change == "dtype16":
        after = replace(base, dtype=best_16bit(device))
    elif change == "tf32":
        after = replace(base, dtype="tf32")
    elif change == "channels_last":
        after = replace(base, channels_last=True)
    elif change == "compile":
        after = replace(base, compile_mode=entry["mode"])
    elif change == "process_env":
        return Plan(finding_id, entry["fix"], base, env=_env(entry["env"]))
    elif change == "loader_workers":  # pinned on a GPU, as the finding's fix says (pin_memory=True)
        after = replace(
            base,
            workers=int(own.get("workers") or entry["workers"]),
            threads=own.get("threads"),
            pin_memory=True if device.is_gpu else None,
        )
    elif change == "pin_memory":
        after = replace(base, pin_memory=True)
    else:  # a data file naming a change this code does not know: said, not guessed
        return Plan(finding_id, entry["fix"], None, f"data/verify.toml: unknown change {change!r}")
    # the finding's own words where it states its settings (a finding under the threshold may not carry them)
    fix = (finding.get("fix") if own else None) or entry["fix"]
    if after == base:
        return Plan(finding_id, fix, None, "the model already runs with this fix")
    return Plan(finding_id, fix, after)
