"""Device faults that end the process's GPU context: recognised from an exception's text, by the names and
runtime texts of microbench/data/gpu_faults.toml (CUDA and HIP). After one, every later call into the device
fails the same way, so a run that meets one stops (roofline/runner.py) instead of failing every later case."""

from __future__ import annotations

import functools

import tomllib

from microbench.core.resources import data_file

FAULTS_PATH = data_file("gpu_faults.toml")


@functools.lru_cache(maxsize=1)
def _table() -> dict:
    return tomllib.loads(FAULTS_PATH.read_text())


def isolated_providers() -> tuple[str, ...]:
    """Providers run once per case in a process of their own before the measuring process uses them."""
    return tuple(_table().get("isolate", ()))


def call_timeout_s() -> float:
    """The longest one pre-flight call may take before its process is ended as hung."""
    return float(_table().get("call_timeout_s", 120.0))


def _chain_text(e: BaseException | str) -> str:
    """The exception's type and text, with its causes and contexts (PyTorch re-raises CUDA errors)."""
    if isinstance(e, str):
        return e
    parts, seen = [], set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        parts.append(f"{type(e).__name__}: {e}")
        e = e.__cause__ or e.__context__
    return "\n".join(parts)


def lost_context(e: BaseException | str) -> str | None:
    """The fault's first name (cudaErrorIllegalAddress, ...) when `e` says the device context is lost, else
    None. Matched case-insensitively on any name or on the runtime's text of the error."""
    text = _chain_text(e).lower()
    for fault in _table()["sticky"]:
        if any(n.lower() in text for n in fault["names"]) or fault["text"].lower() in text:
            return fault["names"][0]
    return None
