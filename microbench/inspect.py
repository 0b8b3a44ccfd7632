"""python -m microbench.inspect: compile every kernel configuration of ours ahead of time for sm_80 and
sm_90 (no GPU needed) and report, per kernel, configuration and target, the Tensor Core instructions in
its SASS (HMMA, HGMMA, QGMMA, IMMA), FFMA count, registers, shared memory and spills.
"""
from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

from microbench.core.errors import InputError, run_command
from microbench.measure.sass import TARGETS, StaticRecord, ToolchainError, inspect_build


def records(modules=None, targets=TARGETS, kernel_filter: str | None = None) -> list[StaticRecord]:
    import kernels

    out = []
    for name in modules or kernels.STATIC_MODULES:
        mod = importlib.import_module(name)
        for target in targets:
            for b in mod.aot_builds(target):
                if kernel_filter and kernel_filter not in b.kernel:
                    continue
                out.append(inspect_build(b))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m microbench.inspect", description=__doc__)
    ap.add_argument("--json", type=Path, help="write one record per (kernel, config, target) to this file")
    ap.add_argument("--target", choices=TARGETS, action="append", help="only this target (repeatable)")
    ap.add_argument("--kernel", help="only kernels whose name contains this")
    args = ap.parse_args(argv)
    return run_command(lambda: _run(args))


def _run(args) -> int:
    from microbench.core.jsonio import dumps
    from microbench.core.outdir import check_file, write_file

    if args.json:
        check_file(args.json, "--json")  # before minutes of compiling
    try:
        recs = records(targets=tuple(args.target or TARGETS), kernel_filter=args.kernel)
    except ToolchainError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if not recs:
        raise InputError(None, "no kernel of ours has this in its name", key="--kernel", value=args.kernel)
    from rich.table import Table

    from microbench.reports.report import wide_console

    t = Table(title="static inspection (SASS from ahead-of-time compilation; no GPU ran these)", header_style="bold")
    for col in ("kernel", "config", "target", "HMMA", "HGMMA", "QGMMA", "IMMA", "FFMA", "regs", "smem B",
                "spills"):
        t.add_column(col, justify="left" if col in ("kernel", "config", "target") else "right")
    for r in recs:
        smem = r.dynamic_shared_bytes if r.dynamic_shared_bytes is not None else r.shared_bytes
        t.add_row(r.kernel, r.config, r.target, str(r.hmma), str(r.hgmma), str(r.qgmma), str(r.imma), str(r.ffma),
                  str(r.registers), str(smem),
                  f"[red]{r.spill_stores}st/{r.spill_loads}ld, stack {r.stack_bytes}[/]" if r.spills else "none")
    wide_console().print(t)
    if args.json:
        write_file(args.json, dumps([r.as_dict() for r in recs]), "--json")
        print(f"wrote {len(recs)} records to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
