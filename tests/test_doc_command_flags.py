"""The docs' command lines use the current flag spellings: docs/usage.md still showed `tta run ... --profile`,
`tta thresholds ... --plot th.png` and `trace` / `comm ranks ... --workers N` after the renames (each still works,
with a notice, for one release), and the trace integrity line said `(or --steps)`."""

from __future__ import annotations

import re

from microbench.core.args import RENAMED_FLAGS
from tests.conftest import REPO

DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def _command_lines():
    """(file, line, command, the rest of the line) for every line that runs a command with renamed flags."""
    for path in DOCS:
        for line in path.read_text().splitlines():
            for cmd in RENAMED_FLAGS:
                words = cmd.split()
                pattern = rf"(python -m microbench\.{words[0]}|dawnscope {words[0]})\s+" + "".join(
                    rf"{w}\s+" for w in words[1:]
                )
                for m in re.finditer(pattern, line):
                    yield path.name, line, cmd, line[m.end() :].split("`")[0].split("#")[0]


def test_doc_command_lines_use_the_new_flag_names():
    seen, old = 0, []
    for name, line, cmd, rest in _command_lines():
        seen += 1
        old += [(name, cmd, flag, line.strip()) for flag in RENAMED_FLAGS[cmd] if re.search(rf"{flag}(?![\w-])", rest)]
    assert seen >= 5  # the docs do show these commands
    assert not old


def test_integrity_line_names_the_current_flag(cfg):
    from .conftest import analyze

    # the MI350X rocprofv3 slice has no ProfilerStep ranges: the integrity line says how to name other steps
    doc = analyze(REPO / "tests" / "data" / "mi350x_rocprofv3_slice.json", cfg)
    (steps,) = [m for m in doc["integrity"]["missing"] if m["what"] == "steps"]
    assert "--step-range" in steps["detail"] and "--steps)" not in steps["detail"]


def test_findings_name_the_current_flag(cfg):
    from .conftest import analyze_with_findings as analyze

    # the findings' "not checked: no steps" line said "--steps" (renamed --step-range)
    doc = analyze(REPO / "tests" / "data" / "mi350x_rocprofv3_slice.json", cfg)
    text = repr(doc["findings_not_checked"])
    assert "--step-range" in text and "--steps)" not in text
