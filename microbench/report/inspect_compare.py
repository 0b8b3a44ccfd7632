"""One kernel, two vendors: the records of `dawnscope inspect --json` side by side per kernel, dtype
and configuration, one column group per target (sm_90 against gfx942 by default): registers, spills, shared
memory / LDS, matrix instructions per K step, occupancy, the matrix-core verdict.

Rows pair what is the same work on both: the default configuration of a (kernel, dtype) on each target (their
tiles differ: each family has its own), and any tile (BM, BN, BK) that both targets built.
"""

from __future__ import annotations

import re
from pathlib import Path

from microbench.core.errors import InputError
from microbench.core.jsonio import load_json

# A record of `microbench.inspect.cli --json` (failures are {"module", "target", "error"}).
_RECORD_KEYS = {"kernel", "config", "target"}
DEFAULT_TARGETS = ("sm_90", "gfx942")
_TILE = re.compile(r"BM(\d+) BN(\d+) BK(\d+)")


def is_inspect_doc(doc) -> bool:
    return (
        isinstance(doc, list)
        and bool(doc)
        and all(isinstance(r, dict) for r in doc)
        and any(_RECORD_KEYS <= set(r) for r in doc)
    )


def load_inspect_files(paths: list[Path]) -> list[dict] | None:
    """The records of every file when all inputs are inspect files, None when none is; a mix is an error."""
    docs = [(Path(p), load_json(p)) for p in paths]
    ours = [(p, d) for p, d in docs if is_inspect_doc(d)]
    if not ours:
        return None
    if len(ours) != len(docs):
        other = next(p for p, d in docs if not is_inspect_doc(d))
        raise InputError(
            other,
            "not an inspect file (dawnscope inspect --json), and the other inputs "
            "are: compare inspect files with inspect files",
        )
    records = []
    for p, d in ours:
        for i, r in enumerate(d):
            if "error" in r:
                continue
            missing = sorted(_RECORD_KEYS - set(r))
            if missing:
                raise InputError(p, f"record {i} lacks {', '.join(missing)}")
            records.append(r)
    return records


def _tile(config: str) -> str:
    m = _TILE.search(config)
    if not m:
        return config
    return f"{m.group(1)}x{m.group(2)}x{m.group(3)}" + (" persistent" if "persistent" in config.split() else "")


def _dtype(r: dict) -> str:
    return r.get("dtype") or r["config"].split()[0]


def _cell(r: dict) -> dict:
    smem = r.get("lds_bytes")
    if smem is None:
        smem = r.get("dynamic_shared_bytes") if r.get("dynamic_shared_bytes") is not None else r.get("shared_bytes")
    regs = (
        f"v{r['vgprs']} a{r.get('agprs', 0)} s{r.get('sgprs', 0)}"
        if r.get("vgprs") is not None
        else str(r.get("registers", "-"))
    )
    return {
        "config": r["config"],
        "registers": regs,
        "spills": bool(r.get("spills")),
        "stack_bytes": r.get("stack_bytes"),
        "smem_bytes": smem,
        "matrix_per_k_step": r.get("matrix_per_k_step"),
        "matrix_instructions": r.get("matrix_instructions", r.get("tensor_core_instructions")),
        "kinds": r.get("matrix_instruction_kinds", []),
        "occupancy": r.get("occupancy"),
        "occupancy_unit": r.get("occupancy_unit", ""),
        "matrix_cores": r.get("matrix_cores"),
        "fallback": r.get("fallback"),
    }


def compare_inspect(records: list[dict], targets: tuple[str, ...] | None = None) -> dict:
    """{"targets": [...], "rows": [{kernel, dtype, pair, cells: {target: cell | None}}]}."""
    present = list(dict.fromkeys(r["target"] for r in records))
    if targets is None:
        targets = tuple(t for t in DEFAULT_TARGETS if t in present)
        if len(targets) < 2:
            targets = tuple(present)
    unknown = [t for t in targets if t not in present]
    if unknown:
        raise InputError(
            None,
            f"no record for target {unknown[0]} (the files have: {', '.join(present)})",
            key="--target",
            value=unknown[0],
        )
    rows: dict[tuple, dict] = {}
    for r in records:
        if r["target"] not in targets or "(not " in r.get("note", ""):
            continue  # a build given the wrong fp8 flavour on purpose is not the kernel as it runs
        keys = [(r["kernel"], _dtype(r), "default")] if r.get("default") else []
        keys.append((r["kernel"], _dtype(r), _tile(r["config"])))
        for key in keys:
            row = rows.setdefault(key, {"kernel": key[0], "dtype": key[1], "pair": key[2], "cells": {}})
            row["cells"].setdefault(r["target"], _cell(r))

    def same_as_default(row) -> bool:  # a tile pair that is just the defaults again
        d = rows.get((row["kernel"], row["dtype"], "default"))
        return bool(d) and all((d["cells"].get(t) or {}).get("config") == c["config"] for t, c in row["cells"].items())

    kept = [
        row
        for row in rows.values()
        if row["pair"] == "default" or (len(row["cells"]) == len(targets) and not same_as_default(row))
    ]
    for row in kept:
        row["cells"] = {t: row["cells"].get(t) for t in targets}
    kept.sort(key=lambda row: (row["kernel"], row["dtype"], row["pair"] != "default", row["pair"]))
    return {"targets": list(targets), "rows": kept}


def _fmt_cell(c: dict | None) -> list[str]:
    if c is None:
        return ["-"] * 6
    spills = f"{c['stack_bytes']} B" if c["spills"] else "none"
    unit = {"warps/SM": "w/SM", "waves/SIMD": "w/SIMD"}.get(c["occupancy_unit"], c["occupancy_unit"])
    occ = f"{c['occupancy']} {unit}" if c["occupancy"] is not None else "-"
    verdict = c["matrix_cores"] or "-"  # a fallback's reason: below the table
    perk = "-" if c["matrix_per_k_step"] is None else str(c["matrix_per_k_step"])
    return [c["registers"], spills, str(c["smem_bytes"]), perk, occ, verdict]


def _short_config(config: str) -> str:
    """The tile, warps, stages and variant words of a configuration label: not its dtype (a column of its own),
    the group size or the backend options (JSON keeps the whole label)."""
    words = config.split()[1:]
    return " ".join(w for w in words if "=" not in w and not re.fullmatch(r"G\d+", w))


def inspect_table_cells(cmp: dict) -> tuple[list[str], list[list[str]]]:
    """One line per target under each (kernel, dtype, pair): the targets of a pair read down, not across."""
    cols = [
        "kernel",
        "dtype",
        "pair",
        "target",
        "config",
        "regs",
        "spills",
        "smem/LDS B",
        "MMA/K",
        "occupancy",
        "matrix cores",
    ]
    rows = []
    for row in cmp["rows"]:
        for i, t in enumerate(cmp["targets"]):
            c = row["cells"][t]
            head = [row["kernel"].removeprefix("triton_"), row["dtype"], row["pair"]] if i == 0 else ["", "", ""]
            rows.append(head + [t, _short_config(c["config"]) if c else "-", *_fmt_cell(c)])
    return cols, rows


# Columns a narrow terminal drops first: the kernel, target, registers, occupancy and the verdict stay
INSPECT_COMPARE_DROP_ORDER = ("pair", "config", "MMA/K", "smem/LDS B", "dtype", "spills")


def print_inspect_compare(cmp: dict, console=None, kept_in: str = "the JSON (compare --json OUT)") -> None:
    from microbench.report.roofline_report import rich_table, wide_console

    cols, rows = inspect_table_cells(cmp)
    out = console or wide_console()
    out.print(
        rich_table(
            [(c, "left") for c in cols],
            [(r, None) for r in rows],
            title=f"one kernel, {len(cmp['targets'])} targets: {' vs '.join(cmp['targets'])} (static, "
            "compiled ahead of time; no GPU ran these)",
            width=out.width,
            drop_order=INSPECT_COMPARE_DROP_ORDER,
            kept_in=kept_in,
        )
    )
    reasons = {(t, c["fallback"]) for row in cmp["rows"] for t, c in row["cells"].items() if c and c["fallback"]}
    for target, why in sorted(reasons):
        out.print(f"fallback on {target}: {why}")
