"""Datasheet peaks: which bench.toml [devices] entry a device name matches."""
from __future__ import annotations

import math
import re
from pathlib import Path

from microbench.core.config import DatasheetDevice
from microbench.core.dtypes import PRECISION_OF, PRECISIONS
from microbench.core.errors import InputError


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


def measured_ceilings(pairs: list[str], results: Path | None) -> dict[str, float]:
    """TFLOP/s by precision, from --ceilings (a results file's measured compute ceilings) then --ceiling."""
    from microbench.core.jsonio import load_json

    out: dict[str, float] = {}
    if results is not None:
        doc = load_json(results)
        ceilings = doc.get("ceilings") if isinstance(doc, dict) else None
        if not isinstance(ceilings, list):
            raise InputError(results, "no `ceilings` list: not a results.json of microbench.roofline", key="ceilings")
        for c in ceilings:
            if isinstance(c, dict) and c.get("source") == "measured" and c.get("kind") == "compute" \
                    and c.get("dtype") in PRECISION_OF and isinstance(c.get("value"), (int, float)) \
                    and math.isfinite(c["value"]) and c["value"] > 0:
                out[PRECISION_OF[c["dtype"]]] = float(c["value"])
        if not out:
            raise InputError(results, "no measured compute ceiling in its `ceilings`", key="ceilings")
    for pair in pairs:
        prec, _, value = pair.partition("=")
        try:
            tflops = float(value)
        except ValueError:
            tflops = -1.0
        if prec not in PRECISIONS or not (math.isfinite(tflops) and tflops > 0):
            raise InputError(None, f"expected PREC=TFLOPS with PREC one of {', '.join(PRECISIONS)} and a "
                                   "finite positive number", key="--ceiling", value=pair)
        out[prec] = tflops
    return out
