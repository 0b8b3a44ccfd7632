"""Tables as pandas DataFrames, for notebooks (`TraceAnalysis.to_frame`, `Job.frames`; docs/api.md).

pandas is the optional `frames` extra: the analyses themselves are lists of dicts and never need it, so it is
imported here, on first use, and its absence is one line saying how to install it."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

INSTALL = "pip install 'dawnscope[frames]'"


class FramesUnavailable(ImportError):
    """pandas is missing: the message is the one line that says how to install it."""


def pandas():
    """The pandas module, or FramesUnavailable (an ImportError) whose one line names the extra to install."""
    try:
        import pandas as pd  # optional dependency: the `frames` extra
    except ImportError:
        raise FramesUnavailable(f"DataFrames need pandas, which is not installed: {INSTALL}") from None
    return pd


def flat(row: Mapping, prefix: str = "") -> dict:
    """A row with its nested dicts spread into columns named by their path (`time_ms.median`); lists stay one
    cell each (a step's list of activities is one value of the row, not more rows)."""
    out: dict = {}
    for key, value in row.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            out.update(flat(value, f"{name}."))
        else:
            out[name] = value
    return out


def frame(rows: Iterable[Mapping], name: str):
    """One table (a list of dicts) as a DataFrame, one row per dict, in order; `name` becomes `df.attrs['table']`."""
    pd = pandas()
    df = pd.DataFrame([flat(r) for r in rows])
    df.attrs["table"] = name
    return df


def unknown_table(name: str, tables: Iterable[str], what: str) -> KeyError:
    """The error for a table name that `what` (an analysis) does not have, listing the ones it has."""
    return KeyError(f"{what} has no table {name!r}; its tables: {', '.join(tables)}")


class Tables:
    """What an analysis with named tables gives a notebook: each of TABLES (its `table(name)`: a list of dicts)
    as a DataFrame, one or all (TraceAnalysis, Job)."""

    TABLES: tuple[str, ...] = ()

    def table(self, name: str) -> list[dict]:
        raise NotImplementedError

    def to_frame(self, name: str):
        """One of TABLES as a pandas DataFrame, nested dicts spread into dotted columns (`time_ms.median`)."""
        return frame(self.table(name), name)

    def frames(self) -> dict:
        """Every table of TABLES as a DataFrame, by name."""
        return {name: self.to_frame(name) for name in self.TABLES}
