"""dawnscope decompose --model NAME: a model's training step, decomposed into its kernels (GPU)
or operators (CPU), attributed to layers and phases, counted, classified, judged against the ceilings, and
replayed through every available provider. The library: microbench.decompose.pipeline; docs/models.md."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from microbench import kernels
from microbench.api import decompose_step  # the public function: options as an object or as keyword arguments
from microbench.core.args import Heartbeat, Parser, non_negative_int, positive_int
from microbench.core.config import DEFAULT_CONFIG
from microbench.core.errors import run_command
from microbench.core.jsonio import dumps
from microbench.core.outdir import OutputDir, check_file, print_written, write_file
from microbench.decompose.pipeline import DECOMPOSE_FILES, DecomposeOptions
from microbench.report.decomposition import print_decomposition
from microbench.report.findings_report import print_findings
from microbench.report.roofline_report import wide_console


def build_parser(prog: str = "dawnscope decompose") -> argparse.ArgumentParser:
    ap = Parser(
        prog=prog,
        description=(
            "Profile a few training steps of a model, attribute every GPU kernel (CPU: operator) to its layer and phase, "
            "count FLOPs and bytes, classify the work, judge it against the ceilings, and replay every GEMM and "
            "convolution of the step through the available providers."
        ),
        epilog="Exit codes: 0 done, 2 bad input (also: --out unusable, or another run writing into it), 130 "
        "interrupted (143 by SIGTERM; --out left as it was). Models: see docs/models.md.",
    )
    _workload_arguments(ap)
    _file_arguments(ap)
    _run_arguments(ap)
    _report_arguments(ap)
    return ap


def _workload_arguments(ap) -> None:
    """What is decomposed: the model, its batch and dtype, the device."""
    ap.add_argument(
        "--model",
        required=True,
        help="a model name (resnet50, resnet9, resnet18_cifar, transformer, ncf) or package.module:factory",
    )
    ap.add_argument(
        "--batch",
        type=positive_int,
        default=None,
        help="samples per step; default: the benchmark's reference batch on a GPU, a small one on a CPU",
    )
    ap.add_argument(
        "--dtype",
        default="fp32",
        choices=["fp32", "bf16", "fp16"],
        help="fp32 (IEEE, no TF32), or bf16 / fp16 autocast (fp16 with a gradient scaler); default: %(default)s",
    )
    ap.add_argument(
        "--device",
        default="auto",
        choices=["auto", "cpu", "cuda"],
        help="auto: the GPU if PyTorch sees one (CUDA or ROCm), else the CPU; default: %(default)s",
    )


def _file_arguments(ap) -> None:
    """Where it is written and which configuration it reads."""
    ap.add_argument(
        "--out", type=Path, default=None, metavar="DIR", help="output directory; default: results/decompose-MODEL"
    )
    ap.add_argument("--config", type=Path, default=None, help=f"configuration file; default: {DEFAULT_CONFIG}")
    ap.add_argument(
        "--json",
        type=Path,
        default=None,
        metavar="OUT",
        help="also write the decomposition document (what decomposition.json holds) here",
    )


def _run_arguments(ap) -> None:
    """How the step is run, timed and replayed."""
    ap.add_argument(
        "--providers",
        default=None,
        help="comma-separated providers to replay the step's GEMMs/convolutions through; default: all registered",
    )
    ap.add_argument("--profile", default=None, help="take the replay providers from this bench.toml profile instead")
    ap.add_argument("--no-replay", action="store_true", help="skip the replay of the step's GEMM/conv cases")
    ap.add_argument(
        "--no-measure-ceilings",
        action="store_true",
        help="use datasheet (GPU) or estimated (CPU) ceilings only; skips measuring them",
    )
    ap.add_argument("--steps", type=positive_int, default=None, help="profiled steps (default: models/benchmarks.toml)")
    ap.add_argument(
        "--num-workers",
        type=non_negative_int,
        default=None,
        metavar="N",
        help="take each step's batch from the workload's DataLoader with N persistent worker processes "
        "(0: in the step's process) instead of its own setting: to measure what the dataloader "
        "finding's fix saves (with OMP_NUM_THREADS for its thread count); default: the workload's",
    )
    ap.add_argument(
        "--timed-steps",
        type=non_negative_int,
        default=None,
        help="steps timed without the profiler; 0: take the step time from the profiled steps",
    )


def _report_arguments(ap) -> None:
    """What the terminal and the files show."""
    ap.add_argument(
        "--top", type=positive_int, default=30, help="layers shown in the terminal table; default: %(default)s"
    )
    ap.add_argument(
        "--plot",
        dest="no_plot",
        action="store_false",
        default=False,
        help="draw roofline.png / roofline.svg (the default)",
    )
    ap.add_argument("--no-plot", action="store_true", help="skip roofline.png / roofline.svg")
    ap.add_argument(
        "--html",
        type=Path,
        default=None,
        metavar="OUT",
        help="also write the report page here (the same page as report.html in --out: findings, step "
        "breakdown, kernels or operators, roofline, notes)",
    )


def main(argv: list[str] | None = None, prog: str = "dawnscope decompose") -> int:
    args = build_parser(prog).parse_args(argv)
    out = args.out or Path("results") / f"decompose-{re.sub(r'[^A-Za-z0-9_.-]+', '_', args.model)}"
    # Ctrl-C or SIGTERM: nothing is committed until the end, the earlier run stays.
    return run_command(lambda: _main(args, out), on_interrupt=lambda: f"interrupted: {out} left as it was")


def _main(args, out: Path) -> int:
    import torch  # noqa: F401 - the `bench` extra, said in one line (run_command) before --out is made

    if args.json:
        check_file(args.json, "--json")
    if args.html:
        check_file(args.html, "--html")
    out_dir = OutputDir(out, DECOMPOSE_FILES)  # checked before the model is even imported
    with out_dir:
        return _run(args, out_dir)


def _run(args, out_dir) -> int:
    from rich.console import Console

    kernels.load_all()  # the replay's providers

    console = Console(stderr=True)
    providers = tuple(p.strip() for p in args.providers.split(",") if p.strip()) if args.providers else None

    with console.status("decomposing") as status, Heartbeat(f"decompose {args.model}") as beat:

        def progress(msg):
            status.update(msg)
            beat.update(msg)  # piped: a line per stage, and one every 10 s within a long stage

        opts = DecomposeOptions(
            batch=args.batch,
            dtype=args.dtype,
            device=args.device,
            out=out_dir,
            config=args.config,
            replay=not args.no_replay,
            providers=providers,
            profile=args.profile,
            measure_ceilings=not args.no_measure_ceilings,
            profiled_steps=args.steps,
            timed_steps=args.timed_steps,
            plot=not args.no_plot,
            num_workers=args.num_workers,
            on_progress=progress,
        )
        doc = decompose_step(args.model, opts)
    # the files first, then the terminal: a reader that goes away (`| head`) cannot cost the files
    files = doc.get("files", {})
    written = [write_file(args.json, dumps(doc), "--json")] if args.json else []
    if args.html:
        page = Path(files["report_html"]).read_text(encoding="utf-8")  # the page written, not drawn again
        written.append(write_file(args.html, page, "--html"))
    print_findings(wide_console(), doc)  # the findings first
    print_decomposition(doc, top=args.top)
    console.print(
        "wrote "
        + ", ".join(str(v) for k, v in files.items() if not isinstance(v, list))
        + "".join(f", {p}" for p in files.get("roofline", []))
    )
    print_written(written)
    return 0


if __name__ == "__main__":
    sys.exit(main())
