"""A table cell: a number in its format, or a dash where there is none (the one rule every table of every
command follows), and which columns a terminal table keeps at a width; a cheap module of its own (no rich), so
that the trace report imports neither rich nor matplotlib."""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass, field
from pathlib import Path

EMPTY_CELLS = ("", "-")  # what a cell holds where there is no value
KERNEL_WIDTH = 48  # a kernel column's characters (core.kernel_names.distinct_labels): the JSON and HTML keep names


def or_dash(v, spec: str = ".3g", none: str = "-") -> str:
    """`format(v, spec)`, or `none` for a missing value (None): never 'None' or 'nan' from a missing one."""
    return none if v is None else format(v, spec)


def _cell_len(text: str) -> int:
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


def table_width(columns, rows) -> int:
    """The characters roofline_report.rich_table's compact table takes (no padding, one space between columns and at each
    edge): each column as wide as its widest cell or header."""
    widths = [
        max([_cell_len(name)] + [_cell_len(cells[j]) for cells, _ in rows]) for j, (name, _) in enumerate(columns)
    ]
    return sum(widths) + len(columns) + 1


def empty_columns(columns, rows) -> list[str]:
    """The columns with a dash (or nothing) in every row: they say nothing, so a narrow terminal drops them
    before any column with a value. A table without rows has none."""
    return [
        name
        for j, (name, _) in enumerate(columns)
        if rows and all(cells[j].strip() in EMPTY_CELLS for cells, _ in rows)
    ]


@dataclass
class Fit:
    columns: list
    rows: list
    dropped: list[str]  # columns with values, left out for the width
    empty: list[str]  # columns with no value in any row, left out first

    @property
    def shown(self) -> set[str]:
        return {name for name, _ in self.columns}


def _without(columns, rows, name: str):
    j = next(k for k, c in enumerate(columns) if c[0] == name)
    return columns[:j] + columns[j + 1 :], [(cells[:j] + cells[j + 1 :], style) for cells, style in rows]


def fit_columns(columns, rows, width: int | None, drop_order) -> Fit:
    """The columns a table keeps at `width` (None: all): the empty ones go first, then `drop_order`'s, least
    needed first, until it fits; the rest (the row's key) are never dropped. Rows are (cells, style)."""
    out = Fit(list(columns), list(rows), [], [])
    if not width or table_width(columns, rows) <= width:
        return out
    empty = empty_columns(columns, rows)
    for name in [*empty, *(n for n in drop_order if n not in empty)]:
        if name not in empty and table_width(out.columns, out.rows) <= width:
            break  # a table too wide loses every empty column, then only what it must
        if name not in out.shown:
            continue
        out.columns, out.rows = _without(out.columns, out.rows, name)
        (out.empty if name in empty else out.dropped).append(name)
    return out


def caption(head: str, parts, shown: set[str]) -> str:
    """A table's title: `head`, then the (columns, text) parts that explain a column the table shows; a part
    about columns the table left out goes with them, and its `{cols}` names only the shown ones."""
    said = []
    for cols, text in parts:
        cols = (cols,) if isinstance(cols, str) else cols
        if here := [c for c in cols if c in shown]:
            said.append(text.replace("{cols}", ", ".join(here)))
    return head + (": " + "; ".join(said) if said else "")


def kept_in(
    json: Path | str | None = None,
    html: Path | str | None = None,
    what: str = "report",
    can_json: bool = True,
    can_html: bool = True,
) -> str:
    """Where a column a narrow terminal left out is: the files the command wrote, by name, else the options
    that write them."""
    said = []
    if can_json:
        said.append(f"the JSON {what} {json}" if json else f"the JSON {what} (--json OUT)")
    if can_html:
        said.append(f"the HTML page {html}" if html else "the HTML page (--html OUT)")
    return " and ".join(said)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


@dataclass
class LeftOut:
    """The columns a report's narrow tables left out, said in one line under the report (not one line per
    table): the count, each table's columns, and where they are."""

    kept_in: str
    tables: dict[str, Fit] = field(default_factory=dict)

    def add(self, table: str, fit: Fit) -> Fit:
        if fit.dropped or fit.empty:
            self.tables[table] = fit
        return fit

    def line(self) -> str | None:
        dropped = {t: f.dropped for t, f in self.tables.items() if f.dropped}
        empty = {t: f.empty for t, f in self.tables.items() if f.empty}
        out = []
        if dropped:
            n = sum(len(c) for c in dropped.values())
            of = f"the {next(iter(dropped))} table" if len(dropped) == 1 else _plural(len(dropped), "table")
            out.append(
                f"narrow terminal: {_plural(n, 'column')} of {of} left out ({_listing(dropped)}): in {self.kept_in}"
            )
        if empty:
            n = sum(len(c) for c in empty.values())
            out.append(
                f"{'' if dropped else 'narrow terminal: '}{_plural(n, 'column')} with no value in any row "
                f"left out{' first' if dropped else ''} ({_listing(empty)})"
            )
        return "; ".join(out) or None


def _listing(by_table: dict[str, list[str]]) -> str:
    if len(by_table) == 1:
        return ", ".join(next(iter(by_table.values())))
    return "; ".join(f"{t}: {', '.join(cols)}" for t, cols in by_table.items())
