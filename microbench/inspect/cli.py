"""dawnscope inspect: compile every kernel configuration of ours ahead of time for NVIDIA sm_80 and
sm_90 and AMD gfx942 (MI300X / MI325X) and gfx950 (MI355X) -- no GPU, no CUDA toolkit, no ROCm needed -- and
report, per kernel, configuration and target, the matrix instructions in its machine code (SASS: HMMA, HGMMA,
QGMMA, IMMA; AMDGCN: v_mfma by kind), how many per K step, registers (AMD: VGPR / AGPR / SGPR), shared memory
or LDS, spills, occupancy, and the verdict matrix_cores yes / no / fallback (an AMD chip upcasting an fp8
flavour it does not take natively, fp32 without xf32). Our CUDA C++ kernels have NVIDIA targets only; the
Triton kernels build for all four (on AMD every autotune candidate of every dtype).

One failing module (a missing toolchain, a compile error) does not stop the others: it is reported, the
rest are inspected, and the exit code is 1. With --json the file is rewritten after every (module,
target), so a run stopped part-way (Ctrl-C, a deadline) leaves what it inspected; failures are entries
with `module`, `target` and `error` beside the records.
"""

from __future__ import annotations

import importlib
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from microbench import kernels
from microbench.core.args import Heartbeat, Parser, digits
from microbench.core.config import load_config
from microbench.core.errors import InputError, run_command
from microbench.core.jsonio import dumps
from microbench.core.outdir import check_file, write_file
from microbench.core.targets import NVIDIA_TARGETS, TARGETS
from microbench.kernels.triton_configs import arch_family
from microbench.report.cells import or_dash
from microbench.roofline.sass import StaticRecord, inspect_build


@dataclass
class Inspection:
    records: list[StaticRecord] = field(default_factory=list)
    failures: list[dict] = field(default_factory=list)  # {"module", "target", "error"}

    def as_json(self) -> list[dict]:
        return [r.as_dict() for r in self.records] + self.failures


def _first_lines(e: BaseException, n: int = 4) -> str:
    lines = [ln for ln in str(e).splitlines() if ln.strip()]
    return f"{type(e).__name__}: " + " | ".join(lines[:n])


def inspect_module(name: str, target: str, kernel_filter: str | None, into: Inspection) -> bool:
    """Add the records of one module for one target to `into`, or one failure saying what went wrong. False
    when the module has nothing for this target (CUDA C++ for an AMD target)."""
    try:
        module = importlib.import_module(name)
        if target not in getattr(module, "AOT_TARGETS", NVIDIA_TARGETS):
            return False  # e.g. CUDA C++ for an AMD target: nothing to build, nothing failed
        builds = module.aot_builds(target)
        recs = [inspect_build(b) for b in builds if not kernel_filter or kernel_filter in b.kernel]
    except Exception as e:  # noqa: BLE001 - any failure of one module is reported, and the others go on
        into.failures.append({"module": name, "target": target, "error": _first_lines(e)})
        return True
    into.records += recs
    return True


def kernel_names(modules=None) -> set[str]:
    """Our kernels' names, read from the modules without compiling anything: a --kernel that matches none is
    refused at once, not after every kernel was compiled (107 s here)."""
    names: set[str] = set()
    for name in modules or kernels.STATIC_MODULES:
        m = importlib.import_module(name)
        names |= {v for v in (getattr(m, "KERNEL", None), getattr(m, "WGMMA_KERNEL", None)) if isinstance(v, str)}
        names |= set(getattr(m, "KERNEL_NAMES", {}).values())
        if hasattr(m, "aot_variants") and not hasattr(m, "KERNEL_NAMES"):  # conv_triton's variants name directions
            names |= {v[0] for t in getattr(m, "AOT_TARGETS", ()) for v in m.aot_variants(t)}
    return names


def _write_json(path: Path, result: Inspection) -> None:
    """Atomic rewrite: a reader (or a run killed mid-write) never sees half a file."""
    write_file(path, dumps(result.as_json()), "--json")


def run(
    modules=None, targets=TARGETS, kernel_filter: str | None = None, json_path: Path | None = None, progress=None
) -> Inspection:
    result = Inspection()
    for name in modules or kernels.STATIC_MODULES:
        for target in targets:
            if not inspect_module(name, target, kernel_filter, result):
                continue
            if json_path:
                _write_json(json_path, result)
            if progress:
                progress(name, target, result)
    return result


def records(modules=None, targets=TARGETS, kernel_filter: str | None = None) -> list[StaticRecord]:
    return run(modules, targets, kernel_filter).records


# Columns a narrow terminal (or a pipe: 120 columns) drops first; --json keeps everything.
DROP_ORDER = ("note", "kinds", "FFMA", "occupancy", "per K")


def _table(recs: list[StaticRecord], width: int | None = None):
    from microbench.report.roofline_report import rich_table

    # MMA: matrix instructions (Tensor Core / MFMA), per K: of them per warp or wave and K step, cores: the verdict
    cols = [
        (c, "right" if c in ("MMA", "per K", "FFMA", "smem B") else "left")
        for c in (
            "kernel",
            "config",
            "target",
            "MMA",
            "per K",
            "kinds",
            "FFMA",
            "regs",
            "smem B",
            "occupancy",
            "spills",
            "cores",
            "note",
        )
    ]
    rows = []
    for r in recs:
        smem = r.dynamic_shared_bytes if r.dynamic_shared_bytes is not None else r.shared_bytes
        if r.lds_bytes is not None:
            smem = r.lds_bytes
        regs = f"v{r.vgprs} a{r.agprs} s{r.sgprs}" if r.vgprs is not None else str(r.registers)
        unit = {"warps/SM": "w/SM", "waves/SIMD": "w/SIMD"}.get(r.occupancy_unit, r.occupancy_unit)
        # backend options and the group size: in the JSON
        config = " ".join(w for w in r.config.split() if "=" not in w and not (w[0] == "G" and digits(w[1:])))
        rows.append(
            (
                [
                    r.kernel,
                    config,
                    r.target,
                    str(r.matrix_instructions),
                    _opt(r.matrix_per_k_step),
                    " ".join(_short_kind(k) for k in r.matrix_instruction_kinds),
                    str(r.ffma),
                    regs,
                    str(smem),
                    f"{r.occupancy} {unit}" if r.occupancy is not None else "-",
                    f"{r.stack_bytes} B ({r.spill_stores}st/{r.spill_loads}ld)" if r.spills else "none",
                    r.matrix_cores,
                    r.fallback or r.note,
                ],
                "red" if r.spills else "yellow" if r.matrix_cores == "fallback" else None,
            )
        )
    return rich_table(
        cols,
        rows,
        title="static inspection (SASS / AMDGCN from ahead-of-time compilation; no GPU ran these)",
        width=width,
        drop_order=DROP_ORDER,
        kept_in="the --json file",
    )


def _opt(v) -> str:
    return or_dash(v, "")


def _short_kind(name: str) -> str:
    """v_mfma_f32_32x32x8_bf16 -> 32x32x8_bf16; HMMA.16816.F32.BF16 as it is."""
    return name.removeprefix("v_mfma_f32_").removeprefix("v_mfma_")


def build_parser() -> Parser:
    ap = Parser(prog="dawnscope inspect", description=__doc__)
    ap.add_argument(
        "--json", type=Path, metavar="OUT", help="write one record per (kernel, config, target) to this file"
    )
    ap.add_argument("--target", choices=TARGETS, action="append", help="only this target (repeatable)")
    ap.add_argument("--kernel", help="only kernels whose name contains this")
    ap.add_argument(
        "--profile",
        help="instead: the Triton default configurations at this bench.toml profile's real "
        "shapes (their argument specializations), as a GPU run compiles them",
    )
    ap.add_argument(
        "--config", type=Path, default=None, help="bench.toml whose --profile is read; default: the project's"
    )
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # Interrupted, the JSON holds every (module, target) finished so far (rewritten after each).
    return run_command(
        lambda: profile_main(args) if args.profile else _run(args),
        on_interrupt=lambda: "interrupted; the JSON holds what was inspected before" if args.json else None,
    )


def _run(args) -> int:
    from microbench.report.roofline_report import wide_console

    if args.json:
        check_file(args.json, "--json")  # before minutes of compiling
    if args.kernel and not any(args.kernel in n for n in kernel_names()):
        raise InputError(
            None,
            f"no kernel of ours has this in its name (ours: {', '.join(sorted(kernel_names()))})",
            key="--kernel",
            value=args.kernel,
        )

    def progress(name, target, result):
        beat.update(f"inspected {name} for {target}")
        for f in result.failures:
            if (f["module"], f["target"]) == (name, target):
                print(f"inspect: {name} for {target} FAILED: {f['error']}", file=sys.stderr)

    with Heartbeat("inspect: compiling our kernels and reading their SASS") as beat:
        result = run(
            targets=tuple(args.target or TARGETS), kernel_filter=args.kernel, json_path=args.json, progress=progress
        )
    if not result.records and not result.failures:
        raise InputError(None, "no kernel of ours has this in its name", key="--kernel", value=args.kernel)
    console = wide_console()
    console.print(_table(result.records, width=console.width))
    if args.json:
        print(f"wrote {len(result.records)} records and {len(result.failures)} failures to {args.json}")
    if result.failures:
        failed = ", ".join(f"{f['module']} ({f['target']})" for f in result.failures)
        print(f"inspect: {len(result.failures)} failed: {failed}; the others were inspected", file=sys.stderr)
        return 1
    return 0


def profile_main(args) -> int:
    """Spills at real shapes: 4096^3 (the representative builds) can hide what an odd shape's specialization
    costs in registers."""
    from microbench.inspect.compiles import default_plans, inspect_plans

    cases = load_config(args.config).case_set(args.profile).cases
    rows, failed = [], 0
    for target in args.target or NVIDIA_TARGETS:  # AMD at real shapes: ask with --target gfx942
        plans = [p for p in default_plans(cases, arch_family(target)) if not args.kernel or args.kernel in p[0]]
        rows += inspect_plans(plans, target, jobs=max(1, os.cpu_count() or 1))
    for r in rows:
        if "error" in r:
            failed += 1
            print(f"{r['kernel']} [{r['config']}] {r['target']}: FAILED {r['error']}", file=sys.stderr)
        else:
            spec = " ".join(f"{k}:{_spec_word(v)}" for k, v in r["spec"] if k in ("M", "N", "K", "C", "P", "Q"))
            print(
                f"{r['target']} {r['kernel']} [{r['config']}] {spec}: {r['registers']} registers, "
                + (
                    f"SPILLS {r['spill_stores']} st / {r['spill_loads']} ld, stack {r['stack_bytes']}"
                    if r["spills"]
                    else "no spills"
                )
            )
    if args.json:
        _write_json_rows(args.json, rows)
    return 1 if failed or any(r.get("spills") for r in rows) else 0


def _spec_word(spec: list) -> str:
    """How the JIT specialized a size: `1` (a constant), `16n` (divisible by 16) or `any`."""
    if spec[0] == "const":
        return str(spec[1])
    return "16n" if len(spec) > 1 and spec[1] is True else "any"


def _write_json_rows(path: Path, rows: list[dict]) -> None:
    write_file(path, dumps(rows), "--json")


if __name__ == "__main__":
    sys.exit(main())
