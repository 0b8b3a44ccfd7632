"""What the `comm` subcommands do and print: run the library, write the files, show rich tables."""

from __future__ import annotations

import datetime as _dt
import os
import statistics
import sys
from contextlib import nullcontext
from pathlib import Path

from microbench.core.args import Heartbeat
from microbench.core.conditions import Conditions, busy_advice, conditions_line
from microbench.core.config import load_config
from microbench.core.errors import InputError, shown
from microbench.core.fingerprint import fingerprint_line
from microbench.core.jsonio import dumps
from microbench.core.outdir import OutputDir, check_dir, check_file, write_file
from microbench.core.results import ResultsWriter
from microbench.core.verdict import is_noisy
from microbench.report.cells import or_dash as _f
from microbench.report.findings_report import print_findings
from microbench.report.job_report import heatmap_figure, job_html

from . import engine, scale, world  # modules, not names: tests replace engine.job_settings and scale.scale_command
from .busbw import OPS, canonical_op
from .collectives import DEFAULT_SIZES, Plan, bench_rank, counts, parse_sizes, to_rows
from .ddp import STEP_RANGE, DdpPlan, ddp_rank
from .job import analyze_job
from .plots import plot_busbw

STATUS_STYLE = {"ok": "", "wrong": "bold red"}


def check_json(path: Path | None) -> None:
    """Before any work: a --json path we can write."""
    if path is not None:
        check_file(path, "--json")


def write_json(path: Path | None, doc) -> None:
    if path is not None:
        print(f"wrote {shown(write_file(path, dumps(doc, default=str), '--json'))}", file=sys.stderr)


def _console():
    from microbench.report.roofline_report import wide_console

    return wide_console()  # a terminal's width; piped: 120 columns or COLUMNS


def _device(backend: str):
    from microbench.core import device as devmod

    return devmod.gpu_device() if backend == "nccl" else devmod.cpu_device()


def _ops(text: str) -> tuple[str, ...]:
    ops = tuple(canonical_op(o) for o in text.split(",") if o.strip())
    bad = [o for o in ops if o not in OPS]
    if bad or not ops:
        raise InputError(None, f"unknown collective (known: {', '.join(OPS)})", key="--ops", value=text)
    return ops


def _backend(args) -> str:
    """--backend, or the default; nccl only where PyTorch sees a GPU (else a CUDA call fails deep in a rank)."""
    import torch

    backend = args.backend or world.default_backend()
    if backend == "nccl" and not torch.cuda.is_available():
        raise InputError(None, "nccl needs a CUDA GPU; use --backend gloo", key="--backend", value=backend)
    return backend


def _note_rounded(plan, nranks: int) -> None:
    """Say which sizes the split ops move less of than asked (rounded to a multiple of the ranks)."""
    for op in plan.ops:
        moved = {s: counts(op, s, nranks)[1] for s in plan.sizes_bytes}
        changed = [f"{s}->{m}" for s, m in moved.items() if m != s]
        if changed:
            print(
                f"note: {op} splits the message among {nranks} ranks: bytes rounded to what moves: "
                + ", ".join(changed),
                file=sys.stderr,
            )


COLLECTIVE_FILES = ("results.json", "results.csv", "busbw.png")


def run_collectives(args) -> int:

    check_json(getattr(args, "json", None))
    backend = _backend(args)
    plan = Plan(
        _ops(args.ops),
        tuple(parse_sizes(args.sizes or DEFAULT_SIZES)),
        iters=args.iters,
        reps=args.reps,
        device="cpu" if backend == "gloo" else "cuda",
    )
    leader = int(os.environ.get("RANK", "0")) == 0  # under torchrun only rank 0 writes
    out = OutputDir(args.out, COLLECTIVE_FILES) if leader else None  # checked before any work
    # The lock before any work, as roofline takes it: a second run into this folder is refused at once.
    with out if leader else nullcontext():
        if leader:
            _note_rounded(plan, int(os.environ.get("WORLD_SIZE", args.nproc)) if world.under_torchrun() else args.nproc)
        return _measure_collectives(args, plan, backend, out)


def _measure_collectives(args, plan, backend: str, out) -> int:
    from microbench.core import device as devmod

    look = _look(backend, getattr(args, "config", None))
    with Heartbeat(f"comm collectives: {len(plan.ops)} ops x {len(plan.sizes_bytes)} sizes"):
        records, nranks = world.run(bench_rank, (plan,), args.nproc, backend, args.timeout, args.port)
    if records is None:  # a torchrun rank other than 0
        return 0
    header = {
        "hardware": devmod.fingerprint(_device(backend)),
        "software": devmod.software(),
        "config": {"profile": f"comm-collectives-{backend}"},
        "comm": {
            "backend": backend,
            "nranks": nranks,
            "ops": list(plan.ops),
            "iters": plan.iters,
            "reps": plan.reps,
            "launcher": "torchrun" if world.under_torchrun() else "local processes",
        },
        "started": _dt.datetime.now(_dt.timezone.utc).isoformat(),
        "conditions": look.stop(),
    }
    doc = _write_collectives(out, header, records, backend, nranks, args.no_plot, getattr(args, "config", None))
    written = out.commit()  # the files before the terminal: a reader that goes away cannot cost them
    write_json(getattr(args, "json", None), doc)  # --json OUT: the results document (results.json) there too
    print_collectives(doc)
    print("wrote " + ", ".join(map(str, written)), file=sys.stderr)
    return 0 if all(r["status"] == "ok" for r in doc["results"]) else 1


def _write_collectives(
    out, header: dict, records: list[dict], backend: str, nranks: int, no_plot: bool, config=None
) -> dict:

    with ResultsWriter(out.staging, header) as w:
        w.add_many(to_rows(records, header["hardware"]["name"], backend, load_config(config).noise))
    if not no_plot:
        title = f"{backend}, {nranks} ranks: {fingerprint_line(w.doc['hardware'], w.doc['software'])}"
        plot_busbw(w.doc["results"], title, out.file("busbw.png"))
    return w.doc


def _look(backend: str, config=None):
    """The machine's conditions, looked at before the ranks start (core.conditions; `config`: --config)."""

    return Conditions(load_config(config).conditions, gpu_index=0 if backend == "nccl" else None).start()


def _busy_warning(doc: dict) -> None:
    cond = doc.get("conditions")
    if cond:
        print(("warning: " + busy_advice(cond)) if cond.get("busy") else conditions_line(cond), file=sys.stderr)


def print_collectives(doc: dict) -> None:
    from rich.table import Table

    t = Table(
        title=f"{doc['comm']['backend']}, {doc['comm']['nranks']} ranks; "
        f"{fingerprint_line(doc['hardware'], doc['software'])}",
        header_style="bold",
    )

    for col in ("op", "bytes", "status", "time ms (median)", "cov", "algbw GB/s", "busbw GB/s", "wrong"):
        t.add_column(col, justify="left" if col in ("op", "status") else "right")
    for r in doc["results"]:
        tm = r["time_ms"] or {}
        status = "noisy" if r["status"] == "ok" and is_noisy(r) else r["status"]
        t.add_row(
            r["op"],
            str(r["bytes"]),
            status,
            _f(tm.get("median"), ".4g"),
            _f(tm.get("cov"), ".2f"),
            _f(r["gbps"]),
            _f(r["busbw_gbps"]),
            str(r["params"]["wrong"]),
            style=STATUS_STYLE[r["status"]] or ("yellow" if status == "noisy" else ""),
        )
    _console().print(t)
    if any(is_noisy(r) for r in doc["results"]):
        print(
            "noisy: the repeats of these rows disagree (their flags in results.json say how): no bandwidth "
            "verdict from them",
            file=sys.stderr,
        )
    _busy_warning(doc)


def measure_ddp(args) -> tuple[dict | None, Path | None]:
    """`comm ddp`'s ranks run and measured: the document (None in a rank's own process) and the folder where --out
    keeps the rank traces (None without --out)."""
    check_json(args.json)
    backend = _backend(args)
    out = getattr(args, "out", None)
    if out is not None:
        check_dir(out).mkdir(parents=True, exist_ok=True)
    plan = DdpPlan(
        args.model,
        args.batch,
        args.steps,
        bucket_cap_mb=args.bucket_mb,
        device="cpu" if backend == "gloo" else "cuda",
        trace_dir=str(out.resolve()) if out else None,
    )

    look = _look(backend, getattr(args, "config", None))
    with Heartbeat(f"comm ddp: {args.nproc} ranks, {args.steps} profiled steps of {args.model}"):
        doc, _ = world.run(ddp_rank, (plan,), args.nproc, backend, args.timeout, args.port)
    if doc is None:
        return None, out
    from microbench.core import device as devmod

    dev = _device(backend)
    doc.update(hardware=devmod.fingerprint(dev), software=devmod.software(), conditions=look.stop())
    return doc, out


def kept_rank0(out: Path | None) -> Path | None:
    """Rank 0's kept trace, whose findings `comm ddp --out` opens its report with."""
    return out / "rank0.pt.trace.json" if out is not None else None


def report_ddp(args, doc: dict, out: Path | None, found: dict | None) -> int:
    """The measured DDP step written (--json) and printed, opening with rank 0's findings (`found`: the findings
    keys of `trace`'s document of it) where --out kept the traces."""
    if found is not None:
        doc = {"findings_rank": 0} | {k: v for k, v in found.items() if k.startswith("findings")} | doc
    write_json(args.json, doc)  # the file first: a reader that goes away cannot cost it
    if found is not None:
        _console().print(
            f"[bold]rank 0's findings[/] ({shown(out)}/rank0.pt.trace.json, `trace` of it with "
            f"--step-range {STEP_RANGE}):"
        )
        print_findings(_console(), found)
    print_ddp(doc)
    if out is not None:
        print(
            f"wrote {shown(out)}/rank0..{doc['nranks'] - 1}.pt.trace.json (the whole report of one: dawnscope "
            f"trace {shown(out)}/rank0.pt.trace.json --step-range {STEP_RANGE})",
            file=sys.stderr,
        )
    return 0


def print_ddp(doc: dict) -> None:
    from rich.table import Table

    t = Table(
        title=f"DDP step of {doc['model']}, batch {doc['batch_per_rank']} per rank, {doc['nranks']} ranks "
        f"({doc['backend']}): gradients {doc['gradient_bytes'] / 2**20:.2f} MiB in {doc['buckets']} "
        f"buckets; {fingerprint_line(doc['hardware'], doc['software'])}",
        header_style="bold",
    )
    cols = (
        "step_ms",
        "compute_ms",
        "comm_ms",
        "overlapped_comm_ms",
        "exposed_comm_ms",
        "comm_share",
        "allreduce_calls",
    )
    t.add_column("rank", justify="right")
    for c in cols:
        t.add_column(c.replace("_ms", " ms").replace("_", " "), justify="right")
    for r in doc["ranks"]:
        s = r["summary"]
        t.add_row(str(r["rank"]), *[_f(s.get(c), ".1%" if c == "comm_share" else ".4g") for c in cols])
    _console().print(t)
    print("medians over the profiled steps; comm share = exposed communication / step time", file=sys.stderr)
    _print_ddp_buckets(doc)
    _busy_warning(doc)


def _print_ddp_buckets(doc: dict) -> None:
    """Per rank and all-reduce (one per bucket, in start order): the medians over the steps of its time and of
    the part no compute hid."""
    from rich.table import Table

    t = Table(
        title="per bucket all-reduce (medians over the steps; exposed: not hidden by compute)", header_style="bold"
    )
    for c in ("rank", "all-reduce", "at ms", "comm ms", "exposed ms"):
        t.add_column(c, justify="right")
    for r in doc["ranks"]:
        per_step = [s.get("buckets") or [] for s in r["steps"]]
        if not per_step or len({len(b) for b in per_step}) != 1:
            continue  # steps disagree on the number of all-reduces: no per-bucket median
        for i in range(len(per_step[0])):
            med = {f: statistics.median(b[i][f] for b in per_step) for f in ("at_ms", "comm_ms", "exposed_comm_ms")}
            t.add_row(str(r["rank"]), str(i), *[_f(med[f], ".4g") for f in ("at_ms", "comm_ms", "exposed_comm_ms")])
    if t.row_count:
        _console().print(t)


def run_ranks(args) -> int:
    """`comm ranks` and `trace` given a job: the ranks read in workers, combined, printed and written."""

    check_json(args.json)
    if args.out is not None:
        check_dir(args.out)
    doc = analyze_job(
        args.traces,
        workers=args.workers,
        scheduler=args.scheduler,
        timeout_s=args.timeout,
        step_range=getattr(args, "steps", None),
    )
    write_json(args.json, doc)  # the files first: a reader that goes away cannot cost them
    if args.out is not None:
        write_job_files(args.out, doc)
    print_ranks(doc)
    return 0


def write_job_files(out: Path, doc: dict) -> None:
    """The heat map (heatmap.png) and the HTML report with it (job.html) in `out`."""
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    title = f"per rank and step, {len(doc['ranks'])} ranks"
    fig = heatmap_figure(doc["heatmap"], title)
    fig.savefig(out / "heatmap.png", dpi=110, metadata={"Software": None})
    plt.close(fig)
    page = write_file(out / "job.html", job_html(doc, heatmap_figure(doc["heatmap"], title)), "--out")
    print(f"wrote {out / 'heatmap.png'} and {page}", file=sys.stderr)


def job_lines(doc: dict) -> list[str]:
    """The job's cross-rank lines (straggler, missing ranks, outliers), above its tables and on a rank's page."""
    lines = [f"straggler: rank {doc['straggler_rank']} (most start wait caused across matched collectives)"]
    if doc.get("missing_ranks"):
        lines.insert(
            0,
            f"{doc['missing_ranks']} of {doc['world_size']} ranks have no trace here: the straggler, "
            "skews and outliers are among the ranks read only",
        )
    lines += [
        f"outlier: rank {o['rank']}: {o['metric']} {o['value']:.4g} against a median of {o['median']:.4g} "
        f"({o['statistic']} = {o['z']:.1f}, threshold {o['threshold']})"
        for o in doc.get("outliers", [])
    ]
    s = doc.get("slowest_step")
    if s:
        lines.append(
            f"slowest step: {s['step']}, {s['time_ms']:.4g} ms on rank {s['slowest_rank']} "
            f"(the median rank: {s['median_rank_ms']:.4g} ms)"
        )
    lines += [f"failed to read: {f['file']}: {f['reason']}" for f in doc.get("failed", [])]
    e = doc.get("engine")
    if e:
        how = {
            "processes": f"{e['workers']} worker process(es)",
            "dask": f"{e['workers']} Dask worker(s)",
            "inline": "this process",
        }.get(e["kind"], f"{e['workers']} {e['kind']} worker(s)")
        lines.append(f"read by {how} in {e['wall_s']:.3g} s")
    return lines


def _ranks_to_show(doc: dict) -> list[dict]:
    """Every rank of a small job; of a larger one (job.toml [report]) the ones worth a look, in rank order."""
    ranks, report = doc["ranks"], engine.job_settings()["report"]
    if len(ranks) <= report["all_ranks_up_to"]:
        return ranks
    by_busy = sorted(ranks, key=lambda r: r["gpu_time"].get("busy_us", 0))
    # the ranks most often last to a collective: in a long job nearly every rank is last once
    stragglers = sorted((r for r in ranks if r["times"]), key=lambda r: -r["times"])[: report["stragglers_shown"]]
    keep = {o["rank"] for o in doc.get("outliers", [])} | {r["rank"] for r in stragglers}
    keep |= {doc.get("straggler_rank"), (doc.get("slowest_step") or {}).get("slowest_rank")}
    keep |= {by_busy[0]["rank"], by_busy[len(by_busy) // 2]["rank"], by_busy[-1]["rank"]}
    return [r for r in ranks if r["rank"] in keep]


def print_ranks(doc: dict) -> None:
    """A job's report: the collectives matched across ranks, the ranks worth a look, the job's lines."""
    con = _console()
    _print_collectives(con, doc)
    _print_rank_table(con, doc)
    for line in job_lines(doc):
        con.print(line)


def _print_collectives(con, doc: dict) -> None:
    from microbench.report.roofline_report import rich_table

    cols = [
        (c, "left" if c == "op" else "right")
        for c in ("op", "bytes", "group", "time ms", "algbw GB/s", "busbw GB/s", "skew us", "end skew ms", "straggler")
    ]
    cells = []
    for c in doc["collectives"][:40]:
        sizes = sorted(set(c["bytes"].values()), key=lambda v: (v is None, v))
        cells.append(
            (
                [
                    c["name"],
                    "/".join(map(str, sizes[:4])),
                    "?" if c["group_size"] is None else str(c["group_size"]),
                    _f(c["time_ms"], ".4g"),
                    _f(c["algbw_gbps"]),
                    _f(c["busbw_gbps"]),
                    _f(c["skew_us"], ",.0f"),
                    _f(c["end_skew_ms"], ".3g"),
                    str(c["straggler_rank"]),
                ],
                None,
            )
        )
    # the collective and its sizes are the row's key: never cut (they were, "339738624/41943…", at 120 columns)
    con.print(
        rich_table(
            cols,
            cells,
            width=con.width,
            kept_in="the JSON report (--json OUT)",
            drop_order=("end skew ms", "group", "algbw GB/s", "straggler", "time ms"),
            title="collective calls matched across ranks (time: the fastest rank's kernel)",
        )
    )


def _print_rank_table(con, doc: dict) -> None:
    from rich.table import Table

    t = Table(
        title="per rank (exposed: communication kernels not overlapped by computation; busy / idle over "
        "the rank's GPU span)",
        header_style="bold",
    )
    for col in (
        "rank",
        "calls",
        "unmatched",
        "median step ms",
        "busy ms",
        "idle ms",
        "exposed comm ms",
        "straggler (times)",
        "wait caused ms",
    ):
        t.add_column(col, justify="right")
    shown = _ranks_to_show(doc)
    if len(shown) < len(doc["ranks"]):
        t.caption = (
            f"{len(shown)} of {len(doc['ranks'])} ranks: the outliers, the most frequent "
            "stragglers, the slowest step's rank, the least, median and most busy; every rank is in --json "
            "and --out's job.html"
        )
    for r in shown:
        g = r["gpu_time"]
        t.add_row(
            str(r["rank"]),
            str(r["calls"]),
            str(r["unmatched_calls"]),
            _f(r["median_step_us"] and r["median_step_us"] / 1e3, ".4g"),
            _f(g.get("busy_us", 0) / 1e3, ".4g"),
            _f(g.get("idle_us", 0) / 1e3, ".4g"),
            _f(r["exposed_comm_ms"], ".4g"),
            str(r["times"]),
            _f(r["wait_caused_ms"], ".3g"),
        )
    con.print(t)


def run_scale(args) -> int:
    check_json(args.json)
    doc = scale.scale_command(args)
    write_json(args.json, doc)  # the file first: a reader that goes away cannot cost it
    print_scale(doc)
    return 0


def print_scale(doc: dict) -> None:
    from rich.table import Table

    con = _console()
    if doc.get("paper"):
        t = Table(title="the paper's figures, reproduced (docs/comm.md: assumptions)", header_style="bold")
        for col in ("scenario", "workers", "paper", "model", "step ms", "comm ms"):
            t.add_column(col, justify="left" if col == "scenario" else "right")
        for p in doc["paper"]:
            t.add_row(
                p["title"],
                str(p["workers"]),
                f"{p['target_comm_share']:.2%}",
                f"{p['comm_share']:.2%}",
                _f(p["step_ms"], ".4g"),
                _f(p["comm_ms"], ".4g"),
            )
        con.print(t)
    w = doc["workload"]
    t = Table(
        title=f"{doc['fabric']['title']}: step {w['step_ms']:.4g} ms on one worker "
        f"({doc.get('step_source', 'given')}), gradients "
        f"{w['gradient_bytes'] / 2**20:.2f} MiB, buckets {w['bucket_bytes'] / 2**20:g} MiB, overlap "
        f"{w['overlap']}, {w['algorithm']} all-reduce",
        header_style="bold",
    )
    for col in ("workers", "nodes", "step ms", "comm ms", "exposed ms", "comm_share", "speed-up", "efficiency"):
        t.add_column(col, justify="right")
    for p in doc["predictions"]:
        t.add_row(
            str(p["workers"]),
            str(p["nodes"]),
            _f(p["step_ms"], ".4g"),
            _f(p["comm_ms"], ".4g"),
            _f(p["exposed_comm_ms"], ".4g"),
            f"{p['comm_share']:.1%}",
            _f(p["speedup"], ".3g"),
            f"{p['scaling_efficiency']:.0%}",
        )
    con.print(t)
