"""Datasheet peaks: which bench.toml [devices] entry a device name matches."""

from __future__ import annotations

import math
import re
from pathlib import Path

import tomllib

from microbench.core.archjson import is_arch_json, read_arch
from microbench.core.config import DatasheetDevice
from microbench.core.dtypes import PRECISION_OF, PRECISIONS
from microbench.core.errors import InputError
from microbench.core.jsonio import load_json
from microbench.core.resources import data_file

MAX_CEILING_TFLOPS = 1e6  # an exaFLOP/s from one device: beyond any chip, a typo


def norm_tokens(name: str) -> set[str]:
    """Device name -> upper-case tokens split at non-alphanumerics (the datasheet matching rule). Here, not in
    core.device, so that matching a trace's device name does not import torch."""
    return {t for t in re.split(r"[^A-Z0-9]+", name.upper()) if t}


def amd_chips() -> list[dict]:
    """microbench/data/amd_chips.toml's [[chip]] entries."""
    return tomllib.loads(data_file("amd_chips.toml").read_text())["chip"]


def amd_product_name(arch: str, compute_units: int, memory_bytes: int) -> str | None:
    """The product an AMD device is, from gcnArchName (feature suffix dropped), its CU count and memory: for a
    device ROCm names generically ("AMD Radeon Graphics"), before the datasheet's name matching. None unless
    exactly one entry fits."""
    gib = memory_bytes / 2**30
    hits = [
        c["product"]
        for c in amd_chips()
        if c["arch"] == arch.split(":")[0]
        and c["compute_units"] == compute_units
        and c["memory_gib"][0] <= gib <= c["memory_gib"][1]
    ]
    return hits[0] if len(hits) == 1 else None


def match_datasheet(name: str, devices: tuple[DatasheetDevice, ...]) -> tuple[DatasheetDevice | None, str]:
    """The documented rule (bench.toml, [devices]): all `match` tokens present, no `exclude` token."""
    tokens = norm_tokens(name)
    hits = [d for d in devices if set(d.match) <= tokens and not (set(d.exclude) & tokens)]
    if len(hits) == 1:
        return hits[0], f"datasheet entry {hits[0].key!r} ({hits[0].name}) matched {name!r}"
    if not hits:
        return None, f"unknown device {name!r}: no datasheet entry matches; measured ceilings only"
    keys = ", ".join(d.key for d in hits)
    return None, f"ambiguous device {name!r}: datasheet entries {keys} all match; measured ceilings only"


def ceilings_file(
    path: Path, device_name: str | None = None, devices: tuple[DatasheetDevice, ...] = ()
) -> tuple[dict[str, float], float | None]:
    """Measured ceilings from a file: a results.json of microbench.roofline.cli (its measured `ceilings`) or a
    TraceLens GPU arch JSON (core.archjson). Returns TFLOP/s by precision column and memory TB/s (or None).
    With `device_name`, the file must be of that machine (check_ceilings_machine). A results.json ceiling its
    own run judged noisy is not used. Anything else is one line naming the file."""
    doc = load_json(path)
    ceilings = doc.get("ceilings") if isinstance(doc, dict) else None
    if not is_arch_json(doc) and not isinstance(ceilings, list):
        raise InputError(
            path,
            "neither a results.json of microbench.roofline.cli (no `ceilings` list) nor a TraceLens "
            "GPU arch JSON (no `max_achievable_tflops`)",
            key="ceilings",
        )
    parsed = read_arch(doc, path) if is_arch_json(doc) else _measured(path, ceilings)
    if device_name is not None:
        check_ceilings_machine(path, ceilings_machine(doc), device_name, devices)
    return parsed


def _measured(path: Path, ceilings: list) -> tuple[dict[str, float], float | None]:
    out: dict[str, float] = {}
    memory_tbs = None
    noisy = 0
    for c in ceilings:
        if not (
            isinstance(c, dict)
            and c.get("source") == "measured"
            and isinstance(c.get("value"), (int, float))
            and math.isfinite(c["value"])
            and c["value"] > 0
        ):
            continue
        if c.get("noise") or c.get("flags"):  # its own run said the number cannot be trusted
            noisy += 1
        elif c.get("kind") == "compute" and c.get("dtype") in PRECISION_OF:
            out[PRECISION_OF[c["dtype"]]] = float(c["value"])
        elif c.get("kind") == "memory" and memory_tbs is None:
            memory_tbs = float(c["value"]) / 1e3  # GB/s
    if not out:
        raise InputError(
            path,
            "no measured compute ceiling in its `ceilings`"
            + (f" that its run did not judge noisy ({noisy} noisy: measure again on a quiet machine)" if noisy else ""),
            key="ceilings",
        )
    return out, memory_tbs


def ceilings_machine(doc) -> str | None:
    """The machine a ceilings file was measured on: results.json's hardware name, an arch JSON's name."""
    if not isinstance(doc, dict):
        return None
    name = (doc.get("hardware") or {}).get("name") if isinstance(doc.get("hardware"), dict) else doc.get("name")
    return name if isinstance(name, str) and name.strip() else None


def check_ceilings_machine(
    path: Path, file_machine: str | None, device_name: str, devices: tuple[DatasheetDevice, ...]
) -> None:
    """Measured ceilings are another machine's unless both names match the same datasheet entry (or, for a
    device no entry knows, are the same name): judging an H100's kernels against a CPU's ceilings gives
    percentages in the ten thousands, so it is refused (one line), never used silently."""
    if file_machine is None:
        raise InputError(
            path, "names no machine (no hardware.name / name): cannot tell whose ceilings these are", key="ceilings"
        )
    mine, _ = match_datasheet(file_machine, devices)
    theirs, _ = match_datasheet(device_name, devices)
    same = (
        (mine.key == theirs.key)
        if (mine and theirs)
        else (mine is None and theirs is None and norm_tokens(file_machine) == norm_tokens(device_name))
    )
    if not same:
        raise InputError(
            path,
            f"ceilings measured on {file_machine!r}, not on {device_name!r}: give a file measured on that machine",
            key="ceilings",
        )


def ceilings_from_args(pairs: list[str], results: Path | None) -> dict[str, float]:
    """TFLOP/s by precision, from --ceilings (a results file's measured compute ceilings, or a TraceLens GPU arch
    JSON) then --ceiling."""
    out: dict[str, float] = dict(ceilings_file(results)[0]) if results is not None else {}
    for pair in pairs:
        prec, _, value = pair.partition("=")
        try:
            tflops = float(value)
        except ValueError:
            tflops = -1.0
        if prec not in PRECISIONS or not (math.isfinite(tflops) and 0 < tflops <= MAX_CEILING_TFLOPS):
            raise InputError(
                None,
                f"expected PREC=TFLOPS with PREC one of {', '.join(PRECISIONS)} and a "
                f"finite positive number up to {MAX_CEILING_TFLOPS:g}",
                key="--ceiling",
                value=pair,
            )
        out[prec] = tflops
    return out


def find_entry(name: str, devices, option: str = "--on"):
    """A bench.toml [devices] entry by its key (`h100_sxm5`), a short name an entry lists in `aliases` (`A100`),
    a device name as a profiler writes it (`NVIDIA H100 80GB HBM3`), or a short name all of whose tokens one
    entry's `match` holds (`V100`, `MI300X`). Unknown or ambiguous: one line naming the known entries."""
    by_key = {d.key: d for d in devices}
    if name.lower() in by_key:
        return by_key[name.lower()]
    aliased = [d for d in devices if name.upper() in d.aliases]
    if len(aliased) == 1:
        return aliased[0]
    entry, note = match_datasheet(name, devices)
    if entry is not None:
        return entry
    tokens = norm_tokens(name)
    short = [
        d for d in devices if tokens and tokens <= set(d.match) | norm_tokens(d.name) and not (tokens & set(d.exclude))
    ]
    if len(short) == 1:
        return short[0]
    known = ", ".join(sorted(by_key))
    why = "ambiguous" if len(short) > 1 or note.startswith("ambiguous") else "unknown device"
    raise InputError(
        None, f"{why}: no single bench.toml [devices] entry matches (known: {known})", key=option, value=name
    )
