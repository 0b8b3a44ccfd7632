"""python -m microbench.devtools.ncucheck OUT_CSV [--dry-run]: the hardware-counter stage of scripts/device-check.

Asks the chip which tensor-pipe metrics it has (`ncu --query-metrics`), then profiles one large GEMM each of
cuBLAS bf16, cuBLAS fp32 with TF32 off (the negative control), our Triton bf16 and our CuPy mma.sync and
wgmma kernels (microbench/data/ncu_metrics.toml) with `--clock-control none`, and reads the export with the
project's Nsight Compute reader (microbench.timeline.ncu): per GEMM, its kernels, their tensor-pipe counts and
the counters' verdict (microbench.timeline.counters) next to what the kernel name says and what was expected.
"Counters outrank names" then rests on this chip's own counts.

`--app` is the profiled program itself (run under ncu; needs a CUDA device). Without `ncu` on PATH (or in
/usr/local/cuda/bin) the stage says so in one line: exit 1, or 0 in a dry run, where there is nothing to profile.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from microbench.core.errors import InputError
from microbench.core.resources import data_file
from microbench.devtools.ncuapp import run_gemms
from microbench.timeline.classify import classify_kernel
from microbench.timeline.counters import counter_verdict, tensor_activity
from microbench.timeline.ncu import read_ncu_csv

METRICS_TOML = data_file("ncu_metrics.toml")
MARK_PREFIX = "dawnscope_mark_"


def settings(path: Path = METRICS_TOML) -> dict:
    return tomllib.loads(path.read_text())


def find_ncu() -> str | None:
    found = shutil.which("ncu")
    if found:
        return found
    cuda = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "bin" / "ncu"
    return str(cuda) if cuda.exists() else None


def listed_metrics(query_output: str) -> set[str]:
    """Base metric names from `ncu --query-metrics` (the first word of each table row)."""
    return {m.group(1) for m in re.finditer(r"^([a-z][a-z0-9_]*__[a-z0-9_]+)\s", query_output, re.M)}


def choose_metrics(listed: set[str], cfg: dict) -> tuple[list[str], list[str]]:
    """(metrics to request, tensor metrics this chip offers). Nothing listed (the query failed): every
    candidate is requested, and ncu's own error then names an unknown one."""
    tensor = [m for m in cfg["tensor"] if not listed or m.split(".", 1)[0] in listed]
    always = [m for m in cfg["always"] if not listed or m.split(".", 1)[0] in listed]
    offered = sorted(n for n in listed if any(p in n for p in cfg["offered_patterns"]))
    return always + tensor, offered


def query(ncu: str) -> str:
    r = subprocess.run([ncu, "--query-metrics"], capture_output=True, text=True, timeout=120)
    return r.stdout if r.returncode == 0 else ""


def profile(ncu: str, metrics: list[str], out_csv: Path) -> int:
    """ncu over `--app`: only the kernels between cudaProfilerStart and Stop, at the chip's own clocks."""
    cmd = [ncu, "--clock-control", "none", "--profile-from-start", "off", "--target-processes", "all",
           "--metrics", ",".join(metrics), "--csv", "--page", "details", "--log-file", str(out_csv),
           sys.executable, "-m", "microbench.devtools.ncucheck", "--app"]
    print("$ " + " ".join(cmd), flush=True)
    return subprocess.run(cmd).returncode


def labelled(kernels) -> list[tuple[str, object]]:
    """(label, kernel) for each profiled kernel after a marker; the markers themselves are left out."""
    out, label = [], "before any marker"
    for k in kernels:
        if k.name.startswith(MARK_PREFIX):
            label = k.name[len(MARK_PREFIX):].split("(", 1)[0]
            continue
        out.append((label, k))
    return out


def evidence(csv_path: Path, cfg: dict | None = None) -> list[dict]:
    """One record per profiled GEMM kernel: its counters' verdict against the name's and the expected one."""
    cfg = settings() if cfg is None else cfg
    expected = {g["label"]: g["expect"] for g in cfg["gemm"]}
    rows = []
    for label, k in labelled(read_ncu_csv(csv_path)):
        values = k.values()
        named = classify_kernel(k.name)
        verdict = counter_verdict(values, named.cls, model_flops=2.0 * cfg["size"] ** 3)
        want = expected.get(label)
        rows.append({"label": label, "kernel": k.name[:160], "duration_ns": k.duration_ns,
                     "tensor_metrics": tensor_activity(values), "counters_say": verdict.tensor_cores,
                     "counter_evidence": verdict.evidence, "name_says": named.tensor_cores, "expected": want,
                     "as_expected": None if want is None or verdict.tensor_cores is None
                     else verdict.tensor_cores == want})
    return rows


def evidence_lines(csv_path: Path) -> list[str]:
    """For the summary: one line per profiled kernel, or why there is none."""
    try:
        rows = evidence(csv_path)
    except (InputError, OSError, ValueError) as e:
        return [f"hardware counters (ncu.csv): not readable: {type(e).__name__}: {str(e)[:200]}"]
    if not rows:
        return ["hardware counters (ncu.csv): no GEMM kernel profiled"]
    lines = ["hardware counters (ncu.csv; Tensor Cores per the counters / per the name / expected):"]
    for r in rows:
        mark = {True: "as expected", False: "UNEXPECTED", None: "no verdict"}[r["as_expected"]]
        dur = "-" if r["duration_ns"] is None else f"{r['duration_ns'] / 1e3:.1f} us"
        lines.append(f"  {r['label']:22} {r['counters_say'] or '?':>3} / {r['name_says']:7} / {r['expected'] or '-':3}"
                     f"  {mark:11} {dur:>10}  {r['kernel'][:60]}  [{r['counter_evidence'][:90]}]")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m microbench.devtools.ncucheck", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out_csv", type=Path, nargs="?")
    ap.add_argument("--dry-run", action="store_true")
    ap.add_argument("--app", action="store_true", help=argparse.SUPPRESS)  # the program ncu profiles
    args = ap.parse_args(argv)
    if args.app:
        return run_gemms(settings())
    if args.out_csv is None:
        ap.error("OUT_CSV is required")
    ncu = find_ncu()
    if ncu is None:
        print("ncucheck: no Nsight Compute (ncu) on PATH or in $CUDA_HOME/bin: no hardware counters", file=sys.stderr)
        return 0 if args.dry_run else 1
    cfg = settings()
    metrics, offered = choose_metrics(listed_metrics(query(ncu)), cfg)
    print("tensor-pipe metrics this chip offers: " + (", ".join(offered) or "none listed (query failed?)"))
    print("requested: " + ", ".join(metrics), flush=True)
    rc = profile(ncu, metrics, args.out_csv)
    if not args.out_csv.exists():
        print(f"ncucheck: ncu wrote no export (exit {rc})", file=sys.stderr)
        return 1
    print(json.dumps(evidence(args.out_csv, cfg), indent=1))
    print("\n".join(evidence_lines(args.out_csv)))
    return rc


if __name__ == "__main__":
    sys.exit(main())
