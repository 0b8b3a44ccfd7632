"""The terminal report of a training-step decomposition (microbench.decompose.pipeline)."""

from __future__ import annotations

from microbench.core.fingerprint import fingerprint_line
from microbench.core.verdict import is_impossible, is_noisy
from microbench.report.cells import or_dash as _fmt


def flag_groups(layers: list[dict]) -> list[tuple[str, list[dict]]]:
    """Flagged layer rows grouped by their first flag: a reason shared by many rows is one line with its count,
    the most rows first."""
    groups: dict[str, list[dict]] = {}
    for layer in layers:
        if layer.get("flags"):
            groups.setdefault(layer["flags"][0], []).append(layer)
    return sorted(groups.items(), key=lambda kv: -len(kv[1]))


# Columns a narrow terminal drops first; layer, phase, the time and the headline numbers stay.
LAYER_DROP_ORDER = ("replay ms", "FLOP/B", "bound", "module", "GFLOP", "top class", "TC", "%")


def layer_cells(layers: list[dict], unit: str) -> tuple[list[tuple[str, str]], list[tuple[list[str], str | None]]]:
    """The per-layer table as text cells (roofline_report.rich_table draws them); a flagged layer's % roof ends in "!"."""
    columns = [
        ("layer", "left"),
        ("module", "left"),
        ("phase", "left"),
        (f"{unit} ms", "right"),
        ("%", "right"),
        ("GFLOP", "right"),
        ("FLOP/B", "right"),
        ("TFLOP/s", "right"),
        ("% roof", "right"),
        ("bound", "left"),
        ("TC", "left"),
        ("top class", "left"),
        ("replay ms", "right"),
    ]
    rows = []
    for l in layers:
        cls = next(iter(l["time_by_class_ms"]), "-")
        rp = " ".join(f"{p}:{v:.3g}" for p, v in (l.get("replay_ms") or {}).items()) or "-"
        mark = " !" if l.get("flags") else ""
        style = "red" if is_impossible(l) else ("yellow" if is_noisy(l) else None)
        rows.append(
            (
                [
                    l["name"],
                    l["module"],
                    l["phase"],
                    f"{l['time_ms']:.3g}",
                    _fmt(l["pct_of_profiled"], ".1f"),
                    _fmt(l["flops"] / 1e9 if l["flops"] else None),
                    _fmt(l["intensity"], ".3g"),
                    _fmt(l["tflops"]),
                    _fmt(l["pct_of_ceiling"], ".0f") + mark,
                    l["bound"] or "-",
                    l["tensor_cores"],
                    cls,
                    rp,
                ],
                style,
            )
        )
    return columns, rows


def print_decomposition(doc: dict, console=None, top: int = 30) -> None:
    """The per-layer table (largest first), the step summary and the replay table."""
    from rich.markup import escape

    from microbench.report.roofline_report import busy_line, wide_console

    console = console or wide_console()
    if warn := busy_line(doc):
        console.print(f"[bold red]warning:[/] {escape(warn)}")
    _print_layers(console, doc, top)
    _print_step_summary(console, doc["summary"], doc)
    _print_replay(console, doc)
    for note in doc["notes"]:
        console.print(f"[yellow]note:[/] {note}")


def _print_layers(console, doc: dict, top: int) -> None:
    """The `top` layer rows, most time first, and the flags' reasons once each."""
    from rich.markup import escape

    from microbench.report.roofline_report import rich_table

    s = doc["summary"]
    run = doc["run"]
    layers = sorted(doc["layers"], key=lambda l: -l["time_ms"])
    columns, cells = layer_cells(layers[:top], "kernel" if s["profiled_unit"] == "kernel" else "op")
    console.print(
        rich_table(
            columns,
            cells,
            f"{doc['model']['name']}: batch {run['batch']} {run['dtype']} on "
            f"{fingerprint_line(doc['hardware'], doc['software'])}",
            console.width,
            LAYER_DROP_ORDER,
            kept_in="decomposition.json",
        )
    )  # the files decompose writes (no report.html)
    if len(layers) > top:
        console.print(f"[dim]{len(layers) - top} more (layer, phase) rows in decomposition.json[/]")
    for text, rows in flag_groups(layers)[:5]:  # "!" in the table; why, once per reason (all: decomposition.json)
        names = ", ".join(f"{l['name']} {l['phase']}" for l in rows[:3]) + (", ..." if len(rows) > 3 else "")
        console.print(
            f"[bold red]flag[/] ({len(rows)} layer row{'s' if len(rows) > 1 else ''}: {escape(names)}): {escape(text)}"
        )


def _print_step_summary(console, s: dict, doc: dict) -> None:
    """The step summary table (`s`: the document's summary), the step's flags and its time by class."""
    from rich.markup import escape
    from rich.table import Table

    summary = Table(title="step summary", show_header=False)
    summary.add_column("what")
    summary.add_column("value", justify="right")
    summary.add_column("note")
    sp = s["step_time_spread"]
    # --timed-steps 0 times no unprofiled step: the step time is then the profiled steps' (analysis.py says so)
    timed = (
        "unprofiled steps"
        if (doc.get("run") or {}).get("timed_steps", 1)
        else "profiled steps (--timed-steps 0: profiler overhead included)"
    )
    ceiling_text = ", ".join(f"{k} {v['tflops']:.3g} TFLOP/s ({v['source']})" for k, v in s["gemm_ceilings"].items())
    rows = [
        (
            "step time",
            f"{s['step_time_ms']:.4g} ms",
            f"median of {sp['reps']} {timed}, p20-p80 {sp['p20']:.4g}-{sp['p80']:.4g} ms, cov {sp['cov']:.0%}",
        ),
        (
            "profiled step",
            f"{_fmt(s.get('profiled_step_ms'), '.4g')} ms",
            f"wall time of the profiled steps' `step` ranges; profiler overhead "
            f"{_fmt(s.get('profiler_overhead'), '+.0%')} against the unprofiled step time",
        ),
        (
            "profiled time",
            f"{s['profiled_time_ms']:.4g} ms",
            s["profiled_time_definition"] + f"; {_fmt(s.get('operator_coverage'), '.0%')} of the profiled step",
        ),
        (
            "attributed",
            f"{s['attributed_time_ms']:.4g} ms",
            f"{_fmt(s['attribution_coverage'], '.2%')} of the profiled time",
        ),
        (
            "FLOPs per step",
            f"{s['flops_per_step'] / 1e9:.4g} GFLOP",
            f"forward {s['forward_flops'] / 1e9:.4g}, backward {s['backward_flops'] / 1e9:.4g} GFLOP",
        ),
        ("achieved", f"{_fmt(s['achieved_tflops'], '.4g')} TFLOP/s", "FLOPs per step / step time"),
        ("Tensor Core time share", _fmt(s["tensor_core_time_share"], ".1%"), s["tensor_core_note"]),
        (
            "GEMM/conv time",
            f"{s['gemm_time_ms']:.4g} ms",
            f"{s['gemm_time_at_ceiling_ms']:.4g} ms at the ceilings {ceiling_text}",
        ),
        (
            "time if GEMM/conv at ceiling",
            f"{s['time_if_gemm_at_ceiling_ms']:.4g} ms",
            "step time minus what GEMM/conv would save",
        ),
        ("time if element-wise free", f"{s['time_if_elementwise_free_ms']:.4g} ms", "normalization kept"),
        (
            "time if element-wise + norm free",
            f"{s['time_if_elementwise_and_norm_free_ms']:.4g} ms",
            "the paper's 'without BatchNorm and ReLU'",
        ),
        (
            "backward by sequence number",
            _fmt(s["backward_by_sequence_share"], ".1%"),
            f"backward ranges agree on {_fmt(s['backward_range_agreement'], '.1%')} of it",
        ),
    ]
    for r in rows:
        summary.add_row(*r)
    console.print(summary)
    for flag in s.get("step_flags", []):
        console.print(f"[bold red]flag:[/] {escape(flag)}")
    console.print(
        "time by class: "
        + ", ".join(f"{c} {v:.3g} ms ({s['share_by_class'].get(c, 0):.0%})" for c, v in s["time_by_class_ms"].items())
    )


def _print_replay(console, doc: dict) -> None:
    """The replay of the step's GEMM / convolution cases through the providers, where it ran."""
    from rich.markup import escape

    from microbench.report.roofline_report import providers_that_cannot_run, results_table

    rep = doc.get("replay") or {}
    if rep.get("enabled") and rep["rows"]:
        rows = {"results": rep["rows"], "hardware": doc["hardware"]}
        console.print(
            results_table(
                rows,
                width=console.width,
                group_skipped=True,
                kept_in="results.json",
                title=f"replay: {rep['cases']} GEMM/conv cases of the step "
                f"({rep['occurrences']} occurrences) through {', '.join(rep['providers'])}",
            )
        )
        if gone := providers_that_cannot_run(rows):  # one line each, as roofline says them, not a skipped row per case
            console.print(
                "[dim]not in the table: "
                + "; ".join(f"{escape(p)} ({n} rows): {escape(why)}" for p, (n, why) in gone.items())
                + "[/]"
            )
