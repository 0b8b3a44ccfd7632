"""Datasheet peaks: which bench.toml [devices] entry a device name matches."""
from __future__ import annotations

import math
import re
from pathlib import Path

from microbench.core.config import DatasheetDevice
from microbench.core.dtypes import PRECISION_OF, PRECISIONS
from microbench.core.errors import InputError


MAX_CEILING_TFLOPS = 1e6  # an exaFLOP/s from one device: beyond any chip, a typo


def norm_tokens(name: str) -> set[str]:
    """Device name -> upper-case tokens split at non-alphanumerics (the datasheet matching rule). Here, not in
    core.device, so that matching a trace's device name does not import torch."""
    return {t for t in re.split(r"[^A-Z0-9]+", name.upper()) if t}


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


def ceilings_file(path: Path) -> tuple[dict[str, float], float | None]:
    """Measured ceilings from a file: a results.json of microbench.roofline (its measured `ceilings`) or a
    TraceLens GPU arch JSON (core.archjson). Returns TFLOP/s by precision column and memory TB/s (or None).
    Anything else is one line naming the file."""
    from microbench.core.archjson import is_arch_json, read_arch
    from microbench.core.jsonio import load_json

    doc = load_json(path)
    if is_arch_json(doc):
        return read_arch(doc, path)
    ceilings = doc.get("ceilings") if isinstance(doc, dict) else None
    if not isinstance(ceilings, list):
        raise InputError(path, "neither a results.json of microbench.roofline (no `ceilings` list) nor a TraceLens "
                               "GPU arch JSON (no `max_achievable_tflops`)", key="ceilings")
    out: dict[str, float] = {}
    memory_tbs = None
    for c in ceilings:
        if not (isinstance(c, dict) and c.get("source") == "measured" and isinstance(c.get("value"), (int, float))
                and math.isfinite(c["value"]) and c["value"] > 0):
            continue
        if c.get("kind") == "compute" and c.get("dtype") in PRECISION_OF:
            out[PRECISION_OF[c["dtype"]]] = float(c["value"])
        elif c.get("kind") == "memory" and memory_tbs is None:
            memory_tbs = float(c["value"]) / 1e3  # GB/s
    if not out:
        raise InputError(path, "no measured compute ceiling in its `ceilings`", key="ceilings")
    return out, memory_tbs


def measured_ceilings(pairs: list[str], results: Path | None) -> dict[str, float]:
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
            raise InputError(None, f"expected PREC=TFLOPS with PREC one of {', '.join(PRECISIONS)} and a "
                                   f"finite positive number up to {MAX_CEILING_TFLOPS:g}", key="--ceiling", value=pair)
        out[prec] = tflops
    return out
