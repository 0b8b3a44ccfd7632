"""python -m devtools.devicecheck OUTDIR (scripts/device-check): one prepared run for a short GPU loan.

Stages run under ONE global deadline (at most 8 minutes of a 15-minute loan that loses a few to start-up); each
has a cap, and the caps add up to less than the deadline, so every stage gets its whole cap. A stage still
running at its limit gets SIGINT, so that what it measured is written (pytest writes its JUnit report, the
roofline its rows and plot), then, after a grace period, SIGTERM and SIGKILL to its process group. Every stage
is its own process: a device fault in one (the unverified wgmma kernel runs alone) cannot poison the others.
When device-check itself is stopped (Ctrl-C, SIGTERM, SIGHUP) the running stage is stopped the same way, and a
stage dies with device-check even when device-check is killed outright. Nothing is installed on the machine:
the stages run from this source tree (PYTHONPATH) with what it has, plus the wheels of `.whl/`
(scripts/gpu-wheels: the dependencies the image lacks) installed with pip --target into a temporary folder,
and with autotuning off (DAWNSCOPE_AUTOTUNE=0: default configurations, a few compiles). The static inspection
is not a stage: it is CPU work that CI runs on the image's own toolchain (.ci/run).

OUTDIR receives at most 8 files of at most 16 MiB, summary.txt written last:
    probe.json  results.json  results.csv  roofline.png  gpu-tests.xml  ncu.csv  stages.log  summary.txt
gpu-tests.xml is merged as each test stage ends, so a run cut short keeps what its finished stages found.

Resume: a second run into the same OUTDIR runs only the stages the first did not finish (stages.log records
each stage as it ends; one stopped at its limit or never reached runs again). A new OUTDIR runs everything.

Without a GPU it exits 3 and creates nothing. `--dry-run` (or DEVICE_CHECK_DRY_RUN=1) fakes the GPU check
and shortens every stage (CPU stand-ins for the GPU stages), to test the plumbing on a CPU: order, the
deadline, SIGINT, the files. DEVICE_CHECK_DEADLINE_S overrides the global deadline (seconds).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

from devtools.ncucheck import evidence_lines
from devtools.probe import write_probe
from devtools.wheels import load_image

REPO = Path(__file__).resolve().parents[1]
DEADLINE_S = 480.0  # the whole run; the loan is 15 minutes, machine start and transfers included
DRY_DEADLINE_S = 180.0
SUMMARY_RESERVE_S = 10.0  # kept back from the last stage for merging files and the summary
MAX_FILES = 8
MAX_FILE_BYTES = 16 * 2**20
LOG_CAP_BYTES = 2 * 2**20  # per stage, in stages.log: the head and the tail are kept
NO_GPU_EXIT = 3
WHEELS_DIR = REPO / ".whl"


@dataclass
class Stage:
    name: str
    cap_s: float  # at most this long (before the global deadline cuts it shorter)
    cmd: list[str]  # run on the GPU machine
    dry_cmd: list[str]  # run in a dry run, on a CPU
    dry_cap_s: float  # the same in a dry run: long enough to start up and be stopped mid-work
    outputs: dict[str, str] = field(default_factory=dict)  # file in the stage's work dir -> name in OUTDIR
    junit: bool = False  # the stage writes junit.xml in its work dir (merged into gpu-tests.xml)
    every_run: bool = False  # runs again on a resumed run (its effect does not outlive the run)


def _py(*args: str) -> list[str]:
    return [sys.executable, *args]


def _pytest(select: str, *paths: str, gpu: bool = True) -> list[str]:
    """pytest on the named files only (collecting the whole suite costs 8 s of CPU, and one collection error
    would leave the stage with no test): a file that fails to import is reported, the others still run."""
    marks = ["-m", "gpu"] if gpu else ["-m", "interpreter or inspect"]
    return _py(
        "-m",
        "pytest",
        "-rA",
        "-p",
        "no:cacheprovider",
        "--continue-on-collection-errors",
        "--junitxml",
        "{work}/junit.xml",
        *marks,
        "-k",
        select,
        *paths,
    )


# Conv first: the larger, never-run family is not the one the cap cuts.
_TRITON_TESTS = ("tests/test_triton_conv.py", "tests/test_triton_gemm.py")
_CUDA_TESTS = ("tests/test_cuda_kernels.py", "tests/test_cuda_wrappers.py")
# Every other test file with a `gpu`-marked test (tests/test_gpu_paths_stage_budgets.py checks none is missing).
_OTHER_GPU_TESTS = ("tests/test_gpu_core.py", "tests/test_decompose.py")
# DAWNSCOPE_AUTOTUNE=0 (_env): an "autotuned" test would run the default configuration a second time. bf16 and
# tf32 only: about half of the 71 default-configuration compiles (devtools/README.md, the plan); fp16 and fp32 run
# through the same Triton kernels at the quick profile's shapes there.
_NO_AUTOTUNE = "not wgmma and not autotuned and (bf16 or tf32)"
NCU_MARGIN_S = 15  # of the counter stage's cap, after ncu's own deadline: merging the exports, the verdicts


def _wheels_stage(wheels_dir: Path, python: str | None = None) -> list[Stage]:
    """pip --target of the carried wheels into this run's temporary site folder (on every stage's PYTHONPATH).
    None where there are no wheels or this Python is not the image's they were built for (a 3.12 wheel of
    msgspec in front of a 3.11 environment's own would hide it)."""
    wheels = sorted(str(w) for w in wheels_dir.glob("*.whl"))
    if python is None:
        python = f"{sys.version_info.major}.{sys.version_info.minor}"
    if not wheels or python != load_image()["python"]:
        return []
    cmd = _py(
        "-m",
        "pip",
        "install",
        "-q",
        "--no-index",
        "--no-deps",
        "--no-compile",
        "--no-cache-dir",
        "--upgrade",
        "--target",
        "{site}",
        *wheels,
    )
    return [Stage("carried wheels", 10, cmd, cmd, 30, every_run=True)]


def stages(wheels_dir: Path = WHEELS_DIR) -> list[Stage]:
    """In order, each cap about twice the stage's expected time (devtools/README.md, "The device check's plan": the
    compile and test counts behind each estimate), adding up to 470 s, under the deadline less the summary's
    reserve. Our CUDA C++ kernels run first in their own process (their cubins, compiled once, are kept on
    disk for every later stage); the unverified wgmma kernel runs last and alone, so that a hang there costs
    no other stage."""
    quick = ["-m", "microbench.roofline", "--profile", "quick", "--out", "{work}"]
    roofline_files = {f: f for f in ("results.json", "results.csv", "roofline.png")}
    ncu_cap = 80
    ncu = ["-m", "devtools.ncucheck", "{work}/ncu.csv", "--deadline-s", str(ncu_cap - NCU_MARGIN_S)]
    return [
        *_wheels_stage(wheels_dir),
        Stage(
            "probe",
            20,
            _py("-m", "devtools.devicecheck", "--probe", "{work}/probe.json"),
            _py("-m", "devtools.devicecheck", "--probe", "{work}/probe.json", "--dry-run"),
            40,
            {"probe.json": "probe.json"},
        ),
        Stage(
            "gpu tests: cuda c++",
            55,
            _pytest("not wgmma", *_CUDA_TESTS),
            _pytest("not wgmma", *_CUDA_TESTS, gpu=False),
            10,
            junit=True,
        ),
        Stage(
            "quick profile", 140, _py(*quick, "--device", "cuda"), _py(*quick, "--device", "cpu"), 25, roofline_files
        ),
        Stage("hardware counters (ncu)", ncu_cap, _py(*ncu), _py(*ncu, "--dry-run"), 15, {"ncu.csv": "ncu.csv"}),
        Stage(
            "gpu tests: triton",
            100,
            _pytest(_NO_AUTOTUNE, *_TRITON_TESTS),
            _pytest(_NO_AUTOTUNE, *_TRITON_TESTS, gpu=False),
            10,
            junit=True,
        ),
        Stage(
            "gpu tests: the rest",
            40,
            _pytest("not wgmma", *_OTHER_GPU_TESTS),
            _pytest("cdna", "tests/test_inspect_triton.py", gpu=False),
            10,
            junit=True,
        ),
        Stage(
            "wgmma (unverified kernel, alone)",
            25,
            _pytest("wgmma", *_CUDA_TESTS),
            _pytest("wgmma", *_CUDA_TESTS, gpu=False),
            10,
            junit=True,
        ),
    ]


@dataclass
class StageResult:
    name: str
    rc: int | None
    elapsed_s: float
    limit_s: float
    stopped: str = ""  # "SIGINT at the limit", "SIGTERM", "SIGKILL", or "" when it ended by itself
    skipped: str = ""
    earlier: bool = False  # finished in an earlier run into the same OUTDIR (not run again)

    @property
    def ok(self) -> bool:
        return self.rc == 0 and not self.skipped


def _child_setup() -> None:
    # SIGINT back to its default in the child: a shell starting this in the background ignores it, and a
    # Python that starts with SIGINT ignored never raises KeyboardInterrupt (no report, no plot).
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    try:  # Linux: the stage dies with device-check even when device-check is killed outright (SIGKILL)
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _stop(proc: subprocess.Popen, grace_s: float, why: str) -> str:
    """SIGINT to the stage's process, then SIGTERM and SIGKILL to its whole group, `grace_s` apart."""
    stopped = why
    proc.send_signal(signal.SIGINT)
    for sig, name in ((signal.SIGTERM, "SIGTERM"), (signal.SIGKILL, "SIGKILL")):
        try:
            proc.wait(timeout=grace_s)
            break
        except subprocess.TimeoutExpired:
            stopped = f"SIGINT, then {name}"
            os.killpg(proc.pid, sig)
    proc.wait()
    return stopped


def run_stage(
    argv: list[str], limit_s: float, log_path: Path, env: dict, grace_s: float
) -> tuple[int | None, float, str]:
    """Run one stage in its own process group; at `limit_s` send it SIGINT (the process only: a child such
    as ptxas finishes its file), then SIGTERM and SIGKILL to the group after `grace_s` each. Whatever
    happens to device-check meanwhile, the group is gone when this returns."""
    start = time.monotonic()
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            argv,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=REPO,
            env=env,
            start_new_session=True,
            preexec_fn=_child_setup,
        )
        stopped = ""
        try:
            proc.wait(timeout=max(0.1, limit_s))
        except subprocess.TimeoutExpired:
            stopped = _stop(proc, grace_s, "SIGINT at the limit")
        except KeyboardInterrupt:  # Ctrl-C, SIGTERM or SIGHUP on device-check
            stopped = _stop(proc, grace_s, "SIGINT (device-check interrupted)")
        finally:
            _kill_group(proc)
    return proc.returncode, time.monotonic() - start, stopped


def _kill_group(proc: subprocess.Popen) -> None:
    """The stage's leftovers (a rank, ncu's target, ptxas) do not outlive it; nor does it outlive us."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    if proc.poll() is None:
        proc.wait()


def _capped_text(path: Path, cap: int) -> str:
    data = path.read_bytes() if path.exists() else b""
    if len(data) > cap:
        data = data[: cap // 2] + f"\n[... {len(data) - cap} bytes left out ...]\n".encode() + data[-cap // 2 :]
    return data.decode(errors="replace")


def merge_junit(stage: str, junit: Path, out: Path) -> None:
    """Put one pytest stage's JUnit report into `out` (gpu-tests.xml), in place of that stage's earlier one;
    written to a temporary file and renamed, so a killed run leaves the previous complete file."""
    root = ET.Element("testsuites")
    try:
        root.extend(s for s in ET.parse(out).getroot() if s.get("name") != stage)
    except (OSError, ET.ParseError):
        pass
    try:
        tree = ET.parse(junit).getroot()
    except (OSError, ET.ParseError):
        return  # the stage wrote no report (stopped before pytest started): the stage log says why
    for suite in [tree] if tree.tag == "testsuite" else list(tree):
        suite.set("name", stage)
        root.append(suite)
    tmp = out.with_name(out.name + ".tmp")
    ET.ElementTree(root).write(tmp, encoding="utf-8", xml_declaration=True)
    os.replace(tmp, out)


# The header stages.log writes as each stage ends; a resumed run reads it back.
_HEADER = re.compile(
    r"^==== stage \d+: (?P<name>.+) \(limit (?P<limit>\d+) s(?P<dry>, dry run)?\): rc (?P<rc>-?\d+|None), "
    r"(?P<elapsed>[\d.]+) s(?:, (?P<stopped>.+))?$"
)


def _header(i: int, name: str, limit_s: float, dry: bool, rc: int | None, elapsed_s: float, stopped: str) -> str:
    return (
        f"==== stage {i}: {name} (limit {limit_s:.0f} s{', dry run' if dry else ''}): rc {rc}, {elapsed_s:.1f} s"
        f"{', ' + stopped if stopped else ''}"
    )


def finished_stages(outdir: Path, dry: bool) -> dict[str, StageResult]:
    """The stages an earlier run into `outdir` finished (ended by themselves, in the same mode): the last
    record of each name in stages.log."""
    done: dict[str, StageResult] = {}
    try:
        text = (outdir / "stages.log").read_text(errors="replace")
    except OSError:
        return done
    for line in text.splitlines():
        m = _HEADER.match(line)
        if m is None or bool(m["dry"]) != dry:
            continue
        rc = None if m["rc"] == "None" else int(m["rc"])
        if m["stopped"] or rc is None:
            done.pop(m["name"], None)
        else:
            done[m["name"]] = StageResult(m["name"], rc, float(m["elapsed"]), float(m["limit"]), earlier=True)
    return done


def _env(dry: bool, site: Path | None = None) -> dict:
    env = dict(os.environ)
    paths = [str(REPO), *([str(site)] if site else []), *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env.update(PYTHONUNBUFFERED="1", DAWNSCOPE_AUTOTUNE="0", MPLBACKEND="Agg")
    if site is not None:  # one cubin cache for the run's stages (kernels/cuda_kernels.py): compiled once
        env.setdefault("DAWNSCOPE_CUBIN_CACHE", str(site.parent / "cubins"))
    if dry:
        env.pop("DEVICE_CHECK_DRY_RUN", None)
    return env


def _finish_stage(st: Stage, work: Path, outdir: Path) -> None:
    """The stage's files into OUTDIR at once: a run cut short later keeps them."""
    for src, dst in st.outputs.items():
        if (work / src).exists():
            shutil.copyfile(work / src, outdir / dst)
    if st.junit:
        merge_junit(st.name, work / "junit.xml", outdir / "gpu-tests.xml")


@dataclass
class _Run:
    """One device-check run: where it writes, its clock and its limits."""

    outdir: Path
    dry: bool
    deadline_s: float  # the summary's reserve already taken off
    grace_s: float
    work_root: Path
    log: object
    t0: float = field(default_factory=time.monotonic)

    def stage(self, i: int, st: Stage, env: dict) -> StageResult:
        left = self.deadline_s - (time.monotonic() - self.t0) - self.grace_s
        limit = min(st.dry_cap_s if self.dry else st.cap_s, left)
        if limit < 1.0:
            return StageResult(st.name, None, 0.0, 0.0, skipped="no time left before the deadline")
        work = self.work_root / f"stage{i}"
        work.mkdir()
        argv = [
            a.replace("{work}", str(work)).replace("{site}", str(self.work_root / "site"))
            for a in (st.dry_cmd if self.dry else st.cmd)
        ]
        rc, elapsed, stopped = run_stage(argv, limit, work / "output.txt", env, self.grace_s)
        _finish_stage(st, work, self.outdir)
        self.log.write(_header(i, st.name, limit, self.dry, rc, elapsed, stopped) + f"\n$ {' '.join(argv)}\n")
        self.log.write(_capped_text(work / "output.txt", LOG_CAP_BYTES) + "\n")
        self.log.flush()
        return StageResult(st.name, rc, elapsed, limit, stopped)


def run_all(
    outdir: Path, dry: bool, deadline_s: float, plan: list[Stage] | None = None, grace_s: float | None = None
) -> list[StageResult]:
    """The plan's stages in order, each finished one's files in OUTDIR at once; those an earlier run into
    OUTDIR finished are not run again."""
    plan = stages() if plan is None else plan
    if grace_s is None:  # after SIGINT: pytest writes its report, the roofline its rows and plot
        grace_s = 8.0 if dry else 20.0
    reserve = 2.0 if dry else SUMMARY_RESERVE_S
    earlier = finished_stages(outdir, dry)
    results: list[StageResult] = []
    work_root = Path(tempfile.mkdtemp(prefix="device-check-"))
    env = _env(dry, work_root / "site")
    try:
        with open(outdir / "stages.log", "a") as log:
            run = _Run(outdir, dry, deadline_s - reserve, grace_s, work_root, log)
            if earlier:
                log.write(f"==== resumed: {len(earlier)} stages finished earlier ({', '.join(earlier)})\n")
            for i, st in enumerate(plan, start=1):
                results.append(earlier[st.name] if st.name in earlier and not st.every_run else run.stage(i, st, env))
                if results[-1].stopped.endswith("(device-check interrupted)"):
                    break  # Ctrl-C on device-check itself: keep what the stages wrote, run no more
    except KeyboardInterrupt:  # between two stages: what finished is in OUTDIR already
        results.append(StageResult("(device-check interrupted)", None, 0.0, 0.0, skipped="interrupted"))
    finally:
        shutil.rmtree(work_root, ignore_errors=True)
    return results


def _quick_rows(outdir: Path) -> list[str]:
    try:
        doc = json.loads((outdir / "results.json").read_text())
    except (OSError, ValueError) as e:
        return [f"quick profile: no results ({type(e).__name__})"]
    hw = doc.get("hardware", {})
    lines = [
        f"quick profile on {hw.get('name', '?')} {hw.get('arch', '?')}: {len(doc.get('results', []))} rows"
        + (" (interrupted)" if doc.get("interrupted") else "")
    ]
    lines.append(f"{'op':18} {'shape':28} {'dtype':5} {'provider':10} {'status':8} {'TFLOP/s':>9}  TC")
    for r in doc.get("results", []):
        tf = r.get("tflops")
        lines.append(
            f"{r.get('op', ''):18} {str(r.get('shape', ''))[:28]:28} {r.get('dtype', ''):5} "
            f"{r.get('provider', ''):10} {r.get('status', ''):8} {'-' if tf is None else format(tf, '9.1f'):>9}  "
            f"{r.get('tensor_cores', '')}"
        )
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


def _state(r: StageResult) -> str:
    if r.earlier:
        return f"rc {r.rc}, finished in an earlier run into this OUTDIR"
    return r.skipped or (f"rc {r.rc}" + (f", {r.stopped}" if r.stopped else ""))


def write_summary(outdir: Path, results: list[StageResult], dry: bool, deadline_s: float, elapsed_s: float) -> Path:
    lines = []
    if dry:
        lines.append("DRY RUN on a CPU: the GPU check was faked and every stage shortened; no figure here is a GPU's.")
    lines.append(f"device-check: {len(results)} stages in {elapsed_s:.0f} s (deadline {deadline_s:.0f} s)")
    for r in results:
        lines.append(f"  {r.name:34} {r.elapsed_s:6.1f} s of {r.limit_s:5.0f} s  {_state(r)}")
    lines.append(_test_counts(outdir))
    lines += _quick_rows(outdir)
    if (outdir / "ncu.csv").exists():
        lines += evidence_lines(outdir / "ncu.csv")
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
    ap = argparse.ArgumentParser(
        prog="scripts/device-check", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("outdir", type=Path, nargs="?")
    ap.add_argument(
        "--dry-run",
        action="store_true",
        default=os.environ.get("DEVICE_CHECK_DRY_RUN") == "1",
        help="fake the GPU check and shorten every stage (CPU stand-ins): tests the plumbing",
    )
    ap.add_argument("--probe", type=Path, help=argparse.SUPPRESS)  # the probe stage's own entry point
    args = ap.parse_args(argv)
    if args.probe:
        return write_probe(args.probe, dry=args.dry_run)
    if args.outdir is None:
        ap.error("OUTDIR is required")
    deadline_s = float(os.environ.get("DEVICE_CHECK_DEADLINE_S", DRY_DEADLINE_S if args.dry_run else DEADLINE_S))
    deadline_s = min(deadline_s, DEADLINE_S)
    if not args.dry_run and not gpu_present():
        print("device-check: PyTorch sees no CUDA or ROCm device here; nothing was run (exit 3)", file=sys.stderr)
        return NO_GPU_EXIT
    args.outdir.mkdir(parents=True, exist_ok=True)
    _interrupt_on_signals()
    start = time.monotonic()
    results = run_all(args.outdir, args.dry_run, deadline_s)
    summary = write_summary(args.outdir, results, args.dry_run, deadline_s, time.monotonic() - start)
    print(summary.read_text())
    files = list(args.outdir.iterdir())
    if len(files) > MAX_FILES:  # OUTDIR held other files before this run: the loan brings back only 8
        print(
            f"device-check: {len(files)} files in {args.outdir} (it was not empty); only {MAX_FILES} come back",
            file=sys.stderr,
        )
    return 0 if all(passed(r, args.dry_run) for r in results) else 1


def passed(r: StageResult, dry: bool) -> bool:
    """A stage passed: it ended by itself with exit 0; in a dry run, being stopped at its limit is the
    point (the CPU stand-ins are cut short on purpose), so that passes too, whether SIGINT ended it or, on a
    loaded machine where SIGINT came while the stand-in was still importing torch, the SIGTERM after the grace.
    A skipped stage never does."""
    return r.ok or (dry and (r.stopped == "SIGINT at the limit" or (r.stopped or "").startswith("SIGINT, then")))


def _interrupt_on_signals() -> None:
    """SIGTERM and SIGHUP (a closed session, a timeout) stop device-check as Ctrl-C does: the running
    stage is stopped, its group killed, the summary written."""

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, interrupt)


if __name__ == "__main__":
    sys.exit(main())
