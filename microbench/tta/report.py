"""Terminal tables (rich) for the leaderboard and for a run, and the accuracy-over-time plot."""

from __future__ import annotations

from pathlib import Path

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from microbench.core.conditions import busy_advice, conditions_line
from microbench.report.cells import or_dash as _f
from microbench.report.figures import pyplot
from microbench.report.roofline_report import wide_console

from .leaderboard import Leaderboard


def hms(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = round(seconds)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}" if s >= 60 else f"{seconds:.2f} s"


LEADERBOARD_COLUMNS = (
    "#",
    "time-to-accuracy",
    "epoch",
    "cost (USD)",
    "hardware",
    "framework",
    "model / org",
    "runs",
    "run spread (CoV)",
)
FREE_TEXT = ("hardware", "framework", "model / org")  # the submitters' free text: one line each, cut to fit


def _free_text_widths(columns, rows, width: int) -> dict[int, int]:
    """Column index -> the most characters each free-text column gets: what the other columns leave of `width`
    (one space between columns and at each edge), shared so that a short column gives its unused share to the
    others (hardware was cut at a fixed 18 with 20 columns to spare)."""
    natural = [max([len(c)] + [len(r[j]) for r in rows]) for j, c in enumerate(columns)]
    free = [j for j, c in enumerate(columns) if c in FREE_TEXT]
    left = width - sum(w for j, w in enumerate(natural) if j not in free) - len(columns) - 1
    out: dict[int, int] = {}
    for n, j in enumerate(sorted(free, key=lambda j: natural[j])):  # the narrowest first: it may not need its share
        out[j] = max(5, min(natural[j], left // (len(free) - n)))
        left -= out[j]
    return out


def print_leaderboard(board: Leaderboard, console: Console | None = None) -> None:
    console = console or wide_console()
    for (source, task), entries in board.by_task().items():
        mlperf = source == "mlperf"
        first = entries[0]
        title = (
            f"MLPerf {task}: score by the MLPerf rule"
            if mlperf
            else f"DAWNBench {task}: {first.metric} >= {first.threshold:g}"
        )
        # No vertical rules (one space between columns) and a floor under each key column, so that at 120
        # columns the rank, the time and the runs keep their width and only the submitters' free text is cut.
        t = Table(title=escape(title), title_justify="left", box=box.SIMPLE_HEAD, padding=0)
        rows = []
        for i, e in enumerate(entries, 1):
            when = (
                (f"{e.score_minutes:.2f} min" if e.score_minutes is not None else "no score")
                if mlperf
                else hms(e.tta_seconds)
            )
            runs = (f"{len(e.runs)}" + (f"/{e.runs_required}" if e.runs_required else "")) if e.runs else "1"
            rows.append(
                [
                    str(i),
                    when,
                    _f(e.epoch, "g"),
                    _f(e.cost_usd, ".2f"),
                    e.hardware or "-",
                    e.framework or "-",
                    " / ".join(x for x in (e.model, e.author) if x) or "-",
                    runs,
                    _f(e.spread_cov, ".1%"),
                ]
            )
        widths = _free_text_widths(LEADERBOARD_COLUMNS, rows, console.width)
        for j, col in enumerate(LEADERBOARD_COLUMNS):
            t.add_column(
                col,
                justify="right" if col in ("#", "epoch", "cost (USD)", "runs") else "left",
                no_wrap=True,
                overflow="ellipsis",
                max_width=widths.get(j),
                min_width=None if j in widths else len(col),
            )
        for cells in rows:
            t.add_row(*[escape(c) for c in cells])
        console.print(t)
        for e in entries:
            for n in e.notes if (mlperf or e.tta_seconds is None) else []:
                console.print(f"  [dim]{escape(Path(e.file).name)}: {escape(n)}[/]")
    if board.unreadable:
        console.print(f"[bold]{len(board.unreadable)} file(s) could not be read[/]")
        for u in board.unreadable:
            console.print(f"  {escape(u['file'])}: {escape(u['reason'])}")
    console.print(
        f"[dim]{len(board.entries)} entries; {board.skipped} other files (submission JSONs, inference "
        "entries, notes) not leaderboard inputs[/]"
    )


def run_documents(doc: dict) -> list[dict]:
    """The run document of each recipe (a single run's document is its own)."""
    return doc["recipes"] if "recipes" in doc else [doc]


def print_run(doc: dict, console: Console | None = None) -> None:
    """Per recipe the run table; then, where runs were also tested on a second test set, the generalization
    table (and the tuned-against-standard test when both recipes ran)."""
    console = console or wide_console()
    for d in run_documents(doc):
        _print_one_run(d, console)
    if any("generalization" in d for d in run_documents(doc)):
        print_generalization(doc, console)


def print_generalization(doc: dict, console: Console) -> None:
    docs = [d for d in run_documents(doc) if "generalization" in d]
    t = Table(
        title=escape(f"generalization: test set against a new test set ({docs[0].get('new_test_set')})"),
        title_justify="left",
    )
    for col in ("recipe", "precision", "runs", "test acc.", "new test acc.", "drop", "drop 95 % CI"):
        t.add_column(
            col,
            justify="left" if col in ("recipe", "precision") else "right",
            no_wrap=True,
            min_width=len(col) if col != "new test acc." else None,
        )
    for d in docs:
        g = d["generalization"]
        lo, hi = g["drop_ci95"]
        t.add_row(
            escape(str(d.get("recipe") or "-")),
            d.get("precision", "fp32"),
            str(g["runs"]),
            f"{g['test_accuracy']:.4f}",
            f"{g['new_test_accuracy']:.4f}",
            f"{g['drop']:+.4f}",
            "-" if lo is None else f"{lo:+.4f} .. {hi:+.4f}",
        )
    console.print(t)
    c = doc.get("comparison")
    if c:
        console.print(
            f"tuned drop {c['tuned_drop']:+.4f} against standard {c['standard_drop']:+.4f} "
            f"(difference {c['difference']:+.4f}); Welch one-sided p (tuned drop > standard drop) = "
            + ("-" if c["p_value"] is None else f"{c['p_value']:.3g}")
        )


def _print_one_run(doc: dict, console: Console) -> None:
    """The DAWNBench analysis's table form: one row per (model, hardware), mean TTA, CoV, fraction reached;
    plus the one-sided t-test on the final accuracies."""
    s = doc["summary"]
    acc = s["accuracy"]
    recipe = f", recipe {doc['recipe']} ({doc.get('precision', 'fp32')})" if doc.get("recipe") else ""
    t = Table(
        title=escape(
            f"time-to-accuracy: {doc['model']} to top-1 >= {doc['target']:g} "
            f"({doc['seeds']} seeds, {doc['epochs']} epochs each{recipe})"
        ),
        title_justify="left",
    )
    for col in (
        "model",
        "hardware",
        "mean TTA",
        "CoV",
        "runs reaching target",
        "mean epochs",
        "mean final acc.",
        "t",
        "p (mean > target)",
    ):
        t.add_column(col)
    t.add_row(
        escape(doc["model"]),
        escape(doc["hardware"]["name"]),
        hms(s["mean_tta_s"]),
        _f(s["cov_tta"], ".1%"),
        f"{s['reached']}/{s['runs']} ({s['fraction_reached']:.0%})",
        _f(s["mean_epochs_to_target"], ".1f"),
        _f(acc["mean"], ".4f"),
        _f(acc["t"], ".2f"),
        _f(acc["p_value"], ".2g"),
    )
    console.print(t)
    console.print(f"[dim]{escape(doc['timing'])}; torch threads {doc.get('torch_threads')}[/]")
    for note in doc.get("notes") or []:
        console.print(f"  [dim]{escape(note)}[/]")
    cond = doc.get("conditions")
    if cond:
        console.print(
            f"[bold red]warning:[/] {escape(busy_advice(cond))}"
            if cond.get("busy")
            else f"[dim]{escape(conditions_line(cond))}[/]"
        )
    if "profile" in doc:
        print_profile(doc["profile"], console)


def print_profile(p: dict, console: Console) -> None:
    t = Table(
        title=f"where one epoch's {p['epoch_s']:.3f} s went ({p['steps_per_epoch']:.0f} steps)", title_justify="left"
    )
    t.add_column("part")
    t.add_column("seconds", justify="right")
    t.add_column("share", justify="right")
    rows = [("data loading", p["data_loading_s"])]
    rows += [(f"{c} ({p['unit']} time)", v) for c, v in sorted(p["by_class_s"].items(), key=lambda kv: -kv[1])]
    rows += [("idle / framework overhead", p["idle_or_overhead_s"])]
    for name, v in rows:
        t.add_row(escape(name), f"{v:.4f}", f"{v / p['epoch_s']:.1%}" if p["epoch_s"] else "-")
    mu = p["matrix_unit_s"]
    t.add_row(
        "of which matrix units (Tensor Cores / AMX)",
        "unknown" if mu is None else f"{mu:.4f}",
        "-" if mu is None else f"{mu / p['epoch_s']:.1%}",
    )
    console.print(t)
    for n in p["notes"]:
        console.print(f"  [dim]{escape(n)}[/]")


def plot_accuracy(doc: dict, path: str | Path) -> Path:
    """Test accuracy over the time-to-accuracy clock, one line per seed, the target as a dashed line."""
    plt = pyplot()

    fig, ax = plt.subplots(figsize=(7, 4.2))
    docs = run_documents(doc)
    for d in docs:
        for r in d["runs"]:
            ax.plot(
                [e["elapsed_s"] for e in r["epochs"]],
                [e["accuracy"] for e in r["epochs"]],
                marker="o",
                ms=3,
                label=(f"{d['recipe']} " if d.get("recipe") else "")
                + f"seed {r['seed']}"
                + (f" ({r['tta_s']:.2f} s)" if r["tta_s"] is not None else " (not reached)"),
            )
    doc = docs[0]
    ax.axhline(doc["target"], ls="--", color="k", lw=1, label=f"target {doc['target']:g}")
    ax.set_xlabel("time-to-accuracy clock (s)")
    ax.set_ylabel("test top-1 accuracy")
    ax.set_title(f"{doc['model']} on {doc['hardware']['name']}"[:80], fontsize=9)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    return _save(plt, fig, path, dpi=120)


def print_thresholds(study, console: Console | None = None) -> None:
    """Per task: each entry's time and rank at the task's own threshold, its best and worst rank over the
    range, and the threshold at which it stops reaching; then how many entries reach / change rank."""
    console = console or wide_console()
    for task in study.tasks:
        entries = [e for e in study.entries if (e["source"], e["task"]) == (task["source"], task["task"])]
        entries.sort(key=lambda e: (e["rank_at_official"] is None, e["rank_at_official"] or 0, e["entry"]))
        lo, hi = task["thresholds"][0], task["thresholds"][-1]
        official = task["official_threshold"]
        t = Table(
            title=escape(
                f"{task['source']} {task['task']}: time-to-accuracy from {lo:g} to {hi:g} % "
                f"(own threshold {_f(official, 'g')} %)"
            ),
            title_justify="left",
        )
        for col, right in (
            ("#", True),
            ("entry", False),
            ("TTA at own", True),
            ("ranks in range", True),
            ("misses from", True),
            ("best acc.", True),
        ):
            t.add_column(
                col,
                justify="right" if right else "left",
                no_wrap=True,
                overflow="ellipsis",
                max_width=40 if col == "entry" else None,
                min_width=len(col),
            )
        for e in entries:
            span = (
                "-"
                if e["best_rank"] is None
                else (
                    f"{e['best_rank']}" if e["best_rank"] == e["worst_rank"] else f"{e['best_rank']}-{e['worst_rank']}"
                )
            )
            t.add_row(
                _f(e["rank_at_official"], "d"),
                escape(e["entry"]),
                hms(e["tta_seconds_at_official"]),
                span,
                "-" if e["stops_reaching_at"] is None else f"{e['stops_reaching_at']:g} %",
                f"{e['max_accuracy']:.2f} %",
            )
        console.print(t)
        console.print(_threshold_line(task))
    if study.unreadable:
        console.print(f"[bold]{len(study.unreadable)} file(s) without a usable accuracy curve[/]")
        for u in study.unreadable:
            console.print(f"  {escape(u['file'])}: {escape(u['reason'])}")


def _threshold_line(task: dict) -> str:
    """The finding in one line: where the order moves, and where entries stop reaching."""
    pairs = list(zip(task["thresholds"], task["reaching"], task["rank_changes"]))
    moved = [f"{t:g}: {c}" for t, _, c in pairs if c]
    lost = [f"{t:g}: {n}/{task['entries']}" for t, n, _ in pairs if n < task["entries"]]
    text = "  entries that change rank or reach/miss against the own threshold, by threshold: " + (
        ", ".join(moved) if moved else "none"
    )
    return escape(text + ("; entries reaching, where not all: " + ", ".join(lost) if lost else ""))


def plot_thresholds(study, path: str | Path) -> Path:
    """Time-to-accuracy against the threshold, one line per entry (log time axis), one panel per task; the
    task's own threshold dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = max(1, len(study.tasks))
    fig, axes = plt.subplots(n, 1, figsize=(8, 3.4 * n), squeeze=False)
    for ax, task in zip(axes[:, 0], study.tasks):
        key = (task["source"], task["task"])
        by_entry: dict[tuple, list] = {}
        for r in study.rows:
            if (r["source"], r["task"]) == key:
                by_entry.setdefault((r["file"], r["entry"]), []).append(r)
        for (_, label), rows in sorted(by_entry.items()):
            pts = [(r["threshold"], r["tta_seconds"]) for r in rows if r["tta_seconds"] is not None]
            if pts:
                ax.plot(*zip(*pts), marker=".", ms=3, lw=1, label=label[:40])
        if task["official_threshold"] is not None:
            ax.axvline(task["official_threshold"], ls="--", color="k", lw=1)
        ax.set_yscale("log")
        ax.set_xlabel("threshold (accuracy, %)")
        ax.set_ylabel("time-to-accuracy (s)")
        ax.set_title(f"{task['source']} {task['task']}: {task['entries']} entries", fontsize=9)
        ax.grid(alpha=0.3, which="both")
        if len(by_entry) <= 12:
            ax.legend(fontsize=6)
    return _save(plt, fig, path, dpi=110)


def _save(plt, fig, path: str | Path, dpi: int) -> Path:
    path = Path(path)
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return path
