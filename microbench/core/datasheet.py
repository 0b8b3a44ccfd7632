"""Datasheet peaks: which bench.toml [devices] entry a device name matches."""
from __future__ import annotations

import re

from microbench.core.config import DatasheetDevice


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
