"""The README's notebook snippet pasted into a script (no `if __name__ == "__main__":`) or piped to `python -`:
Job's spawned readers re-ran that script's top level (its prints, its training), which once ended in
BrokenProcessPool and a traceback per reader, then in the readers quitting and the ranks read in the caller. Now
the readers start without the caller's script (comm/engine.py _main_not_rerun): its top level runs once, in the
caller, and the ranks are still read in reader processes."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.conftest import REPO, TRACES, needs_traces

SCRIPT = f"""import os
from microbench import Job
print("top level ran in", os.getpid())
j = Job([{str(TRACES / "a100_torchrec_rank0.json.gz")!r}, {str(TRACES / "a100_torchrec_rank1.json.gz")!r}], readers=2)
print("straggler", j.straggler_rank)
"""


def _run(args, **kw):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, cwd=REPO, timeout=600, **kw)


@needs_traces
def test_job_at_a_scripts_top_level(tmp_path):
    script = tmp_path / "nb.py"
    script.write_text(SCRIPT)
    r = _run([str(script)])
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) == 2 and lines[0].startswith("top level ran in") and lines[1] == "straggler 1"
    assert "Traceback" not in r.stderr and "read in this process" not in r.stderr


@needs_traces
def test_job_in_a_script_read_from_stdin():
    r = _run(["-"], input=SCRIPT)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[1:] == ["straggler 1"]
    assert "Traceback" not in r.stderr
