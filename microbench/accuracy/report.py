"""Terminal tables (rich) for the leaderboard and for a run, and the accuracy-over-time plot."""
from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from .leaderboard import Leaderboard


def hms(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = round(seconds)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}" if s >= 60 else f"{seconds:.2f} s"


def _f(v, spec: str = ".3g") -> str:
    return "-" if v is None else format(v, spec)


def print_leaderboard(board: Leaderboard, console: Console | None = None) -> None:
    console = console or Console()
    for (source, task), entries in board.by_task().items():
        mlperf = source == "mlperf"
        first = entries[0]
        title = (f"MLPerf {task}: score by the MLPerf rule" if mlperf
                 else f"DAWNBench {task}: {first.metric} >= {first.threshold:g}")
        t = Table(title=escape(title), title_justify="left")
        for col in ("#", "time-to-accuracy", "epoch", "cost (USD)", "hardware", "framework", "model / org", "runs",
                    "run spread (CoV)"):
            wide = col in ("hardware", "framework", "model / org")  # free text of the submitters: one line each
            t.add_column(col, justify="right" if col in ("#", "epoch", "cost (USD)", "runs") else "left",
                         no_wrap=True, overflow="ellipsis", max_width=28 if wide else None,
                         min_width=3 if col == "#" else None)
        for i, e in enumerate(entries, 1):
            when = (f"{e.score_minutes:.2f} min" if e.score_minutes is not None else "no score") if mlperf else hms(e.tta_seconds)
            runs = (f"{len(e.runs)}" + (f"/{e.runs_required}" if e.runs_required else "")) if e.runs else "1"
            t.add_row(str(i), when, _f(e.epoch, "g"), _f(e.cost_usd, ".2f"), escape(e.hardware or "-"),
                      escape(e.framework or "-"), escape(" / ".join(x for x in (e.model, e.author) if x) or "-"), runs,
                      _f(e.spread_cov, ".1%"))
        console.print(t)
        for e in entries:
            for n in e.notes if (mlperf or e.tta_seconds is None) else []:
                console.print(f"  [dim]{escape(Path(e.file).name)}: {escape(n)}[/]")
    if board.unreadable:
        console.print(f"[bold]{len(board.unreadable)} file(s) could not be read[/]")
        for u in board.unreadable:
            console.print(f"  {escape(u['file'])}: {escape(u['reason'])}")
    console.print(f"[dim]{len(board.entries)} entries; {board.skipped} other files (submission JSONs, inference "
                  "entries, notes) not leaderboard inputs[/]")


def print_run(doc: dict, console: Console | None = None) -> None:
    """The DAWNBench analysis's table form: one row per (model, hardware), mean TTA, CoV, fraction reached;
    plus the one-sided t-test on the final accuracies."""
    console = console or Console()
    s = doc["summary"]
    acc = s["accuracy"]
    t = Table(title=escape(f"time-to-accuracy: {doc['model']} to top-1 >= {doc['target']:g} "
                           f"({doc['seeds']} seeds, {doc['epochs']} epochs each)"), title_justify="left")
    for col in ("model", "hardware", "mean TTA", "CoV", "runs reaching target", "mean epochs",
                "mean final acc.", "t", "p (mean > target)"):
        t.add_column(col)
    t.add_row(escape(doc["model"]), escape(doc["hardware"]["name"]), hms(s["mean_tta_s"]), _f(s["cov_tta"], ".1%"),
              f"{s['reached']}/{s['runs']} ({s['fraction_reached']:.0%})", _f(s["mean_epochs_to_target"], ".1f"),
              _f(acc["mean"], ".4f"), _f(acc["t"], ".2f"), _f(acc["p_value"], ".2g"))
    console.print(t)
    console.print(f"[dim]{escape(doc['timing'])}; torch threads {doc.get('torch_threads')}[/]")
    if "profile" in doc:
        print_profile(doc["profile"], console)


def print_profile(p: dict, console: Console) -> None:
    t = Table(title=f"where one epoch's {p['epoch_s']:.3f} s went ({p['steps_per_epoch']:.0f} steps)",
              title_justify="left")
    t.add_column("part")
    t.add_column("seconds", justify="right")
    t.add_column("share", justify="right")
    rows = [("data loading", p["data_loading_s"])]
    rows += [(f"{c} ({p['unit']} time)", v) for c, v in sorted(p["by_class_s"].items(), key=lambda kv: -kv[1])]
    rows += [("idle / framework overhead", p["idle_or_overhead_s"])]
    for name, v in rows:
        t.add_row(escape(name), f"{v:.4f}", f"{v / p['epoch_s']:.1%}" if p["epoch_s"] else "-")
    mu = p["matrix_unit_s"]
    t.add_row("of which matrix units (Tensor Cores / AMX)", "unknown" if mu is None else f"{mu:.4f}",
              "-" if mu is None else f"{mu / p['epoch_s']:.1%}")
    console.print(t)
    for n in p["notes"]:
        console.print(f"  [dim]{escape(n)}[/]")


def plot_accuracy(doc: dict, path: str | Path) -> Path:
    """Test accuracy over the time-to-accuracy clock, one line per seed, the target as a dashed line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for r in doc["runs"]:
        ax.plot([e["elapsed_s"] for e in r["epochs"]], [e["accuracy"] for e in r["epochs"]], marker="o", ms=3,
                label=f"seed {r['seed']}" + (f" ({r['tta_s']:.2f} s)" if r["tta_s"] is not None else " (not reached)"))
    ax.axhline(doc["target"], ls="--", color="k", lw=1, label=f"target {doc['target']:g}")
    ax.set_xlabel("time-to-accuracy clock (s)")
    ax.set_ylabel("test top-1 accuracy")
    ax.set_title(f"{doc['model']} on {doc['hardware']['name']}"[:80], fontsize=9)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    path = Path(path)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
