"""The documents: docs/*.md of the checkout, shipped in the wheel as microbench/docs/*.md (setup.py). Every message
that points at documentation names a `docs/<name>.md`; `dawnscope help NAME` (or the path as the message gives it)
prints it, so the pointer works for a user who has only the installed package."""

from __future__ import annotations

import re
from pathlib import Path

from microbench.core.errors import InputError
from microbench.core.resources import docs_dir

HEADING = re.compile(r"^#\s+(.+)$", re.M)


def topics() -> dict[str, Path]:
    """Topic name (the file's stem) -> its file, sorted by name."""
    folder = docs_dir()
    return {p.stem: p for p in sorted(folder.glob("*.md"))} if folder.is_dir() else {}


def title(path: Path) -> str:
    m = HEADING.search(path.read_text(encoding="utf-8", errors="replace")[:4000])
    return m.group(1).strip() if m else path.stem


def find(topic: str) -> Path:
    """A topic by its name, its file name or the path a message gives (`docs/traces.md`, `traces.md`, `traces`),
    case-insensitive; an unknown one names those there are."""
    known = topics()
    if not known:
        raise InputError(None, "this install has no documents (a wheel built without docs/)", key="help")
    name = Path(topic).name.lower().removesuffix(".md")
    hits = {k: p for k, p in known.items() if k.lower() == name}
    if hits:
        return next(iter(hits.values()))
    near = [k for k in known if name and name in k.lower()]
    listing = ", ".join(near or known)
    raise InputError(
        None, f"no document named {topic!r} ({'did you mean' if near else 'there are'}: {listing})", key="help"
    )
