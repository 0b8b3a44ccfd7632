"""The README's notebook snippet pasted into a script (no `if __name__ == "__main__":`) or piped to `python -`:
Job's spawned readers re-run that script, which once ended in BrokenProcessPool and a traceback per reader. Now
the readers end quietly and the ranks are read in the caller, with one note line; the answer is the same."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.conftest import REPO, TRACES, needs_traces

SCRIPT = f"""from microbench import Job
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
    assert r.stdout.split() == ["straggler", "1"]  # printed once: the readers never reach the print
    assert "Traceback" not in r.stderr and "read in this process" in r.stderr


@needs_traces
def test_job_in_a_script_read_from_stdin():
    r = _run(["-"], input=SCRIPT)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["straggler", "1"]
    assert "Traceback" not in r.stderr
