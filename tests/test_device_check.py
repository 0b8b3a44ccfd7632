"""scripts/device-check: refuses honestly where there is no GPU (exit 3, nothing created), and its plumbing,
on a CPU: stages in order under one deadline, each stopped with SIGINT at its limit so that what it did is
written (pytest's JUnit report), at most 8 files of at most 16 MiB, the summary last."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET

import pytest
import torch

from microbench.devtools import devicecheck as dc

from .conftest import REPO


def test_script_is_valid_bash():
    subprocess.run(["bash", "-n", str(REPO / "scripts" / "device-check")], check=True)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU: the script would really run")
def test_refuses_without_gpu_and_creates_nothing(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "DEVICE_CHECK_DRY_RUN"}
    r = subprocess.run([str(REPO / "scripts" / "device-check"), str(tmp_path / "out")], capture_output=True,
                       text=True, timeout=120, env=env)
    assert r.returncode == 3 and "no CUDA or ROCm device" in r.stderr
    assert not (tmp_path / "out").exists()  # nothing that could pass for a GPU result


def _script(tmp_path, name: str, body: str) -> list[str]:
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(body))
    return [sys.executable, str(path)]


def test_stages_in_order_stopped_with_sigint_and_their_output_kept(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    quick = _script(tmp_path, "quick", "import sys; open(sys.argv[1] + '/a.txt', 'w').write('done')")
    patient = _script(tmp_path, "patient", """
        import sys, time
        open(sys.argv[1] + '/rows.txt', 'w').write('row 1\\n')
        try:
            time.sleep(60)
        except KeyboardInterrupt:  # as the roofline does: keep what was measured, then stop
            open(sys.argv[1] + '/rows.txt', 'a').write('interrupted\\n')
            sys.exit(130)
        """)
    stubborn = _script(tmp_path, "stubborn", "import signal, time; signal.signal(signal.SIGINT, signal.SIG_IGN); time.sleep(60)")
    (tmp_path / "test_two.py").write_text("import time\ndef test_fast(): pass\ndef test_slow(): time.sleep(60)\n")
    pytest_cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--junitxml", "{work}/junit.xml",
                  str(tmp_path / "test_two.py")]
    plan = [dc.Stage("quick", 30, [], [*quick, "{work}"], 30, {"a.txt": "a.txt"}),
            dc.Stage("patient", 30, [], [*patient, "{work}"], 2, {"rows.txt": "rows.txt"}),
            dc.Stage("pytest", 30, [], pytest_cmd, 20, junit=True),  # time to start pytest on a loaded machine
            dc.Stage("stubborn", 30, [], stubborn, 1)]
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


def test_the_deadline_skips_what_no_longer_fits(tmp_path):
    """A stage runs at least until its limit, so after a 2 s stage no second stage fits a 5.5 s deadline
    (2 s kept for the summary, 1 s of grace): it is skipped and says why. Only lower bounds of time here."""
    sleeper = _script(tmp_path, "sleeper", "import time; time.sleep(60)")
    plan = [dc.Stage("first", 30, [], sleeper, 2), dc.Stage("late", 30, [], sleeper, 2)]
    first, late = dc.run_all(tmp_path, dry=True, deadline_s=5.5, plan=plan, grace_s=1)
    assert first.stopped.startswith("SIGINT") and first.limit_s == 2
    assert late.rc is None and late.skipped == "no time left before the deadline"


def test_dry_run_end_to_end(tmp_path):
    out = tmp_path / "out"
    env = {**os.environ, "DEVICE_CHECK_DEADLINE_S": "30"}
    env.pop("PYTHONPATH", None)  # the script sets it: it runs from the source tree, installed or not
    r = subprocess.run([str(REPO / "scripts" / "device-check"), "--dry-run", str(out)], capture_output=True,
                       text=True, timeout=120, env=env)
    assert r.returncode in (0, 1), r.stderr[-2000:]
    files = sorted(out.iterdir(), key=lambda p: p.stat().st_mtime_ns)
    assert 2 <= len(files) <= dc.MAX_FILES and all(p.stat().st_size <= dc.MAX_FILE_BYTES for p in files)
    assert files[-1].name == "summary.txt"  # written last
    summary = (out / "summary.txt").read_text()
    assert summary.startswith("DRY RUN on a CPU")
    names = [s.name for s in dc.stages()]
    assert names[-1].startswith("wgmma") and names[0] == "probe"
    positions = [summary.index(n) for n in names]
    assert positions == sorted(positions)  # reported in the order they ran
    probe = json.loads((out / "probe.json").read_text())
    assert probe["dry_run"] is True and probe["device"]["fingerprint"]["kind"] == "cpu"


def test_probe_names_the_declared_dependencies_this_environment_lacks(tmp_path):
    from microbench.devtools.probe import missing_dependencies

    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[project]\nname = "x"\ndependencies = ["numpy>=1.26", "pytest[testing] >=8", '
                         '"surely-not-a-package-here>=1.0; python_version >= \'3.10\'"]\n')
    assert missing_dependencies(pyproject) == ["surely-not-a-package-here"]
