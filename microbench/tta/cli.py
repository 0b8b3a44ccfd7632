"""dawnscope tta: time-to-accuracy, the DAWNBench metric.

    dawnscope tta leaderboard DIR... [--json OUT] [--no-check]
        DAWNBench submissions (TSV + JSON) and MLPerf Training result logs under DIR, ranked per task.
    dawnscope tta thresholds DIR... [--task NAME] [--from A --to B --step S] [--json OUT] [--plot PNG]
        time-to-accuracy and rank of every entry with an accuracy curve at each threshold of a range: how much
        the threshold decides (which entries change places, where runs stop reaching it).
    dawnscope tta run --model NAME [--target ACC] [--seeds N] [--profile] [--out DIR] ...
        train to a target accuracy over seeds: mean time-to-accuracy, its coefficient of variation, the
        fraction of runs that reached the target, a one-sided t-test of the mean accuracy; results.json rows
        (op "tta") that `dawnscope compare` puts side by side across machines.

Rules, thresholds and models: microbench/data/tta.toml. See docs/tta.md.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from microbench.core.args import MAX_COUNT, Parser, number
from microbench.core.errors import InputError, run_command
from microbench.core.jsonio import dumps
from microbench.core.outdir import OutputDir, check_file, print_written, write_file
from microbench.tta.leaderboard import build
from microbench.tta.thresholds import check_range, study

TTA_FILES = ("results.json", "results.csv", "tta.json", "tta_accuracy.png")


def build_parser() -> argparse.ArgumentParser:
    ap = Parser(
        prog="dawnscope tta",
        description="Time-to-accuracy: leaderboards and our own runs.",
        epilog="Exit codes: 0 done, 2 bad input, 130 interrupted. See docs/tta.md.",
    )
    sub = ap.add_subparsers(dest="cmd", required=True)
    _leaderboard_parser(sub)
    _thresholds_parser(sub)
    _run_parser(sub)
    return ap


def _leaderboard_parser(sub) -> None:
    """`tta leaderboard`: submissions and result logs to rank."""
    lb = sub.add_parser("leaderboard", help="rank DAWNBench submissions and MLPerf result logs")
    lb.add_argument("dirs", nargs="+", metavar="DIR", help="folders (searched recursively) or files")
    lb.add_argument("--json", type=Path, default=None, metavar="OUT", help="write the entries as a JSON list")
    lb.add_argument("--no-check", action="store_true", help="skip mlperf-logging's compliance check of each run")


def _thresholds_parser(sub) -> None:
    """`tta thresholds`: the range of thresholds and where the table and the plot go."""
    th = sub.add_parser("thresholds", help="time-to-accuracy and rank at every threshold of a range")
    th.add_argument(
        "dirs",
        nargs="+",
        metavar="DIR",
        help="folders (searched recursively) or files: DAWNBench TSVs, MLPerf result logs, tta.json of our runs",
    )
    th.add_argument("--task", default=None, help="only this task (CIFAR10, ImageNet, SQuAD, resnet, bert, ours:MODEL)")
    th.add_argument("--from", dest="lo", type=float, default=None, metavar="A", help="lowest threshold, percent")
    th.add_argument("--to", dest="hi", type=float, default=None, metavar="B", help="highest threshold, percent")
    th.add_argument(
        "--step",
        type=float,
        default=None,
        metavar="S",
        help="percentage points between thresholds; "
        "default range: each task's own threshold -2 to +1 in steps of 0.25 (tta.toml)",
    )
    th.add_argument("--json", type=Path, default=None, metavar="OUT", help="write rows, entries and tasks as JSON")
    th.add_argument(
        "--png",
        dest="plot",
        type=Path,
        default=None,
        metavar="OUT",
        help="draw time-to-accuracy against threshold into this PNG",
    )


def _run_parser(sub) -> None:
    """`tta run`: the model, target, seeds, data and recipe of our own runs."""
    r = sub.add_parser("run", help="train to a target accuracy over seeds")
    r.add_argument(
        "--model", required=True, help="a model of microbench/data/tta.toml (digits, resnet9, resnet18_cifar)"
    )
    r.add_argument(
        "--target-accuracy",
        dest="target",
        type=float,
        default=None,
        help="test top-1 accuracy to reach, in (0, 1]; default: the model's",
    )
    r.add_argument("--seeds", type=number(int, 1, 1000), default=3, help="runs, seeds 0..N-1; default: %(default)s")
    r.add_argument(
        "--epochs",
        type=number(int, 1, MAX_COUNT),
        default=None,
        help="training budget of each run; default: the model's",
    )
    r.add_argument("--data", type=Path, default=None, help="CIFAR-10: the cifar-10-batches-bin folder (or its parent)")
    r.add_argument(
        "--recipe",
        default=None,
        metavar="tuned|standard",
        help="tuned (the time-to-accuracy schedule, bf16 where native), standard (a conventional "
        "schedule to convergence, fp32), or both as tuned,standard: then whether the tuned "
        "recipe's accuracy drop on the new test set exceeds the standard one's; default: the "
        "model's keys as they are",
    )
    r.add_argument(
        "--new-test",
        type=Path,
        default=None,
        metavar="DIR",
        help="CIFAR-10: the folder of CIFAR-10.1 v6 (cifar10.1_v6_data.npy, cifar10.1_v6_labels.npy), "
        "the second test set; digits has its own stand-in",
    )
    r.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"], help="default: %(default)s")
    r.add_argument(
        "--threads", type=number(int, 1, 4096), default=None, help="torch CPU threads during the runs; default: torch's"
    )
    r.add_argument("--include-eval", action="store_true", help="count the per-epoch evaluation in the time")
    r.add_argument(
        "--epoch-breakdown",
        dest="profile",
        action="store_true",
        help="decompose one epoch with the profiler: where its seconds went",
    )
    r.add_argument("--out", type=Path, default=None, metavar="DIR", help="output folder; default: results/tta-MODEL")
    r.add_argument("--json", type=Path, default=None, metavar="OUT", help="also write tta.json's document here")
    r.add_argument(
        "--config",
        type=Path,
        default=None,
        help="bench.toml (its noise and conditions settings); default: the project's",
    )


def _leaderboard(args) -> int:
    from microbench.tta.report import print_leaderboard

    if args.json:
        check_file(args.json, "--json")
    board = build(args.dirs, check=not args.no_check)
    if not board.entries and not board.unreadable:
        # nothing to rank is a wrong folder, not an empty success (a script would take exit 0 as a leaderboard)
        raise InputError(
            " ".join(map(str, args.dirs)),
            "no leaderboard input under it: no DAWNBench training TSV and "
            f"no MLPerf result log (:::MLLOG lines); {board.skipped} other file(s)",
        )
    written = [write_file(args.json, dumps(board.as_list()), "--json")] if args.json else []  # before the terminal
    print_leaderboard(board)
    print_written(written)
    return 0 if board.entries else 1  # every input unreadable: listed with its reason, nothing ranked


def _thresholds(args) -> int:
    from microbench.tta.report import plot_thresholds, print_thresholds

    user_range = check_range(args.lo, args.hi, args.step)
    for path, key in ((args.json, "--json"), (args.plot, "--png")):
        if path:
            check_file(path, key)
    result = study(args.dirs, args.task, user_range)
    written = [write_file(args.json, dumps(result.as_dict()), "--json")] if args.json else []  # before the terminal
    written += [plot_thresholds(result, args.plot)] if args.plot else []
    print_thresholds(result)
    print_written(written)
    return 0


def _run(args) -> int:
    from microbench.report.roofline_report import wide_console
    from microbench.tta.datasets import load
    from microbench.tta.report import plot_accuracy, print_run
    from microbench.tta.run import check_device, check_options, check_recipes

    if args.json:
        check_file(args.json, "--json")
    out = args.outdir = OutputDir(
        args.out or Path("results") / f"tta-{args.model}",
        TTA_FILES,  # before any work
        on_interrupt="commit",
    )  # the rows of finished seeds are kept
    spec = check_options(args.model, args.target, args.seeds, args.epochs, args.threads)
    recipes = check_recipes(spec, args.recipe.split(",") if args.recipe else ())
    check_device(args.device)  # `--device cuda` on a CPU: one line now, not under a started progress bar
    epochs = sum(args.epochs or spec.with_recipe(r).epochs for r in recipes)
    ds = load(spec.dataset, args.data, args.new_test)  # before the progress bar: a bad --data is one line
    console = wide_console(stderr=True)  # piped: 120 columns (or COLUMNS), one plain line per epoch
    with out:
        doc = _train(args, recipes, epochs, ds, out.staging, console)
        out.file("tta.json").write_text(dumps(doc, default=str))
        plot_accuracy(doc, out.file("tta_accuracy.png"))
        written = out.commit()  # the files before the terminal: a reader that goes away cannot cost them
    extra = [write_file(args.json, dumps(doc, default=str), "--json")] if args.json else []
    print_run(doc)
    console.print("wrote " + ", ".join(str(p) for p in written))
    print_written(extra)
    return 0


def _interrupted(out) -> str:
    """The line after Ctrl-C or SIGTERM (OutputDir committed the rows of finished seeds, if any)."""
    if out.partial_committed:
        return f"interrupted: rows of finished seeds in {out.final('results.json')}"
    return f"interrupted before the first seed finished: {out.path} left as it was"


def _train(args, recipes, epochs, ds, out, console) -> dict:
    """All recipes' seeds under one progress bar (`epochs`: the epochs of one seed of every recipe)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from microbench.tta.run import run_tta

    with Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console
    ) as progress:
        bar = progress.add_task("training", total=args.seeds * epochs)

        def on_epoch(run, rec):
            progress.update(
                bar,
                advance=1,
                description=(
                    (f"{run.recipe} " if run.recipe else "") + f"seed {run.seed} epoch {rec.epoch}: acc "
                    f"{rec.accuracy:.4f}, {rec.elapsed_s:.2f} s"
                    + (f", reached at epoch {run.epochs_to_target}" if run.epochs_to_target else "")
                ),
            )
            progress.console.print(
                (f"{run.recipe} " if run.recipe else "")
                + f"seed {run.seed} epoch {rec.epoch}: test acc {rec.accuracy:.4f}, loss "
                f"{rec.train_loss:.4f}, clock {rec.elapsed_s:.3f} s (data {rec.data_s:.3f} s)"
            )

        return run_tta(
            args.model,
            args.target,
            args.seeds,
            epochs=args.epochs,
            dataset=ds,
            device=args.device,
            out=out,
            include_eval=args.include_eval,
            threads=args.threads,
            profile=args.profile,
            recipes=recipes,
            new_test=args.new_test,
            on_epoch=on_epoch,
            config=args.config,
            on_progress=lambda m: progress.update(bar, description=f"profile: {m}"),
        )


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    args.outdir = None
    if args.cmd != "run":
        return run_command(lambda: {"leaderboard": _leaderboard, "thresholds": _thresholds}[args.cmd](args))
    return run_command(
        lambda: _run(args), on_interrupt=lambda: _interrupted(args.outdir) if args.outdir is not None else None
    )


if __name__ == "__main__":
    sys.exit(main())
