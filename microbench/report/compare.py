"""dawnscope compare RESULTS... [--baseline NAME] [--html OUT] [--json OUT]: results from different
machines side by side, per case.

Reads our results.json (schema dawnscope.results/1) and pytest-benchmark's --benchmark-json output. A case
is (op, shape, dtype, provider[, layer, phase]); pytest-benchmark entries take these from `extra_info`
(op, shape, dtype, provider, flops, tflops, pct_of_ceiling, ...) and, without them, are matched by test
name only. Per case and machine: median time, TFLOP/s, % of that machine's ceilings (measured / datasheet,
on a CPU the estimate) and the ratio to the baseline machine (baseline time / this time: 2.00x is twice as
fast). A case missing from some files is shown as missing there, never dropped. Files from different
profiles, configurations or software versions are flagged.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from microbench.core import ops
from microbench.core.errors import InputError
from microbench.core.files import exists, is_folder
from microbench.core.fingerprint import read_benchmark_block
from microbench.core.jsonio import load_json, number, text
from microbench.core.results import SCHEMA as RESULTS_SCHEMA
from microbench.core.results import STATUSES as RESULT_STATUSES
from microbench.core.results import ResultRow, row_from_dict
from microbench.core.verdict import trusted
from microbench.report import html as H
from microbench.report.cells import kept_in as kept_in_text
from microbench.report.cells import or_dash as _f
from microbench.report.figures import pyplot
from microbench.report.html import fingerprint_text

SCHEMA = "dawnscope.compare/1"
# Software whose version changes what a case measures.
SOFTWARE_KEYS = ("torch", "torch_cuda", "torch_hip", "triton", "cupy", "python")


@dataclass
class Machine:
    path: Path
    kind: str  # "dawnscope" or "pytest-benchmark"
    name: str
    fingerprint: str
    hardware_kind: str | None
    profile: str | None
    config_sha256: str | None
    software: dict
    cells: dict = field(default_factory=dict)  # case key -> cell dict
    notes: list = field(default_factory=list)
    label: str = ""
    conditions: dict = field(default_factory=dict)  # the run's machine conditions (core/conditions.py), if recorded


def _version(v, path: Path, key: str):
    """A software version: a string (a number is accepted and written as one); lists, tables: refused."""
    if v is None or isinstance(v, str):
        return v
    if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
        return str(v)
    raise InputError(path, "expected a version string", key=key, value=v)


def _case_key(d: dict) -> tuple:
    return (
        str(d.get("op") or ""),
        str(d.get("shape") or ""),
        str(d.get("dtype") or ""),
        str(d.get("provider") or ""),
        d.get("layer") or None,
        d.get("phase") or None,
    )


def _from_dawnscope(path: Path, doc: dict) -> Machine:
    hw, sw = doc.get("hardware"), doc.get("software", {})
    if not isinstance(hw, dict):
        raise InputError(path, "missing or malformed `hardware` block (the machine's fingerprint)", key="hardware")
    if not isinstance(sw, dict):
        raise InputError(path, "expected an object", key="software")
    rows = doc.get("results")
    if not isinstance(rows, list):
        raise InputError(path, "expected a list of result rows", key="results")
    cfg = doc.get("config", {})
    if not isinstance(cfg, dict):
        raise InputError(path, "expected an object", key="config", value=cfg)
    for k in ("name", "kind"):
        text(hw.get(k), path, f"hardware.{k}")
    m = Machine(
        path,
        "dawnscope",
        str(hw.get("name") or "?"),
        fingerprint_text(hw, sw),
        hw.get("kind"),
        text(cfg.get("profile"), path, "config.profile"),
        text(cfg.get("sha256"), path, "config.sha256"),
        {k: _version(sw.get(k), path, f"software.{k}") for k in SOFTWARE_KEYS if k in sw},
        conditions=doc.get("conditions") if isinstance(doc.get("conditions"), dict) else {},
    )
    for i, r in enumerate(rows):
        if not isinstance(r, dict):
            raise InputError(path, "expected a result object", key=f"results[{i}]")
        cell = _dawnscope_cell(path, r, f"results[{i}]")
        m.cells.setdefault(_case_key(_typed_row(path, r, f"results[{i}]").flat()), cell)
    return m


def _typed_row(path: Path, r: dict, where: str) -> ResultRow:
    """The row as its kind (kernel case, layer, trace kernel, ...), once _dawnscope_cell has checked its fields;
    rows of older files by their `source`, of unknown kinds as read."""
    try:
        return row_from_dict(r)
    except (TypeError, ValueError) as e:
        raise InputError(
            path, f"not a result row of kind {r.get('kind') or r.get('source') or '?'}: {e}", key=where
        ) from None


def _dawnscope_cell(path: Path, r: dict, where: str) -> dict:
    """One row of our results.json, every field checked for its type and domain."""
    for k in ("op", "shape", "dtype", "provider"):
        if not isinstance(r.get(k), str):
            raise InputError(path, "missing or not a string", key=f"{where}.{k}", value=r.get(k))
    for k in ("layer", "phase"):
        text(r.get(k), path, f"{where}.{k}")
    tm = r.get("time_ms") or {}
    if not isinstance(tm, dict):
        raise InputError(
            path, "expected an object {median, p20, p80, cov, reps} or null", key=f"{where}.time_ms", value=tm
        )
    flags = r.get("flags") or []
    if not isinstance(flags, list) or not all(isinstance(f, str) for f in flags):
        raise InputError(path, "expected a list of strings", key=f"{where}.flags", value=flags)
    status = r.get("status", "ok")
    if status not in RESULT_STATUSES:
        raise InputError(path, f"expected one of {', '.join(RESULT_STATUSES)}", key=f"{where}.status", value=status)
    time_ms = number(tm.get("median"), path, f"{where}.time_ms.median")
    noise = tm.get("noise") or []
    return {
        "status": status,
        "time_ms": time_ms or None,
        "cov": number(tm.get("cov"), path, f"{where}.time_ms.cov"),
        "p20_ms": number(tm.get("p20"), path, f"{where}.time_ms.p20"),
        "p80_ms": number(tm.get("p80"), path, f"{where}.time_ms.p80"),
        "noisy": not trusted({"flags": flags}) or bool(noise),  # noisy or impossible: no ratio
        **{
            k: number(r.get(k), path, f"{where}.{k}")
            for k in ("tflops", "busbw_gbps", "pct_of_measured", "pct_of_datasheet", "pct_of_ceiling")
        },
        "tensor_cores": text(r.get("tensor_cores"), path, f"{where}.tensor_cores"),
        "flags": flags,
        "reason": text(r.get("reason"), path, f"{where}.reason") or "",
    }


def _from_pytest_benchmark(path: Path, doc: dict) -> Machine:
    """A pytest-benchmark JSON as one machine: its fingerprint (ours where our plugin wrote it, else the machine_info
    pytest-benchmark keeps) and one cell per benchmark."""
    mi = doc.get("machine_info")
    if not isinstance(mi, dict):
        raise InputError(path, "missing or malformed `machine_info`", key="machine_info")
    benches = doc.get("benchmarks")
    if not isinstance(benches, list):
        raise InputError(path, "expected a list of benchmarks", key="benchmarks")
    extras = [
        b.get("extra_info") if isinstance(b, dict) and isinstance(b.get("extra_info"), dict) else {} for b in benches
    ]
    device = next((e["device"] for e in extras if isinstance(e.get("device"), str)), None)
    m = _benchmark_machine(path, mi, device)
    by_name = 0
    for i, (b, e) in enumerate(zip(benches, extras)):
        if not isinstance(b, dict) or not isinstance(b.get("stats"), dict):
            raise InputError(path, "expected a benchmark object with `stats`", key=f"benchmarks[{i}]")
        if all(isinstance(e.get(k), str) for k in ("op", "shape", "dtype", "provider")):
            key = _case_key(e)
        else:  # no dawnscope extra_info: the test's own name is all that identifies the case
            by_name += 1
            key = ("benchmark", str(b.get("fullname") or b.get("name") or f"#{i}"), "", "", None, None)
        m.cells.setdefault(key, _benchmark_cell(path, f"benchmarks[{i}]", b["stats"], e))
    if by_name:
        m.notes.append(
            f"{path.name}: {by_name} benchmark(s) without extra_info op/shape/dtype/provider: matched by test name only"
        )
    return m


def _benchmark_machine(path: Path, mi: dict, device: str | None) -> Machine:
    """The machine of a pytest-benchmark file: the fingerprint block our plugin (tests/conftest.py) writes, read
    by read_benchmark_block, else pytest-benchmark's own machine_info."""
    cpu = mi.get("cpu") if isinstance(mi.get("cpu"), dict) else {}
    block = read_benchmark_block(mi)
    hw, sw = block["hardware"], block["software"]
    sw.setdefault("python", mi.get("python_version"))
    if hw:
        fp = fingerprint_text(hw, sw)
        name = str(hw.get("name") or device or "?")
    else:
        cpu_name = cpu.get("brand_raw") or mi.get("processor") or "?"
        fp = (
            f"{cpu_name} ({mi.get('machine', '?')}, {cpu.get('count', '?')} logical CPUs), "
            f"{mi.get('system', '')} {mi.get('release', '')}; python {mi.get('python_version', '?')}; "
            f"node {mi.get('node', '?')}" + (f"; device {device}" if device else "")
        )
        name = device or str(cpu_name)
    kind = (hw or {}).get("kind") or ("cpu" if device in (None, "cpu") or str(device).startswith("cpu") else None)
    return Machine(
        path,
        "pytest-benchmark",
        name,
        fp,
        kind,
        text(block["profile"], path, f"{block['key']}.profile"),
        text(block["config_sha256"], path, f"{block['key']}.config_sha256"),
        {k: _version(sw.get(k), path, f"{block['key']}.software.{k}") for k in SOFTWARE_KEYS if sw.get(k) is not None},
        conditions=block["conditions"],
    )


def _benchmark_cell(path: Path, where: str, stats: dict, e: dict) -> dict:
    """One benchmark's cell: its median time and spread from pytest-benchmark's stats, the rest from the
    extra_info our plugin writes (throughput, ceilings, the judge's flags)."""
    median_s = number(stats.get("median"), path, f"{where}.stats.median")
    if not median_s:
        raise InputError(path, "missing, zero or not a number", key=f"{where}.stats.median", value=stats.get("median"))
    time_ms = median_s * 1e3
    flops = number(e.get("flops"), path, f"{where}.extra_info.flops")
    tflops = number(e.get("tflops"), path, f"{where}.extra_info.tflops")
    if tflops is None and flops and time_ms > 0:
        tflops = flops / (time_ms * 1e-3) / 1e12
    mean_s = number(stats.get("mean"), path, f"{where}.stats.mean")
    sd_s = number(stats.get("stddev"), path, f"{where}.stats.stddev")
    q1 = number(stats.get("q1"), path, f"{where}.stats.q1")  # quartiles: pytest-benchmark's spread
    q3 = number(stats.get("q3"), path, f"{where}.stats.q3")
    flags = e.get("flags") if isinstance(e.get("flags"), list) else []
    flags = [f for f in flags if isinstance(f, str)]  # the judge's verdicts (tests/test_benchmarks.py)
    return {
        "status": "ok",
        "time_ms": time_ms,
        "cov": sd_s / mean_s if mean_s and sd_s is not None else None,
        "p20_ms": q1 * 1e3 if q1 is not None else None,
        "p80_ms": q3 * 1e3 if q3 is not None else None,
        "noisy": not trusted({"flags": flags}),
        "tflops": tflops,
        **{
            k: number(e.get(k), path, f"{where}.extra_info.{k}")
            for k in ("busbw_gbps", "pct_of_measured", "pct_of_datasheet", "pct_of_ceiling")
        },
        "tensor_cores": text(e.get("tensor_cores"), path, f"{where}.extra_info.tensor_cores"),
        "flags": flags,
        "reason": "",
    }


def resolve_results(path: str | Path) -> Path:
    """A results directory (dawnscope roofline --out DIR) -> its results.json; a file as it is."""
    path = Path(path)
    if is_folder(path):
        if not exists(path / "results.json"):
            raise InputError(
                path, "a directory without results.json (give a results file or a roofline --out directory)"
            )
        return path / "results.json"
    return path


def load_machine(path: str | Path) -> Machine:
    path = resolve_results(path)
    doc = load_json(path)
    if not isinstance(doc, dict):
        raise InputError(path, f"top level is a JSON {type(doc).__name__}, expected a results object")
    schema = doc.get("schema")
    if isinstance(schema, str) and schema.startswith("dawnscope.results/"):
        if schema != RESULTS_SCHEMA:
            raise InputError(
                path, f"unsupported schema (this version reads {RESULTS_SCHEMA})", key="schema", value=schema
            )
        return _from_dawnscope(path, doc)
    if "benchmarks" in doc and "machine_info" in doc:
        return _from_pytest_benchmark(path, doc)
    if isinstance(schema, str) and schema.startswith("dawnscope.trace/"):
        raise InputError(path, "a trace report (microbench.trace.cli --json), not a results file")
    if "traceEvents" in doc:
        raise InputError(path, "a profiler trace, not a results file (read it with dawnscope trace)")
    raise InputError(
        path,
        f"not a results file: neither {RESULTS_SCHEMA} (key `schema`) nor pytest-benchmark "
        "JSON (keys `machine_info`, `benchmarks`)",
    )


def unique_labels(names: list[str]) -> list[str]:
    """Each input its own label: a name several inputs share gets ` #1`, ` #2`, ... (skipping any label another
    input already has), so no input's cells overwrite another's in a row keyed by label."""
    counts = Counter(names)
    taken = {n for n in names if counts[n] == 1}
    last: dict[str, int] = {}
    out = []
    for n in names:
        if counts[n] == 1:
            out.append(n)
            continue
        i = last.get(n, 0) + 1
        while f"{n} #{i}" in taken:
            i += 1
        last[n] = i
        taken.add(f"{n} #{i}")
        out.append(f"{n} #{i}")
    return out


def _label(machines: list[Machine]) -> None:
    for m, label in zip(machines, unique_labels([m.name for m in machines])):
        m.label = label


def _pick_baseline(machines: list[Machine], want: str | None) -> Machine:
    if want is None:
        return machines[0]
    exact = [m for m in machines if want in (m.label, str(m.path), m.path.name)]
    if len(exact) == 1:
        return exact[0]
    low = want.lower()
    part = [m for m in machines if low in m.label.lower() or low in str(m.path).lower()]
    if len(part) == 1:
        return part[0]
    labels = "; ".join(f"{m.label} ({m.path})" for m in machines)
    what = "matches several inputs" if part else "matches no input"
    raise InputError(None, f"{what} (inputs: {labels})", key="--baseline", value=want)


def differences(machines: list[Machine]) -> list[dict]:
    """What makes the inputs' cases measure different things: another profile, another configuration file of one
    profile, other software versions. Each {what: profile / config / software, key, detail}."""
    out = []
    label = {id(m): m.label or str(m.path) for m in machines}  # before compare_machines labels them
    profiles = {label[id(m)]: m.profile for m in machines}
    known = {p for p in profiles.values() if p}
    if len(known) > 1:
        detail = "different profiles: " + ", ".join(f"{k}: {v or 'unknown'}" for k, v in profiles.items())
        out.append({"what": "profile", "key": "profile", "detail": detail})
    elif len(known) == 1:
        shas = {m.config_sha256 for m in machines if m.profile and m.config_sha256}
        if len(shas) > 1:
            out.append(
                {
                    "what": "config",
                    "key": "config.sha256",
                    "detail": f"profile {known.pop()} comes from different configuration files (bench.toml sha256 "
                    "differs): the cases may not be the same",
                }
            )
    for key in SOFTWARE_KEYS:
        vals = {label[id(m)]: m.software.get(key) for m in machines if m.software.get(key) is not None}
        if len(set(vals.values())) > 1:
            detail = f"{key} versions differ: " + ", ".join(f"{k}: {v}" for k, v in vals.items())
            out.append({"what": "software", "key": key, "detail": detail})
    return out


def _flags(machines: list[Machine]) -> list[str]:
    return [d["detail"] for d in differences(machines)]


def _ratio(b: dict | None, c: dict) -> tuple[float | None, str | None]:
    """(baseline time / this time, verdict): no ratio from a noisy row ("noise"); "same within noise" where
    the two rows' p20-p80 spreads overlap (the ratio is kept, for reading, not for conclusions)."""
    if not (b and b["time_ms"] and c["time_ms"] and b["status"] == "ok" and c["status"] == "ok"):
        return None, None
    if b.get("noisy") or c.get("noisy"):
        return None, "noise"
    ratio = b["time_ms"] / c["time_ms"]
    if not math.isfinite(ratio):
        return None, None
    if (
        None not in (b.get("p20_ms"), b.get("p80_ms"), c.get("p20_ms"), c.get("p80_ms"))
        and b["p20_ms"] <= c["p80_ms"]
        and c["p20_ms"] <= b["p80_ms"]
    ):
        return ratio, "same within noise"
    return ratio, None


def compare(paths: list[str | Path], baseline: str | None = None) -> dict:
    if not paths:
        raise InputError(None, "give at least one results file")
    return compare_machines([load_machine(p) for p in paths], baseline)


def compare_machines(machines: list[Machine], baseline: str | None = None) -> dict:
    """The comparison of results already loaded (load_machine): per case, each machine's cell with its ratio to the
    baseline and the noise verdict (_ratio)."""
    _label(machines)
    base = _pick_baseline(machines, baseline)
    keys: list[tuple] = []
    seen = set()
    for m in machines:  # first file's order, then cases only later files have
        for k in m.cells:
            if k not in seen:
                seen.add(k)
                keys.append(k)
    cases = []
    for k in keys:
        b = base.cells.get(k)
        cells = {}
        for m in machines:
            c = m.cells.get(k)
            if c is not None:
                c = dict(c)
                c["ratio_to_baseline"], c["verdict"] = _ratio(b, c)
            cells[m.label] = c
        cases.append(
            {
                "op": k[0],
                "shape": k[1],
                "dtype": k[2],
                "provider": k[3],
                "layer": k[4],
                "phase": k[5],
                "missing_in": [m.label for m in machines if cells[m.label] is None],
                "cells": cells,
            }
        )
    return {
        "schema": SCHEMA,
        "baseline": base.label,
        "machines": [
            {
                "label": m.label,
                "file": str(m.path),
                "format": m.kind,
                "fingerprint": m.fingerprint,
                "device_kind": m.hardware_kind,
                "profile": m.profile,
                "software": m.software,
                "cases": len(m.cells),
            }
            for m in machines
        ],
        "flags": _flags(machines),
        "notes": [n for m in machines for n in m.notes],
        "cases": cases,
    }


# ---------------------------------------------------------------------------------------------------------
# Rendering: one set of cells for the terminal and the HTML page.


def table_cells(cmp: dict) -> tuple[list[tuple[str, str]], list[tuple[list[str], str | None]], list[list[str]]]:
    """Columns, rows and per-cell CSS classes ("missing" where a machine lacks the case). The baseline
    machine has no "vs base" column (it would say 1.00x everywhere)."""
    labels = [m["label"] for m in cmp["machines"]]
    # Collective rows (microbench.comm.cli) carry a bus bandwidth: a column of its own where any case has one.
    bus = any((x or {}).get("busbw_gbps") is not None for c in cmp["cases"] for x in c["cells"].values())
    columns = [("op", "left"), ("shape", "left"), ("dtype", "left"), ("provider", "left")]
    for i, lab in enumerate(labels):
        tag = f"[{i + 1}]"
        columns += [(f"{tag} time ms", "right"), (f"{tag} TFLOP/s", "right")]
        columns += [(f"{tag} busbw GB/s", "right")] if bus else []
        columns += [(f"{tag} % meas/ds", "right")]
        if lab != cmp["baseline"]:
            columns.append((f"{tag} vs base", "right"))
    rows, classes = [], []
    for c in cmp["cases"]:
        shape = c["shape"] + (f" [{c['layer']}]" if c["layer"] else "") + (f" {c['phase']}" if c["phase"] else "")
        cells = [ops.short_op(c["op"]), shape, c["dtype"], c["provider"]]
        cls = ["", "", "", ""]
        for lab in labels:
            width = (5 if bus else 4) - (lab == cmp["baseline"])  # the baseline has no "vs base"
            mc, mcls = _machine_cells(c["cells"][lab], bus)
            cells += mc[:width]
            cls += mcls[:width]
        rows.append((cells, None))
        classes.append(cls)
    return columns, rows, classes


def _short(ms: float) -> str:
    """3 significant digits, never an exponent (1142 ms stays 1142, not 1.14e+03)."""
    return f"{ms:.0f}" if ms >= 1000 else f"{ms:.3g}"


def _machine_cells(x: dict | None, bus: bool = False) -> tuple[list[str], list[str]]:
    """One machine's cells of a case: time (p20-p80), TFLOP/s, [busbw,] % meas/ds, vs base; and their classes."""
    n = 5 if bus else 4
    if x is None:
        return ["missing"] + [""] * (n - 1), ["missing"] + [""] * (n - 1)
    if x["status"] != "ok":
        return [x["status"]] + [""] * (n - 1), ["dim"] + [""] * (n - 1)
    if x["pct_of_measured"] is not None or x["pct_of_datasheet"] is not None:
        pct = f"{_f(x['pct_of_measured'], '.0f')} / {_f(x['pct_of_datasheet'], '.0f')}"
    else:
        pct = _f(x["pct_of_ceiling"], ".0f") + (" roof" if x["pct_of_ceiling"] is not None else "")
    t = _f(x["time_ms"], ".4g")
    if x.get("p20_ms") is not None and x.get("p80_ms") is not None:
        t += f" ({_short(x['p20_ms'])}-{_short(x['p80_ms'])})"
    t += " ~" if x.get("noisy") else (" !" if x["flags"] else "")
    r, verdict = x["ratio_to_baseline"], x.get("verdict")
    vs = {"same within noise": "same", "noise": "noise"}.get(verdict) or ("-" if r is None else f"{r:.2f}x")
    bw = [_f(x.get("busbw_gbps"), ".3g")] if bus else []
    return [t, _f(x["tflops"], ".3g"), *bw, pct, vs], [""] * n


COMPARE_LEGEND = (
    "time ms: median (p20-p80); ~ noisy, ! flagged. % meas/ds: % of the machine's measured / "
    "datasheet (CPU: estimated) compute ceiling. vs base: baseline time / this time (2.00x = twice as "
    "fast); same: same within noise (the p20-p80 spreads overlap); noise: a noisy row, no ratio"
)


def print_compare(cmp: dict, console=None, kept_in: str = kept_in_text(what="comparison")) -> None:
    from rich.markup import escape

    from microbench.report.roofline_report import rich_table, wide_console

    console = console or wide_console()  # piped: 120 columns (or COLUMNS); the least needed columns go first
    for i, m in enumerate(cmp["machines"]):
        base = " (baseline)" if m["label"] == cmp["baseline"] else ""
        console.print(
            f"[bold]{escape(f'[{i + 1}]')}[/] {escape(m['label'])}{base}: {escape(m['fingerprint'])}  "
            f"[dim]{escape(m['file'])}, {m['format']}, profile {escape(m['profile'] or 'unknown')}[/]"
        )
    for f in cmp["flags"]:
        console.print(f"[bold red]flag:[/] {escape(f)}")
    columns, rows, classes = table_cells(cmp)
    n = len(cmp["machines"])
    drop = [f"[{i + 1}] % meas/ds" for i in range(n)] + [f"[{i + 1}] TFLOP/s" for i in range(n)]
    if n > 2:  # many machines: the times and ratios matter most
        drop += [f"[{i + 1}] vs base" for i in range(n)]
    styled = [(cells, "red" if "missing" in cls else None) for (cells, _), cls in zip(rows, classes)]
    console.print(
        rich_table(
            columns,
            styled,
            width=console.width,
            drop_order=drop,
            title=COMPARE_LEGEND,
            kept_in=f"the results files compared, {kept_in}",
        )
    )
    for n in cmp["notes"]:
        console.print(f"[yellow]note:[/] {escape(n)}")


MAX_FIGURE_CASES = 60  # one bar row per case: beyond this the picture is unreadable (the table has them all)


def ratio_figure(cmp: dict):
    """The ratio to the baseline per case (baseline time / this time, log scale), one bar per other machine; a
    case without a trustworthy ratio (noisy, flagged, missing) has no bar and says why. None with one machine.
    The caller closes it."""
    others = [m["label"] for m in cmp["machines"] if m["label"] != cmp["baseline"]]
    cases = cmp["cases"][:MAX_FIGURE_CASES]
    if not others or not cases:
        return None
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(10, 1.5 + 0.28 * len(cases) * len(others)))
    h = 0.8 / len(others)
    for j, label in enumerate(others):
        for i, c in enumerate(cases):
            y = i + j * h
            cell = c["cells"].get(label) or {}
            r = cell.get("ratio_to_baseline")
            if r:
                ax.barh(y, r, height=h, left=0, color=f"C{j}", label=label if i == 0 else None)
                ax.annotate(f"{r:.2f}x", (r, y), xytext=(2, 0), textcoords="offset points", va="center", fontsize=6)
            else:
                why = "missing" if label in c.get("missing_in", []) else (cell.get("verdict") or "no ratio")
                ax.annotate(
                    why, (1.0, y), xytext=(2, 0), textcoords="offset points", va="center", fontsize=6, color="gray"
                )
    ax.set_xscale("log")
    ax.axvline(1.0, color="black", lw=0.8)
    ax.set_yticks([i + 0.4 - h / 2 for i in range(len(cases))])
    ax.set_yticklabels(
        [f"{ops.short_op(c['op'])} {c['shape']} {c['dtype']} {c['provider']}"[:60] for c in cases], fontsize=6
    )
    ax.invert_yaxis()
    ax.set_xlabel(f"baseline time / this time (baseline: {cmp['baseline']}; > 1: faster than the baseline)")
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    return fig


def compare_html(cmp: dict) -> str:
    items = "".join(
        f"<li><b>[{i + 1}] {H.esc(m['label'])}</b>{' (baseline)' if m['label'] == cmp['baseline'] else ''}"
        f': <span class="fp">{H.esc(m["fingerprint"])}</span><br>{H.esc(m["file"])}, {H.esc(m["format"])}, '
        f"profile {H.esc(m['profile'] or 'unknown')}, {m['cases']} cases</li>"
        for i, m in enumerate(cmp["machines"])
    )
    parts = [f"<h2>machines</h2><ul>{items}</ul>"]
    if cmp["flags"]:
        parts.append("<h2>flags</h2>" + H.notes_html(cmp["flags"], "flag"))
    columns, rows, classes = table_cells(cmp)
    fig = ratio_figure(cmp)
    if fig is not None:
        try:
            parts.append("<h2>ratio per case</h2>" + H.figure_img(fig, "ratio to the baseline per case"))
        finally:
            pyplot().close(fig)
    parts.append(f"<h2>cases</h2><p>{H.esc(COMPARE_LEGEND)}</p>" + H.table(columns, rows, classes))
    if cmp["notes"]:
        parts.append("<h2>notes</h2>" + H.notes_html(cmp["notes"]))
    return H.page(
        f"dawnscope comparison: {len(cmp['machines'])} result files, baseline {cmp['baseline']}", "\n".join(parts)
    )
