"""Baselines kept for the gate: `gate CURRENT --save-baseline NAME` copies a capture into a folder of the store
(default `.dawnscope/baselines` in the current folder, or $DAWNSCOPE_BASELINES, or --baselines DIR) beside
`baseline.json`: the file's name, its sha256, the fingerprint of the machine it was measured on (as the gate reads
it: the results file's hardware and software, or the trace's devices) and when it was saved. `--against NAME` reads
it back, refusing a copy whose bytes changed since."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import time
from pathlib import Path

from microbench.core.errors import InputError
from microbench.core.outdir import write_file

STORE_ENV = "DAWNSCOPE_BASELINES"
DEFAULT_STORE = Path(".dawnscope") / "baselines"
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
META = "baseline.json"


def store_dir(given: str | Path | None = None) -> Path:
    """The store: --baselines, else $DAWNSCOPE_BASELINES, else .dawnscope/baselines here."""
    return Path(given or os.environ.get(STORE_ENV) or DEFAULT_STORE)


def _checked_name(name: str) -> str:
    if not NAME.match(name):
        raise InputError(
            None, "a baseline name is letters, digits, '.', '_' and '-' (at most 100)", key="baseline name", value=name
        )
    return name


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def save(store: Path, name: str, capture: Path, fingerprint: str) -> Path:
    """Keep `capture` as baseline `name` (replacing an older one of that name); returns its folder."""
    folder = store / _checked_name(name)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        for old in folder.iterdir():  # the previous capture of that name, which may have had another file name
            if old.is_file():
                old.unlink()
        shutil.copyfile(capture, folder / capture.name)
    except OSError as e:
        raise InputError(folder, f"cannot keep the baseline here: {e.strerror or e}", key="--save-baseline") from None
    meta = {
        "name": name,
        "file": capture.name,
        "source": str(capture),
        "sha256": _sha256(folder / capture.name),
        "fingerprint": fingerprint,
        "saved_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    write_file(folder / META, json.dumps(meta, indent=2) + "\n", "--save-baseline")
    return folder


def load(store: Path, name: str) -> tuple[Path, dict]:
    """Baseline `name`'s capture and its record; a missing baseline names the ones there are."""
    folder = store / _checked_name(name)
    meta_path = folder / META
    if not meta_path.is_file():
        there = sorted(p.name for p in store.iterdir() if (p / META).is_file()) if store.is_dir() else []
        have = f"the store holds: {', '.join(there)}" if there else "the store holds none"
        raise InputError(
            store, f"no baseline named {name!r} ({have}; keep one with --save-baseline NAME)", key="--against"
        )
    try:
        meta = json.loads(meta_path.read_text())
        capture = folder / meta["file"]
        expected = meta["sha256"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise InputError(meta_path, f"not a baseline record: {e}", key="--against") from None
    if not capture.is_file() or _sha256(capture) != expected:
        raise InputError(capture, "the baseline's capture is missing or changed since it was saved", key="--against")
    return capture, meta
