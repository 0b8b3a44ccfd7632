"""dawnscope roofline: measure GEMM and convolution through every available provider on this
machine's device, judge each result against measured and datasheet ceilings, draw the roofline.

Writes results.json, results.csv, roofline.png, roofline.svg and report.html (self-contained: tables and
plot in one file) into --out; rows are written as they are measured, so an interrupted run (Ctrl-C) keeps
what it measured. With --from-trace, the cases are a profiler trace's GEMMs and convolutions
(microbench.roofline.trace_cases), each row beside the trace's own time (docs/replay.md).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import sys
import time
from dataclasses import asdict
from pathlib import Path

from microbench import kernels
from microbench.__main__ import run as run_command_named  # the door: never another command's module
from microbench.core.archjson import to_arch
from microbench.core.args import Parser, number, positive_int
from microbench.core.conditions import Conditions
from microbench.core.config import DEFAULT_CONFIG, load_config
from microbench.core.errors import InputError, run_command, shown
from microbench.core.jsonio import dumps
from microbench.core.outdir import OutputDir, check_file, write_file
from microbench.core.results import ResultsWriter, results_header
from microbench.predict.replay import summary
from microbench.report.html import results_html
from microbench.report.html import write as write_html
from microbench.roofline.trace_cases import case_set_of, compare, same_device_reason, trace_cases


def build_parser() -> argparse.ArgumentParser:
    ap = Parser(
        prog="dawnscope roofline",
        description="Measure GEMM and conv2d through the vendor libraries (and our Triton / CuPy kernels where "
        "they can run) on this machine, check every result against a float64 reference, time it, "
        "and place it on the roofline of measured and datasheet ceilings.",
        epilog="Exit codes: 0 done, 1 stopped early because a kernel lost the device context (the rows measured "
        "before it are written, results.json's `stopped` names the case and provider), "
        "2 bad input (config, profile, device, --out; another run writing into --out), "
        "130 interrupted by Ctrl-C, 143 by SIGTERM (measured rows kept, marked interrupted).",
    )
    _run_arguments(ap)
    _file_arguments(ap)
    _trace_arguments(ap)
    return ap


def _run_arguments(ap) -> None:
    """What is measured, where, into which folder, with which configuration."""
    ap.add_argument(
        "--profile",
        default="default",
        help="profile of bench.toml to run: quick (under a minute on a 2-core CPU), default, or full "
        "(adds the DeepBench training sizes); default: %(default)s",
    )
    ap.add_argument(
        "--device",
        default="auto",
        choices=["auto", "cpu", "cuda"],
        help="auto: the GPU if PyTorch sees one (CUDA or ROCm), else the CPU; default: %(default)s",
    )
    ap.add_argument(
        "--out",
        default="results",
        type=Path,
        metavar="DIR",
        help="directory for results.json, results.csv, roofline.png, roofline.svg, report.html; default: %(default)s",
    )
    ap.add_argument(
        "--config",
        default=None,
        type=Path,
        help=f"configuration file (profiles, tolerances, datasheet ceilings); default: {DEFAULT_CONFIG}",
    )
    ap.add_argument(
        "--plot",
        dest="no_plot",
        action="store_false",
        default=False,
        help="draw roofline.png / roofline.svg (the default)",
    )
    ap.add_argument(
        "--no-plot", action="store_true", help="skip roofline.png / roofline.svg (and the plot in report.html)"
    )


def _file_arguments(ap) -> None:
    """The documents written beside the output folder."""
    ap.add_argument(
        "--json",
        default=None,
        type=Path,
        metavar="OUT",
        help="also write the results document (what results.json holds) here",
    )
    ap.add_argument(
        "--arch-json",
        default=None,
        type=Path,
        metavar="OUT",
        help="also write the measured ceilings as a TraceLens GPU arch JSON (name, mem_bw_gbps, memory_gb, "
        "max_achievable_tflops); `trace --ceilings` and `predict --ceilings` read it",
    )


def _trace_arguments(ap) -> None:
    """Another source of cases: a trace's shapes, or a model's step (decompose)."""
    ap.add_argument(
        "--from-trace",
        default=None,
        type=Path,
        metavar="TRACE",
        help="measure the GEMM, convolution and attention shapes a profiler trace (recorded with "
        "shapes) ran, instead of a profile's, through every provider here, beside the trace's own "
        "time (docs/replay.md)",
    )
    ap.add_argument(
        "--top",
        default=None,
        type=positive_int,
        metavar="N",
        help="--from-trace: the N case groups with the most kernel time; default: those covering 90 %% "
        "of the trace's matrix-kernel time",
    )
    ap.add_argument(
        "--min-share",
        default=None,
        type=number(float, 0, 100),
        metavar="PCT",
        help="--from-trace: leave out case groups under PCT %% of the trace's matrix-kernel time",
    )
    ap.add_argument(
        "--model",
        default=None,
        help="decompose this model's training step instead (dawnscope decompose: --batch, "
        "--dtype and its other options apply)",
    )


def _config_block(case_set, cfg) -> dict:
    return {
        "profile": case_set.name,
        "description": case_set.description,
        "providers": list(case_set.providers),
        "timing": asdict(cfg.timing),
        "tolerance": cfg.tolerance,
        "cases": len(case_set.cases),
    }


OWNS = ("results.json", "results.csv", "roofline.png", "roofline.svg", "report.html")


class _ProgressLines:
    """Progress for a pipe or a log file: one line per case (and per ceiling step) on stderr, flushed."""

    def __init__(self, total: int):
        self.total, self.done = total, 0
        self.t0 = time.monotonic()

    def _emit(self, text: str) -> None:
        print(f"[{time.monotonic() - self.t0:6.1f} s] {text}", file=sys.stderr, flush=True)

    def step(self, msg: str) -> None:
        self._emit(msg)

    def case(self, label: str) -> None:
        self.done += 1
        self._emit(f"case {self.done}/{self.total}: {label}")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if any(a == "--model" or a.startswith("--model=") for a in argv):
        return run_command_named("decompose", argv, prog="dawnscope roofline --model")
    args = build_parser().parse_args(argv)
    return run_command(lambda: _main(args))


def _main(args) -> int:
    import torch  # noqa: F401 - the `bench` extra, said in one line (run_command) before --out is made

    out = OutputDir(args.out, OWNS)  # checks --out before any work

    for path, flag in ((args.arch_json, "--arch-json"), (args.json, "--json")):
        if path:
            check_file(path, flag)
    cfg = load_config(args.config)
    if (args.top is not None or args.min_share is not None) and args.from_trace is None:
        raise InputError(None, "only with --from-trace TRACE", key="--top" if args.top is not None else "--min-share")
    replay = _trace_cases(args, cfg) if args.from_trace else None
    case_set = replay_case_set(replay) if replay else cfg.case_set(args.profile)
    with out:
        return _run(args, cfg, case_set, out, replay)


def _trace_cases(args, cfg):
    return trace_cases(args.from_trace, cfg, args.top, args.min_share)


def replay_case_set(replay):
    kernels.load_all()  # every registered provider
    return case_set_of(replay)


def _run(args, cfg, case_set, out, replay=None) -> int:
    # Heavy imports only after the config is known to be good.
    from rich.console import Console

    from microbench.core import device as devmod

    kernels.load_all()
    console = Console(stderr=True)
    try:
        from microbench.roofline.runner import resolve_providers

        resolve_providers(case_set, cfg)
        dev = devmod.detect(args.device)
    except RuntimeError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2

    conditions = Conditions(cfg.conditions, gpu_index=0 if dev.is_gpu else None).start()
    if dev.kind == "cpu":
        conditions.fit_threads()
    header = results_header(
        devmod.fingerprint(dev),
        devmod.software(),
        cfg.path,
        _config_block(case_set, cfg),
        _dt.datetime.now(_dt.timezone.utc).isoformat(),
        conditions={"before": conditions.before},
    )
    writer = ResultsWriter(out.staging, header)
    stopped = None  # why the run ended early: a call lost the device context (roofline/runner.py)
    try:
        stopped = _measure(writer, dev, cfg, case_set, console, conditions.busy_now(), _row_source(replay, dev, cfg))
        interrupted = False
    except KeyboardInterrupt:  # Ctrl-C, or SIGTERM (OutputDir delivers it the same way)
        interrupted = True
    if replay is not None:
        _replay_summary(writer, replay, dev, cfg)
    writer.set("conditions", conditions.stop())
    writer.set("finished", _dt.datetime.now(_dt.timezone.utc).isoformat())
    if interrupted:
        writer.set("interrupted", True)
    if stopped:
        writer.set("stopped", stopped)
    writer.close()
    n_rows = len(writer.doc["results"])
    if interrupted and not n_rows:
        console.print(f"[yellow]interrupted before any row was measured: {out.path} left as it was[/]")
        return out.exit_code()

    # every file first, then the terminal: a reader that goes away (`| head`) cannot cost the files
    _reports(writer.doc, out, args.no_plot)
    lines = ["wrote " + ", ".join(str(p) for p in out.commit(keep_previous=interrupted))]
    if args.arch_json:
        lines.append(_write_arch(writer.doc, args.arch_json))
    if args.json:
        lines.append(f"wrote {write_file(args.json, dumps(writer.doc), '--json')}")
    from microbench.report.roofline_report import print_report

    print_report(writer.doc)
    for line in lines:
        console.print(line)
    if interrupted:
        console.print(
            f"[yellow]interrupted: kept {n_rows} measured rows"
            + (
                f"; the earlier run's files are in {out.final('previous')}[/]"
                if (out.final("previous")).is_dir()
                else "[/]"
            )
        )
        return out.exit_code()
    if stopped:
        console.print(f"[red]{stopped}[/]")
        return 1
    return 0


def _row_source(replay, dev, cfg):
    """Per row of a trace's case: its trace_source, the trace's time per call beside ours."""
    if replay is None:
        return None

    same, why = same_device_reason(replay, dev.name, cfg)
    group_of = {}
    for g in replay.groups:
        for c in g.cases:
            group_of.setdefault((c.op, c.shape.label(), c.dtype), g)

    def attach(row) -> None:
        g = group_of.get((row.op, row.shape, row.dtype))
        if g is not None:
            row.trace_source = compare(replay.source(g), (row.time_ms or {}).get("median"), same, why)

    return attach


def _replay_summary(writer, replay, dev, cfg) -> None:
    same, why = same_device_reason(replay, dev.name, cfg)
    writer.set(
        "replay", summary(replay, writer.doc["results"], dev.name, cfg, writer.doc.get("ceilings", []), same, why)
    )


def _measure(writer, dev, cfg, case_set, console, busy_now: bool, attach=None) -> str | None:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from microbench.roofline.ceilings import machine_ceilings
    from microbench.roofline.runner import run_case_set

    # A pipe or a file gets one line per case (a progress bar would print nothing until the end).
    lines = None if console.is_terminal else _ProgressLines(len(case_set.cases))
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
        disable=lines is not None,
    ) as progress:
        task = progress.add_task("measuring ceilings", total=len(case_set.cases))

        def on_step(msg):
            progress.update(task, description=msg)
            if lines:
                lines.step(msg)

        ceilings = machine_ceilings(
            dev,
            cfg,
            on_step=on_step,
            budget_s=case_set.ceiling_budget_s,
            shapes=case_set.cases,
            busy_now=busy_now,
            dtypes=tuple(sorted({c.dtype for c in case_set.cases})),
        )  # only what it judges
        writer.set("ceilings", ceilings.as_list())
        writer.set("notes", ceilings.notes)

        def on_case(case):
            progress.update(task, description=case.label())
            if lines:
                lines.case(case.label())

        done_ops = set()

        def on_row(row):
            if attach:
                attach(row)
            writer.add(row)
            key = (row.op, row.shape, row.dtype)
            if key not in done_ops:
                done_ops.add(key)
                progress.advance(task)

        return run_case_set(case_set, dev, cfg, ceilings, on_row=on_row, on_case=on_case)


def _reports(doc: dict, out, no_plot: bool) -> None:
    """The plot and report.html, into the staging folder."""
    from microbench.report.roofline_report import plot_roofline

    if not no_plot:
        plot_roofline(doc, out.file("roofline"))
    write_html(out.file("report.html"), results_html(doc, plot=not no_plot))


def _write_arch(doc: dict, path: Path) -> str:
    """Writes the Arch JSON of the run's ceilings; the line that says what became of it."""
    hw = doc.get("hardware", {})
    arch = to_arch(hw.get("name") or "?", doc.get("ceilings", []), hw.get("memory_gib"))
    if not arch["max_achievable_tflops"]:
        return f"[yellow]no measured compute ceiling: {path} not written[/]"
    return f"wrote {shown(write_file(path, dumps(arch), '--arch-json'))}"


if __name__ == "__main__":
    sys.exit(main())
