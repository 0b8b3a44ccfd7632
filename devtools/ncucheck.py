"""python -m devtools.ncucheck OUT_CSV [--dry-run]: the hardware-counter stage of scripts/device-check.

Asks the chip which tensor-pipe metrics it has (`ncu --query-metrics`), then profiles one large GEMM each of
cuBLAS bf16, cuBLAS fp32 with TF32 off (the negative control), our Triton bf16 and our CuPy mma.sync and
wgmma kernels (microbench/data/ncu_metrics.toml) with `--clock-control none`, and reads the export with the
project's Nsight Compute reader (microbench.trace.ncu): per GEMM, its kernels, their tensor-pipe counts and
the counters' verdict (microbench.trace.counters) next to what the kernel name says and what was expected.
"Counters outrank names" then rests on this chip's own counts.

Each GEMM is profiled by its own ncu run (`--app --only LABEL`, at most [limits] kernels_per_gemm kernels, then
`--kill yes`), each within its share of `--deadline-s`, which the stage sets inside its cap: ncu writes its CSV only
when it exits, so a run killed at the cap would keep nothing; the finished runs' exports are merged into OUT_CSV
as each ends. When `ncu --query-metrics` fails its message is printed and only this chip's candidates are asked
([by_arch]); ERR_NVGPUCTRPERM (counters restricted to administrators) is said in one line. A kernel the GEMM's
call launches besides the GEMM (the wgmma kernel's transpose copy) is reported as its helper, without a verdict.

`--app` is the profiled program itself (run under ncu; needs a CUDA device). Without `ncu` (PATH, $CUDA_HOME/bin,
/usr/local/cuda/bin, /opt/nvidia/nsight-compute/*/) the stage says so in one line: exit 1, or 0 in a dry run.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import tomllib

from devtools.ncuapp import run_gemms
from microbench.core.args import digits
from microbench.core.errors import InputError
from microbench.core.resources import data_file
from microbench.trace.classify import classify_kernel
from microbench.trace.counters import counter_verdict, tensor_activity
from microbench.trace.ncu import read_ncu_csv

METRICS_TOML = data_file("ncu_metrics.toml")
MARK_PREFIX = "dawnscope_mark_"


def settings(path: Path = METRICS_TOML) -> dict:
    return tomllib.loads(path.read_text())


NCU_DIRS = ("/opt/nvidia/nsight-compute",)  # the standalone installer's home: one folder per version
PERMISSION_ERROR = "ERR_NVGPUCTRPERM"


def find_ncu() -> str | None:
    """ncu on PATH, in $CUDA_HOME/bin or /usr/local/cuda/bin, or the newest /opt/nvidia/nsight-compute/VERSION/ncu."""
    found = shutil.which("ncu")
    if found:
        return found
    for home in (os.environ.get("CUDA_HOME"), "/usr/local/cuda"):
        if home and (Path(home) / "bin" / "ncu").exists():
            return str(Path(home) / "bin" / "ncu")

    def version(p: Path):
        return tuple(int(x) if digits(x) else 0 for x in re.split(r"[.-]", p.parent.name))

    found_opt = sorted((p for d in NCU_DIRS for p in Path(d).glob("*/ncu") if p.is_file()), key=version)
    return str(found_opt[-1]) if found_opt else None


def listed_metrics(query_output: str) -> set[str]:
    """Base metric names from `ncu --query-metrics` (the first word of each table row)."""
    return {m.group(1) for m in re.finditer(r"^([a-z][a-z0-9_]*__[a-z0-9_]+)\s", query_output, re.M)}


def choose_metrics(listed: set[str], cfg: dict, arch: str | None = None) -> tuple[list[str], list[str]]:
    """(metrics to request, tensor metrics this chip offers). Nothing listed (the query failed): the tensor
    metrics of this chip's architecture (cfg["by_arch"]), none where the architecture is unknown."""
    if listed:
        tensor = [m for m in cfg["tensor"] if m.split(".", 1)[0] in listed]
        always = [m for m in cfg["always"] if m.split(".", 1)[0] in listed]
    else:
        names = set(cfg.get("by_arch", {}).get(arch or "", ()))
        tensor, always = [m for m in cfg["tensor"] if m.split(".", 1)[0] in names], list(cfg["always"])
    offered = sorted(n for n in listed if any(p in n for p in cfg["offered_patterns"]))
    return always + tensor, offered


def chip_arch() -> str | None:
    """sm_XY of CUDA device 0, or None (no PyTorch CUDA here)."""
    try:
        import torch

        major, minor = torch.cuda.get_device_capability(0)
    except Exception:  # noqa: BLE001 - no CUDA build, no device
        return None
    return f"sm_{major}{minor}"


def query(ncu: str, timeout_s: float = 30) -> tuple[str, str]:
    """(the metric table, "") or ("", why the query failed: ncu's own last lines)."""
    try:
        r = subprocess.run([ncu, "--query-metrics"], capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return "", f"ncu --query-metrics did not answer within {timeout_s:.0f} s"
    if r.returncode == 0 and listed_metrics(r.stdout):
        return r.stdout, ""
    tail = " | ".join((r.stdout + r.stderr).strip().splitlines()[-3:])
    return "", f"ncu --query-metrics exit {r.returncode}: {tail[:400]}"


def profile_cmd(ncu: str, metrics: list[str], log: Path, label: str, kernels: int) -> list[str]:
    """ncu over `--app --only LABEL`: only the kernels between cudaProfilerStart and Stop, at the chip's own
    clocks, at most `kernels` of them, then the program is ended (--kill yes)."""
    return [
        ncu,
        "--clock-control",
        "none",
        "--profile-from-start",
        "off",
        "--target-processes",
        "all",
        "--launch-count",
        str(kernels),
        "--kill",
        "yes",
        "--metrics",
        ",".join(metrics),
        "--csv",
        "--page",
        "details",
        "--log-file",
        str(log),
        sys.executable,
        "-m",
        "devtools.ncucheck",
        "--app",
        "--only",
        label,
    ]


def _run_bounded(cmd: list[str], timeout_s: float) -> tuple[int | None, str]:
    """(exit code or None when stopped at `timeout_s`, its output); the whole group (ncu and its target) goes."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=max(1.0, timeout_s))
        return proc.returncode, out
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        return None, out or ""
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def profile_all(ncu: str, metrics: list[str], cfg: dict, out_csv: Path, deadline_s: float) -> int:
    """One ncu run per GEMM, each within its share of what is left of `deadline_s`; every finished one's
    export is merged into `out_csv` at once. Stops at the first ERR_NVGPUCTRPERM (no run can count)."""
    t0, labels = time.monotonic(), [g["label"] for g in cfg["gemm"]]
    parts, failed = [], 0
    for i, label in enumerate(labels):
        share = (deadline_s - (time.monotonic() - t0)) / (len(labels) - i)
        if share < 5:
            print(f"ncucheck: {label}: not profiled: no time left before the deadline ({deadline_s:.0f} s)", flush=True)
            failed += 1
            continue
        log = out_csv.with_name(f"{out_csv.stem}.{label}.csv")
        cmd = profile_cmd(ncu, metrics, log, label, int(cfg["limits"]["kernels_per_gemm"]))
        print("$ " + " ".join(cmd), flush=True)
        rc, out = _run_bounded(cmd, share)
        text = out + (log.read_text(errors="replace") if log.exists() else "")
        if PERMISSION_ERROR in text:
            print(
                f"ncucheck: {PERMISSION_ERROR}: this user may not read the GPU's performance counters (the driver "
                "restricts them to administrators: NVreg_RestrictProfilingToAdminUsers=1; in a container it needs "
                "--cap-add=SYS_ADMIN): no hardware counters on this machine",
                file=sys.stderr,
                flush=True,
            )
            return 1
        ok = rc is not None and log.exists() and '"ID",' in text
        print(
            f"ncucheck: {label}: "
            + (
                "profiled"
                if ok
                else f"no export ({'stopped at its ' + format(share, '.0f') + ' s share' if rc is None else 'exit ' + str(rc)})"
            )
            + ("" if ok else ": " + " | ".join(out.strip().splitlines()[-2:])[:300]),
            flush=True,
        )
        if ok:
            parts.append(log)
            merge_exports(parts, out_csv)
        else:
            failed += 1
    return 1 if failed else 0


def merge_exports(parts: list[Path], out_csv: Path) -> None:
    """The per-GEMM exports as one CSV (one header, kernel IDs renumbered in order), written then renamed."""
    rows_out: list[list[str]] = []
    offset = 0
    for part in parts:
        lines = part.read_text(errors="replace").splitlines()
        start = next((i for i, ln in enumerate(lines) if ln.startswith('"ID",')), None)
        if start is None:
            continue
        rows = [r for r in csv.reader(io.StringIO("\n".join(lines[start:]))) if r and not r[0].startswith("==")]
        if not rows_out:
            rows_out.append(rows[0])
        ids = [int(r[0]) for r in rows[1:] if digits(r[0])]
        rows_out += [[str(int(r[0]) + offset), *r[1:]] if digits(r[0]) else r for r in rows[1:]]
        offset += (max(ids) + 1) if ids else 0
    buf = io.StringIO()
    csv.writer(buf, quoting=csv.QUOTE_ALL, lineterminator="\n").writerows(rows_out)
    tmp = out_csv.with_name(out_csv.name + ".tmp")
    tmp.write_text(buf.getvalue())
    os.replace(tmp, out_csv)


def labelled(kernels, cfg: dict | None = None) -> list[tuple[str, object]]:
    """(label, kernel) for each profiled kernel after a marker; the markers themselves are left out. A kernel
    that is not the GEMM's own (its `kernel` pattern in ncu_metrics.toml) is labelled `LABEL (helper)`."""
    patterns = {g["label"]: re.compile(g["kernel"]) for g in (cfg or {}).get("gemm", ()) if g.get("kernel")}
    out, label = [], "before any marker"
    for k in kernels:
        if k.name.startswith(MARK_PREFIX):
            label = k.name[len(MARK_PREFIX) :].split("(", 1)[0]
            continue
        own = patterns.get(label)
        out.append((label if own is None or own.search(k.name) else f"{label} (helper)", k))
    return out


def evidence(csv_path: Path, cfg: dict | None = None) -> list[dict]:
    """One record per profiled GEMM kernel: its counters' verdict against the name's and the expected one."""
    cfg = settings() if cfg is None else cfg
    expected = {g["label"]: g["expect"] for g in cfg["gemm"]}
    rows = []
    for label, k in labelled(read_ncu_csv(csv_path), cfg):
        values = k.values()
        named = classify_kernel(k.name)
        verdict = counter_verdict(values, named.cls, model_flops=2.0 * cfg["size"] ** 3)
        want = expected.get(label)
        rows.append(
            {
                "label": label,
                "kernel": k.name[:160],
                "duration_ns": k.duration_ns,
                "tensor_metrics": tensor_activity(values),
                "counters_say": verdict.tensor_cores,
                "counter_evidence": verdict.evidence,
                "name_says": named.tensor_cores,
                "expected": want,
                "as_expected": None if want is None or verdict.tensor_cores is None else verdict.tensor_cores == want,
            }
        )
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
        lines.append(
            f"  {r['label']:22} {r['counters_say'] or '?':>3} / {r['name_says']:7} / {r['expected'] or '-':3}"
            f"  {mark:11} {dur:>10}  {r['kernel'][:60]}  [{r['counter_evidence'][:90]}]"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m devtools.ncucheck", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("out_csv", type=Path, nargs="?")
    ap.add_argument("--dry-run", action="store_true")
    ap.add_argument(
        "--deadline-s",
        type=float,
        default=60.0,
        help="all of ncu's runs end by then (inside the stage's cap, which would kill ncu before it writes)",
    )
    ap.add_argument("--app", action="store_true", help=argparse.SUPPRESS)  # the program ncu profiles
    ap.add_argument("--only", help=argparse.SUPPRESS)  # the one GEMM the program runs
    args = ap.parse_args(argv)
    if args.app:
        cfg = settings()
        return run_gemms({**cfg, "gemm": [g for g in cfg["gemm"] if args.only in (None, g["label"])]})
    if args.out_csv is None:
        ap.error("OUT_CSV is required")
    ncu = find_ncu()
    if ncu is None:
        print(
            "ncucheck: no Nsight Compute (ncu) on PATH, in $CUDA_HOME/bin, /usr/local/cuda/bin or "
            "/opt/nvidia/nsight-compute: no hardware counters",
            file=sys.stderr,
        )
        return 0 if args.dry_run else 1
    t0 = time.monotonic()
    cfg = settings()
    table, failure = query(ncu, min(float(cfg["limits"]["query_timeout_s"]), args.deadline_s / 4))
    arch = None if table else chip_arch()
    metrics, offered = choose_metrics(listed_metrics(table), cfg, arch)
    if failure:
        print(f"ncucheck: {failure}; asking only {arch or 'an unknown architecture'}'s candidates", flush=True)
    print("tensor-pipe metrics this chip offers: " + (", ".join(offered) or "none listed"))
    print("requested: " + ", ".join(metrics), flush=True)
    rc = profile_all(ncu, metrics, cfg, args.out_csv, args.deadline_s - (time.monotonic() - t0))
    if not args.out_csv.exists():
        print(f"ncucheck: ncu wrote no export (exit {rc})", file=sys.stderr)
        return 1
    print(json.dumps(evidence(args.out_csv, cfg), indent=1))
    print("\n".join(evidence_lines(args.out_csv)))
    return rc


if __name__ == "__main__":
    sys.exit(main())
