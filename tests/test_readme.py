"""The README's set-up commands are what CI runs (so a newcomer's copy-paste is what we test)."""

from __future__ import annotations

import re

from .conftest import REPO


def _blocks(text: str) -> list[list[str]]:
    return [[ln.strip() for ln in b.strip().splitlines()] for b in re.findall(r"```bash\n(.*?)```", text, re.S)]


def test_ci_runs_the_readme_test_commands():
    readme = (REPO / "README.md").read_text()
    blocks = _blocks(readme)
    main_job = next(b for b in blocks if any("microbench.roofline" in ln for ln in b))
    tests = next(b for b in blocks if any("pytest" in ln for ln in b) and b is not main_job)
    ci = (REPO / ".ci" / "run").read_text().splitlines()
    # every line but the venv's (CI puts its fresh environment elsewhere)
    for line in tests:
        if not line.startswith(("python3 -m venv", "#")):
            assert line in ci, f".ci/run does not run README's {line!r}"
    assert main_job[1] in tests  # both set-ups install the same way
