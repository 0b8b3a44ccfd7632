"""Where the package's own files are: the data tables (microbench/data/*.toml) and the default bench.toml, found
through the installed package (importlib.resources), so a wheel installed anywhere reads the same files as a
source checkout. In a checkout bench.toml sits at the repository's top level, where users edit it; a wheel
carries a copy inside the package (setup.py)."""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

PACKAGE = Path(str(files("microbench")))


def data_file(name: str) -> Path:
    """A file of microbench/data/ by name (`kernel_rules.toml`)."""
    return PACKAGE / "data" / name


def default_config() -> Path:
    """The bench.toml a command reads without --config: the installed package's copy, else the checkout's."""
    shipped = PACKAGE / "bench.toml"
    return shipped if shipped.is_file() else PACKAGE.parent / "bench.toml"


def docs_dir() -> Path:
    """The documents (docs/*.md): the installed package's copy (setup.py), else the checkout's docs/."""
    shipped = PACKAGE / "docs"
    return shipped if shipped.is_dir() else PACKAGE.parent / "docs"
