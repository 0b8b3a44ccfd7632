"""scripts/device-check: refuses honestly where there is no GPU (exit 3, nothing created), and its plumbing,
on a CPU: stages in order under one deadline, each stopped with SIGINT at its limit so that what it did is
written (pytest's JUnit report, merged into gpu-tests.xml as each stage ends), at most 8 files of at most
16 MiB, the summary last; stage processes that do not outlive device-check; a second run into the same
OUTDIR that runs only what the first did not finish; the carried wheels installed for the stages; the plan
within its 8 minutes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import xml.etree.ElementTree as ET

import pytest
import torch

from devtools import devicecheck as dc

from .conftest import REPO


def test_script_is_valid_bash():
    subprocess.run(["bash", "-n", str(REPO / "scripts" / "device-check")], check=True)


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU: the script would really run")
def test_refuses_without_gpu_and_creates_nothing(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "DEVICE_CHECK_DRY_RUN"}
    r = subprocess.run(
        [str(REPO / "scripts" / "device-check"), str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert r.returncode == 3 and "no CUDA or ROCm device" in r.stderr
    assert not (tmp_path / "out").exists()  # nothing that could pass for a GPU result


def _script(tmp_path, name: str, body: str) -> list[str]:
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(body))
    return [sys.executable, str(path)]


@pytest.mark.slow
def test_stages_in_order_stopped_with_sigint_and_their_output_kept(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    quick = _script(tmp_path, "quick", "import sys; open(sys.argv[1] + '/a.txt', 'w').write('done')")
    patient = _script(
        tmp_path,
        "patient",
        """
        import sys, time
        open(sys.argv[1] + '/rows.txt', 'w').write('row 1\\n')
        try:
            time.sleep(60)
        except KeyboardInterrupt:  # as the roofline does: keep what was measured, then stop
            open(sys.argv[1] + '/rows.txt', 'a').write('interrupted\\n')
            sys.exit(130)
        """,
    )
    stubborn = _script(
        tmp_path, "stubborn", "import signal, time; signal.signal(signal.SIGINT, signal.SIG_IGN); time.sleep(60)"
    )
    (tmp_path / "test_two.py").write_text("import time\ndef test_fast(): pass\ndef test_slow(): time.sleep(60)\n")
    pytest_cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "--junitxml",
        "{work}/junit.xml",
        str(tmp_path / "test_two.py"),
    ]
    plan = [
        dc.Stage("quick", 30, [], [*quick, "{work}"], 30, {"a.txt": "a.txt"}),
        dc.Stage("patient", 30, [], [*patient, "{work}"], 2, {"rows.txt": "rows.txt"}),
        dc.Stage("pytest", 30, [], pytest_cmd, 20, junit=True),  # time to start pytest on a loaded machine
        dc.Stage("stubborn", 30, [], stubborn, 1),
    ]
    # a grace long enough for pytest to write its report after SIGINT on a loaded machine
    results = dc.run_all(out, dry=True, deadline_s=300, plan=plan, grace_s=10)
    assert [r.name for r in results] == ["quick", "patient", "pytest", "stubborn"]
    quick_r, patient_r, pytest_r, stubborn_r = results
    assert quick_r.rc == 0 and not quick_r.stopped and (out / "a.txt").read_text() == "done"
    assert patient_r.stopped == "SIGINT at the limit" and patient_r.rc == 130
    assert (out / "rows.txt").read_text() == "row 1\ninterrupted\n"
    assert pytest_r.stopped == "SIGINT at the limit"
    suites = ET.parse(out / "gpu-tests.xml").getroot()
    assert [s.get("name") for s in suites] == ["pytest"]
    assert [c.get("name") for c in suites.iter("testcase") if c.get("name")][0] == "test_fast"
    assert stubborn_r.stopped == "SIGINT, then SIGTERM"
    assert "==== stage 3: pytest" in (out / "stages.log").read_text()


@pytest.mark.slow
def test_the_deadline_skips_what_no_longer_fits(tmp_path):
    """A stage runs at least until its limit, so after a 2 s stage no second stage fits a 5.5 s deadline
    (2 s kept for the summary, 1 s of grace): it is skipped and says why. Only lower bounds of time here."""
    sleeper = _script(tmp_path, "sleeper", "import time; time.sleep(60)")
    plan = [dc.Stage("first", 30, [], sleeper, 2), dc.Stage("late", 30, [], sleeper, 2)]
    first, late = dc.run_all(tmp_path, dry=True, deadline_s=5.5, plan=plan, grace_s=1)
    assert first.stopped.startswith("SIGINT") and first.limit_s == 2
    assert late.rc is None and late.skipped == "no time left before the deadline"


@pytest.mark.slow
def test_dry_run_end_to_end(tmp_path):
    out = tmp_path / "out"
    env = {**os.environ, "DEVICE_CHECK_DEADLINE_S": "30"}
    env.pop("PYTHONPATH", None)  # the script sets it: it runs from the source tree, installed or not
    r = subprocess.run(
        [str(REPO / "scripts" / "device-check"), "--dry-run", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert r.returncode in (0, 1), r.stderr[-2000:]
    files = sorted(out.iterdir(), key=lambda p: p.stat().st_mtime_ns)
    assert 2 <= len(files) <= dc.MAX_FILES and all(p.stat().st_size <= dc.MAX_FILE_BYTES for p in files)
    assert files[-1].name == "summary.txt"  # written last
    summary = (out / "summary.txt").read_text()
    assert summary.startswith("DRY RUN on a CPU")
    names = [s.name for s in dc.stages()]
    assert names[0] in ("carried wheels", "probe") and "hardware counters (ncu)" in names
    assert names[-1] == "wgmma (unverified kernel, alone)"  # a hang there costs no other stage
    positions = [summary.index(n) for n in names]
    assert positions == sorted(positions)  # reported in the order they ran
    probe = json.loads((out / "probe.json").read_text())
    assert probe["dry_run"] is True and probe["device"]["fingerprint"]["kind"] == "cpu"


def test_probe_names_the_declared_dependencies_this_environment_lacks(tmp_path):
    from devtools.probe import missing_dependencies

    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text(
        '[project]\nname = "x"\ndependencies = ["numpy>=1.26", "pytest[testing] >=8", '
        "\"surely-not-a-package-here>=1.0; python_version >= '3.10'\"]\n"
    )
    assert missing_dependencies(pyproject) == ["surely-not-a-package-here"]


def test_the_plan_fits_the_deadline():
    """Every stage gets its whole cap: the caps add up to less than the deadline less the summary's reserve."""
    plan = dc.stages()
    assert sum(st.cap_s for st in plan) <= dc.DEADLINE_S - dc.SUMMARY_RESERVE_S
    assert dc.DEADLINE_S <= 8 * 60
    assert len({st.name for st in plan}) == len(plan)
    outputs = [dst for st in plan for dst in st.outputs.values()]
    # the stages' files, gpu-tests.xml, stages.log and summary.txt: within what a loan brings back
    assert len(set(outputs)) + 3 <= dc.MAX_FILES


def _counter(tmp_path, name: str) -> list[str]:
    """A stage that counts its runs in a file outside OUTDIR (a shell: it starts at once on a loaded machine)."""
    return ["sh", "-c", f"printf x >> {tmp_path / (name + '.runs')}"]


@pytest.mark.slow
def test_a_second_run_into_the_same_outdir_runs_only_what_the_first_did_not_finish(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    plan = [
        dc.Stage("done", 30, [], _counter(tmp_path, "done"), 30),
        dc.Stage("cut", 30, [], ["sleep", "60"], 60),  # takes what is left of the first run's deadline
        dc.Stage("never reached", 30, [], _counter(tmp_path, "late"), 30),
        dc.Stage("every run", 30, [], _counter(tmp_path, "every"), 30, every_run=True),
    ]
    first = dc.run_all(out, dry=True, deadline_s=8, plan=plan, grace_s=1)
    assert first[0].rc == 0 and first[1].stopped and first[2].skipped and first[3].skipped
    plan[1] = dc.Stage("cut", 30, [], _counter(tmp_path, "cut"), 30)  # this time it can finish
    second = dc.run_all(out, dry=True, deadline_s=120, plan=plan, grace_s=1)
    assert [r.earlier for r in second] == [True, False, False, False] and all(r.rc == 0 for r in second)
    runs = {n: len((tmp_path / f"{n}.runs").read_text()) for n in ("done", "cut", "late", "every")}
    assert runs == {"done": 1, "cut": 1, "late": 1, "every": 1}
    third = dc.run_all(out, dry=True, deadline_s=120, plan=plan, grace_s=1)
    assert [r.earlier for r in third] == [True, True, True, False]  # a stage marked every_run always runs
    assert len((tmp_path / "every.runs").read_text()) == 2
    assert dc.finished_stages(out, dry=False) == {}  # a dry run's record never counts for a real run


@pytest.mark.slow
def test_gpu_tests_xml_is_merged_as_each_stage_ends(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (tmp_path / "test_one.py").write_text("def test_one(): pass\n")
    pytest_cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "--junitxml",
        "{work}/junit.xml",
        str(tmp_path / "test_one.py"),
    ]
    look = _script(
        tmp_path,
        "look",
        f"""
        import pathlib, xml.etree.ElementTree as ET
        xml = pathlib.Path({str(out / "gpu-tests.xml")!r})
        names = [s.get("name") for s in ET.parse(xml).getroot()] if xml.exists() else []
        pathlib.Path({str(tmp_path / "seen.txt")!r}).write_text(",".join(names))
        """,
    )
    plan = [dc.Stage("tests", 30, [], pytest_cmd, 60, junit=True), dc.Stage("look", 30, [], look, 30)]
    dc.run_all(out, dry=True, deadline_s=300, plan=plan, grace_s=5)
    assert (tmp_path / "seen.txt").read_text() == "tests"  # there before the next stage started
    dc.run_all(out, dry=True, deadline_s=300, plan=[dc.Stage("again", 30, [], pytest_cmd, 60, junit=True)], grace_s=5)
    suites = ET.parse(out / "gpu-tests.xml").getroot()
    assert [s.get("name") for s in suites] == ["tests", "again"]  # each stage's report once


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead: its parent has not reaped it yet
        return open(f"/proc/{pid}/stat").read().split(") ", 1)[1][0] != "Z"
    except OSError:
        return False


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_stage_processes_do_not_outlive_device_check(tmp_path, sig):
    """The stage runs in its own session (so that device-check alone decides when it gets SIGINT); stopped
    with SIGTERM, device-check takes the stage's whole group down; killed outright, the stage still dies."""
    pids = tmp_path / "pids.txt"
    stage = _script(
        tmp_path,
        "stage",
        f"""
        import os, subprocess, sys, time
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
        open({str(pids)!r}, "w").write(f"{{os.getpid()}} {{child.pid}}")
        time.sleep(120)
        """,
    )
    driver = _script(
        tmp_path,
        "driver",
        f"""
        from pathlib import Path
        from devtools import devicecheck as dc
        dc._interrupt_on_signals()
        plan = [dc.Stage("stage", 300, [], {stage!r}, 300)]
        dc.run_all(Path({str(tmp_path)!r}), dry=True, deadline_s=400, plan=plan, grace_s=2)
        """,
    )
    proc = subprocess.Popen(driver, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        for _ in range(1200):  # started on a loaded machine: up to 2 minutes
            if pids.exists() and len(pids.read_text().split()) == 2:
                break
            time.sleep(0.1)
        stage_pid, child_pid = map(int, pids.read_text().split())
        proc.send_signal(sig)
        proc.wait(timeout=60)
        gone = [p for p in (stage_pid, child_pid) if not _alive(p)]
        for _ in range(100):
            if stage_pid in gone:
                break
            time.sleep(0.1)
            gone = [p for p in (stage_pid, child_pid) if not _alive(p)]
        assert stage_pid in gone
        if sig == signal.SIGTERM:
            assert child_pid in gone  # the whole group
    finally:
        for p in (proc.pid,):
            if proc.poll() is None:
                os.kill(p, signal.SIGKILL)
        if pids.exists():
            for p in map(int, pids.read_text().split()):
                if _alive(p):
                    os.kill(p, signal.SIGKILL)


def _wheel(folder, name: str, version: str, module_source: str, requires: tuple[str, ...] = ()):
    """A minimal pure-Python wheel, written here (no network)."""
    import zipfile

    path = folder / f"{name}-{version}-py3-none-any.whl"
    info = f"{name}-{version}.dist-info"
    meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n" + "".join(
        f"Requires-Dist: {r}\n" for r in requires
    )
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"{name}.py", module_source)
        z.writestr(f"{info}/METADATA", meta)
        z.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        z.writestr(f"{info}/RECORD", "")
    return path


@pytest.mark.slow
def test_carried_wheels_are_installed_for_the_stages(tmp_path):
    wheels = tmp_path / "whl"
    wheels.mkdir()
    _wheel(wheels, "carried_probe_pkg", "1.0", "WHERE = 'carried'\n")
    out = tmp_path / "out"
    out.mkdir()
    use = _script(
        tmp_path,
        "use",
        f"""
        import carried_probe_pkg
        open({str(tmp_path / "used.txt")!r}, "w").write(carried_probe_pkg.WHERE)
        """,
    )
    plan = [*dc._wheels_stage(wheels, python="3.12"), dc.Stage("use", 30, [], use, 60)]  # the image's Python
    assert plan[0].name == "carried wheels" and plan[0].every_run
    results = dc.run_all(out, dry=True, deadline_s=300, plan=plan, grace_s=5)
    assert [r.rc for r in results] == [0, 0], (out / "stages.log").read_text()[-2000:]
    assert (tmp_path / "used.txt").read_text() == "carried"
    assert dc._wheels_stage(tmp_path / "none", python="3.12") == []  # no .whl/: nothing to install, no stage
    assert dc._wheels_stage(wheels, python="3.11") == []  # not the image's Python: its own packages serve
