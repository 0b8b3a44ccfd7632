"""The vendor libraries' switches, set the same way for every command of one family (data/vendor_settings.toml):
`settings_for(family)` applies a family's setting for a block and puts every switch back after it; what was
applied is kept per family, and core.conditions records the families applied during its run."""

from __future__ import annotations

import contextlib
import functools

import tomllib

from microbench.core.resources import data_file

SETTINGS_PATH = data_file("vendor_settings.toml")
_MATMUL = "cuda.matmul"


def _attr(path: str) -> tuple[object, str]:
    import torch  # here, not at import: core.conditions imports this module, and `trace` never imports torch

    owner, name = path.rsplit(".", 1)
    obj = torch.backends
    for part in owner.split("."):
        obj = getattr(obj, part)
    return obj, name


# Table key -> the PyTorch switch it sets (an attribute under torch.backends).
SWITCHES = {
    "cudnn_benchmark": "cudnn.benchmark",
    "cudnn_deterministic": "cudnn.deterministic",
    "matmul_fp16_reduced_precision_reduction": f"{_MATMUL}.allow_fp16_reduced_precision_reduction",
    "matmul_bf16_reduced_precision_reduction": f"{_MATMUL}.allow_bf16_reduced_precision_reduction",
    "matmul_fp16_accumulation": f"{_MATMUL}.allow_fp16_accumulation",
}

_APPLIED: list[tuple[str, dict]] = []  # (family, the switches as set), in the order applied in this process
_ACTIVE: list[int] = []  # indexes into _APPLIED of the blocks not yet left


@functools.lru_cache(maxsize=1)
def table() -> dict:
    doc = tomllib.loads(SETTINGS_PATH.read_text())
    for family, keys in doc.items():
        if unknown := set(keys) - set(SWITCHES):
            raise ValueError(f"{SETTINGS_PATH}: [{family}] {sorted(unknown)[0]}: not a known switch")
    return doc


def _read(key: str):
    obj, name = _attr(SWITCHES[key])
    try:
        return getattr(obj, name)
    except (AttributeError, RuntimeError):  # a switch this PyTorch does not have
        return None


def _write(key: str, value) -> None:
    obj, name = _attr(SWITCHES[key])
    setattr(obj, name, value)


def mark() -> tuple[int, tuple[int, ...]]:
    """A point in the record: `applied_since(mark)` gives the families in force then or applied after it."""
    return len(_APPLIED), tuple(_ACTIVE)


def applied_since(point: tuple[int, tuple[int, ...]] = (0, ())) -> dict:
    """family -> the switches as set, for the families in force at `point` or applied after it."""
    start, active = point
    return {family: dict(values) for family, values in (_APPLIED[i] for i in [*active, *range(start, len(_APPLIED))])}


@contextlib.contextmanager
def settings_for(family: str):
    """Apply `family`'s setting for the block (the switches this PyTorch has), recorded; restore after it."""
    wanted = table()[family]
    saved = {k: _read(k) for k in wanted}
    have = {k: v for k, v in wanted.items() if saved[k] is not None}
    for k, v in have.items():
        _write(k, v)
    _APPLIED.append((family, {SWITCHES[k]: v for k, v in have.items()}))
    _ACTIVE.append(len(_APPLIED) - 1)
    try:
        yield have
    finally:
        _ACTIVE.pop()
        for k in have:
            _write(k, saved[k])
