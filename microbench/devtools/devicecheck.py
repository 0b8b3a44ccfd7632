"""python -m microbench.devtools.devicecheck OUTDIR (scripts/device-check): one prepared run for a short GPU loan.

Stages run most valuable first under ONE global deadline (at most 8 minutes); each stage also has a cap.
A stage still running at its limit gets SIGINT, so that what it measured is written (pytest writes its
JUnit report, the roofline its rows and plot), then, after a grace period, SIGTERM and SIGKILL. Every
stage is its own process: a device fault in one (the unverified wgmma kernel runs last and alone) cannot
poison the others. Nothing is installed: the stages run from this source tree (PYTHONPATH) with what the
machine has, and with autotuning off (DAWNSCOPE_AUTOTUNE=0: default configurations, a few compiles).

OUTDIR receives at most 8 files of at most 16 MiB, summary.txt written last:
    probe.json  results.json  results.csv  roofline.png  gpu-tests.xml  inspect.json  stages.log  summary.txt

Without a GPU it exits 3 and creates nothing. `--dry-run` (or DEVICE_CHECK_DRY_RUN=1) fakes the GPU check
and shortens every stage (CPU stand-ins for the GPU stages), to test the plumbing on a CPU: order, the
deadline, SIGINT, the files. DEVICE_CHECK_DEADLINE_S overrides the global deadline (seconds).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DEADLINE_S = 480.0  # the whole run; the loan is 15 minutes, machine start and transfers included
DRY_DEADLINE_S = 75.0
SUMMARY_RESERVE_S = 10.0  # kept back from the last stage for merging files and the summary
MAX_FILES = 8
MAX_FILE_BYTES = 16 * 2**20
LOG_CAP_BYTES = 2 * 2**20  # per stage, in stages.log: the head and the tail are kept
NO_GPU_EXIT = 3


@dataclass
class Stage:
    name: str
    cap_s: float  # at most this long (before the global deadline cuts it shorter)
    cmd: list[str]  # run on the GPU machine
    dry_cmd: list[str]  # run in a dry run, on a CPU
    dry_cap_s: float  # the same in a dry run: long enough to start up and be stopped mid-work
    outputs: dict[str, str] = field(default_factory=dict)  # file in the stage's work dir -> name in OUTDIR
    junit: bool = False  # the stage writes junit.xml in its work dir (merged into gpu-tests.xml)


def _py(*args: str) -> list[str]:
    return [sys.executable, *args]


def _pytest(select: str, *paths: str, gpu: bool = True) -> list[str]:
    marks = ["-m", "gpu"] if gpu else ["-m", "interpreter or inspect"]
    return _py("-m", "pytest", "-rA", "-p", "no:cacheprovider", "--junitxml", "{work}/junit.xml", *marks,
               "-k", select, *paths)


_TRITON_TESTS = ("tests/test_triton_gemm.py", "tests/test_triton_conv.py")
_CUDA_TESTS = ("tests/test_cuda_kernels.py", "tests/test_cuda_wrappers.py")


def stages() -> list[Stage]:
    """In order of value. Caps add up to more than the deadline on purpose: a stage that finishes early
    leaves its time to the next; the last ones are the first to go when time runs short."""
    quick = ["-m", "microbench.roofline", "--profile", "quick", "--out", "{work}"]
    roofline_files = {f: f for f in ("results.json", "results.csv", "roofline.png")}
    rest = ["--ignore=" + p for p in (*_TRITON_TESTS, *_CUDA_TESTS)]
    return [
        Stage("probe", 45, _py("-m", "microbench.devtools.devicecheck", "--probe", "{work}/probe.json"),
              _py("-m", "microbench.devtools.devicecheck", "--probe", "{work}/probe.json", "--dry-run"), 15,
              {"probe.json": "probe.json"}),
        Stage("quick profile", 150, _py(*quick, "--device", "cuda"), _py(*quick, "--device", "cpu"), 25,
              roofline_files),
        Stage("gpu tests: triton", 90, _pytest("not wgmma", *_TRITON_TESTS),
              _pytest("not wgmma", *_TRITON_TESTS, gpu=False), 9, junit=True),
        Stage("gpu tests: cuda c++", 60, _pytest("not wgmma", *_CUDA_TESTS), _pytest("layout", *_CUDA_TESTS, gpu=False),
              4, junit=True),
        Stage("gpu tests: the rest", 60, _pytest("not wgmma", "tests", *rest), _pytest("cdna", "tests", gpu=False),
              4, junit=True),
        Stage("static inspection", 45, _py("-m", "microbench.inspect", "--target", "sm_90", "--json", "{work}/inspect.json"),
              _py("-m", "microbench.inspect", "--target", "sm_80", "--kernel", "triton_gemm", "--json",
                  "{work}/inspect.json"), 4, {"inspect.json": "inspect.json"}),
        Stage("wgmma (unverified kernel, alone)", 45, _pytest("wgmma", *_CUDA_TESTS), _pytest("wgmma", *_CUDA_TESTS, gpu=False),
              4, junit=True),
    ]


@dataclass
class StageResult:
    name: str
    rc: int | None
    elapsed_s: float
    limit_s: float
    stopped: str = ""  # "SIGINT at the limit", "SIGTERM", "SIGKILL", or "" when it ended by itself
    skipped: str = ""


def run_stage(argv: list[str], limit_s: float, log_path: Path, env: dict, grace_s: float) -> tuple[int | None, float, str]:
    """Run one stage in its own process group; at `limit_s` send it SIGINT (the process only: a child such
    as ptxas finishes its file), then SIGTERM and SIGKILL to the group after `grace_s` each."""
    start = time.monotonic()
    with open(log_path, "wb") as log:
        # SIGINT back to its default in the child: a shell starting this in the background ignores it, and a
        # Python that starts with SIGINT ignored never raises KeyboardInterrupt (no report, no plot).
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=REPO, env=env, start_new_session=True,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        stopped = ""
        try:
            proc.wait(timeout=max(0.1, limit_s))
        except (subprocess.TimeoutExpired, KeyboardInterrupt) as e:  # the limit, or Ctrl-C on device-check
            stopped = ("SIGINT at the limit" if isinstance(e, subprocess.TimeoutExpired)
                       else "SIGINT (device-check interrupted)")
            proc.send_signal(signal.SIGINT)
            for sig, name in ((signal.SIGTERM, "SIGTERM"), (signal.SIGKILL, "SIGKILL")):
                try:
                    proc.wait(timeout=grace_s)
                    break
                except subprocess.TimeoutExpired:
                    stopped = f"SIGINT, then {name}"
                    os.killpg(proc.pid, sig)
            proc.wait()
    return proc.returncode, time.monotonic() - start, stopped


def _capped_text(path: Path, cap: int) -> str:
    data = path.read_bytes() if path.exists() else b""
    if len(data) > cap:
        data = data[: cap // 2] + f"\n[... {len(data) - cap} bytes left out ...]\n".encode() + data[-cap // 2:]
    return data.decode(errors="replace")


def merge_junit(parts: list[tuple[str, Path]], out: Path) -> dict:
    """One JUnit file from each pytest stage's; returns the counts over all of them."""
    root = ET.Element("testsuites")
    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for stage, path in parts:
        try:
            tree = ET.parse(path).getroot()
        except (OSError, ET.ParseError):
            continue
        for suite in ([tree] if tree.tag == "testsuite" else list(tree)):
            suite.set("name", stage)
            root.append(suite)
            for k in counts:
                counts[k] += int(suite.get(k, 0))
    ET.ElementTree(root).write(out, encoding="utf-8", xml_declaration=True)
    return counts


def _env(dry: bool) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.update(PYTHONUNBUFFERED="1", DAWNSCOPE_AUTOTUNE="0", MPLBACKEND="Agg")
    if dry:
        env.pop("DEVICE_CHECK_DRY_RUN", None)
    return env


def run_all(outdir: Path, dry: bool, deadline_s: float, plan: list[Stage] | None = None,
            grace_s: float | None = None) -> list[StageResult]:
    plan = stages() if plan is None else plan
    if grace_s is None:  # after SIGINT: pytest writes its report, the roofline its rows and plot
        grace_s = 8.0 if dry else 20.0
    reserve = 2.0 if dry else SUMMARY_RESERVE_S
    t0 = time.monotonic()
    results: list[StageResult] = []
    work_root = Path(tempfile.mkdtemp(prefix="device-check-"))
    junit_parts: list[tuple[str, Path]] = []
    env = _env(dry)
    try:
        with open(outdir / "stages.log", "w") as log:
            for i, st in enumerate(plan):
                left = deadline_s - (time.monotonic() - t0) - reserve - grace_s
                limit = min(st.dry_cap_s if dry else st.cap_s, left)
                if limit < 1.0:
                    results.append(StageResult(st.name, None, 0.0, 0.0, skipped="no time left before the deadline"))
                    continue
                work = work_root / f"stage{i}"
                work.mkdir()
                argv = [a.replace("{work}", str(work)) for a in (st.dry_cmd if dry else st.cmd)]
                rc, elapsed, stopped = run_stage(argv, limit, work / "output.txt", env, grace_s)
                results.append(StageResult(st.name, rc, elapsed, limit, stopped))
                log.write(f"==== stage {i + 1}: {st.name} (limit {limit:.0f} s): rc {rc}, {elapsed:.1f} s"
                          f"{', ' + stopped if stopped else ''}\n$ {' '.join(argv)}\n")
                log.write(_capped_text(work / "output.txt", LOG_CAP_BYTES) + "\n")
                log.flush()
                for src, dst in st.outputs.items():
                    if (work / src).exists():
                        shutil.copyfile(work / src, outdir / dst)
                if st.junit:
                    junit_parts.append((st.name, work / "junit.xml"))
                if stopped.endswith("(device-check interrupted)"):
                    break  # Ctrl-C on device-check itself: keep what the stages wrote, run no more
        if junit_parts:
            merge_junit(junit_parts, outdir / "gpu-tests.xml")
    finally:
        shutil.rmtree(work_root, ignore_errors=True)
    return results


def _quick_rows(outdir: Path) -> list[str]:
    try:
        doc = json.loads((outdir / "results.json").read_text())
    except (OSError, ValueError) as e:
        return [f"quick profile: no results ({type(e).__name__})"]
    hw = doc.get("hardware", {})
    lines = [f"quick profile on {hw.get('name', '?')} {hw.get('arch', '?')}: {len(doc.get('results', []))} rows"
             + (" (interrupted)" if doc.get("interrupted") else "")]
    lines.append(f"{'op':18} {'shape':28} {'dtype':5} {'provider':10} {'status':8} {'TFLOP/s':>9}  TC")
    for r in doc.get("results", []):
        tf = r.get("tflops")
        lines.append(f"{r.get('op', ''):18} {str(r.get('shape', ''))[:28]:28} {r.get('dtype', ''):5} "
                     f"{r.get('provider', ''):10} {r.get('status', ''):8} {'-' if tf is None else format(tf, '9.1f'):>9}  "
                     f"{r.get('tensor_cores', '')}")
    return lines


def _test_counts(outdir: Path) -> str:
    try:
        suites = ET.parse(outdir / "gpu-tests.xml").getroot()
    except (OSError, ET.ParseError):
        return "GPU tests: no report"
    parts = []
    for s in suites:
        n, f, e, sk = (int(s.get(k, 0)) for k in ("tests", "failures", "errors", "skipped"))
        parts.append(f"  {s.get('name')}: {n - f - e - sk} passed, {f + e} failed, {sk} skipped")
    return "GPU tests (gpu-tests.xml; a skipped test is not a pass):\n" + "\n".join(parts)


def write_summary(outdir: Path, results: list[StageResult], dry: bool, deadline_s: float, elapsed_s: float) -> Path:
    lines = []
    if dry:
        lines.append("DRY RUN on a CPU: the GPU check was faked and every stage shortened; no figure here is a GPU's.")
    lines.append(f"device-check: {len(results)} stages in {elapsed_s:.0f} s (deadline {deadline_s:.0f} s)")
    for r in results:
        state = r.skipped or (f"rc {r.rc}" + (f", {r.stopped}" if r.stopped else ""))
        lines.append(f"  {r.name:34} {r.elapsed_s:6.1f} s of {r.limit_s:5.0f} s  {state}")
    lines.append(_test_counts(outdir))
    lines += _quick_rows(outdir)
    for p in sorted(outdir.iterdir()):
        _cap_file(p)
    lines.append("files: " + ", ".join(f"{p.name} ({p.stat().st_size} B)" for p in sorted(outdir.iterdir())))
    path = outdir / "summary.txt"
    path.write_text("\n".join(lines) + "\n")
    return path


def _cap_file(path: Path) -> None:
    """No file over the loan's limit of what comes back: text keeps its head and tail; anything else goes."""
    if path.stat().st_size <= MAX_FILE_BYTES:
        return
    if path.suffix in (".txt", ".log", ".json", ".csv", ".xml"):
        path.write_text(_capped_text(path, MAX_FILE_BYTES - 4096))
    else:
        path.unlink()


def gpu_present() -> bool:
    """Asked in a child process, so that this one never initialises CUDA (the stages do, one at a time)."""
    code = "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 3)"
    return subprocess.run([sys.executable, "-c", code], env=_env(False), cwd=REPO).returncode == 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="scripts/device-check", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("outdir", type=Path, nargs="?")
    ap.add_argument("--dry-run", action="store_true", default=os.environ.get("DEVICE_CHECK_DRY_RUN") == "1",
                    help="fake the GPU check and shorten every stage (CPU stand-ins): tests the plumbing")
    ap.add_argument("--probe", type=Path, help=argparse.SUPPRESS)  # the probe stage's own entry point
    args = ap.parse_args(argv)
    if args.probe:
        from microbench.devtools.probe import write_probe

        return write_probe(args.probe, dry=args.dry_run)
    if args.outdir is None:
        ap.error("OUTDIR is required")
    deadline_s = float(os.environ.get("DEVICE_CHECK_DEADLINE_S", DRY_DEADLINE_S if args.dry_run else DEADLINE_S))
    deadline_s = min(deadline_s, DEADLINE_S)
    if not args.dry_run and not gpu_present():
        print("device-check: PyTorch sees no CUDA or ROCm device here; nothing was run (exit 3)", file=sys.stderr)
        return NO_GPU_EXIT
    args.outdir.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    results = run_all(args.outdir, args.dry_run, deadline_s)
    summary = write_summary(args.outdir, results, args.dry_run, deadline_s, time.monotonic() - start)
    print(summary.read_text())
    files = list(args.outdir.iterdir())
    if len(files) > MAX_FILES:  # OUTDIR held files before this run: the loan brings back only 8
        print(f"device-check: {len(files)} files in {args.outdir} (it was not empty); only {MAX_FILES} come back",
              file=sys.stderr)
    return 0 if all(r.rc == 0 for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
