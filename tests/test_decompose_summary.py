"""`decompose --timed-steps 0` times no unprofiled step: the step summary's step-time line said "median of 1
unprofiled steps" while the note below said the step time was the profiled steps'. It names the profiled steps."""

from __future__ import annotations

import pytest
from rich.console import Console

from microbench import decompose_step
from microbench.report.decomposition import print_decomposition

pytestmark = pytest.mark.filterwarnings("ignore:Profiler won't be using warmup")


def _summary_text(**steps) -> str:
    doc = decompose_step(
        "tests.ext_model:make_inplace",
        batch=4,
        device="cpu",
        replay=False,
        measure_ceilings=False,
        plot=False,
        profiled_steps=1,
        profiler_warmup_steps=0,
        **steps,
    )
    console = Console(width=120, record=True, color_system=None, file=open("/dev/null", "w"))
    print_decomposition(doc, console)
    return console.export_text()


def test_step_time_line_names_the_steps_it_timed():
    profiled = _summary_text(timed_steps=0)
    line = next(ln for ln in profiled.splitlines() if ln.lstrip("│ ").startswith("step time"))
    assert "unprofiled" not in line and "profiled steps (--timed-steps 0" in line
    timed = _summary_text(timed_steps=3)
    line = next(ln for ln in timed.splitlines() if ln.lstrip("│ ").startswith("step time"))
    assert "median of 3 unprofiled steps" in line


def test_narrow_footnotes_name_files_decompose_writes():
    # at 80 columns the layer table drops columns and says where they are: decompose writes decomposition.json
    # and results.json, never report.html (the footnote named it)
    doc = decompose_step(
        "tests.ext_model:make_inplace",
        batch=4,
        device="cpu",
        replay=False,
        measure_ceilings=False,
        plot=False,
        profiled_steps=1,
        profiler_warmup_steps=0,
        timed_steps=0,
    )
    console = Console(width=80, record=True, color_system=None, file=open("/dev/null", "w"))
    print_decomposition(doc, console)
    lines = console.export_text().splitlines()
    notes = [" ".join(lines[i : i + 2]) for i, ln in enumerate(lines) if ln.startswith("narrow terminal")]  # wrapped
    assert notes and all("report.html" not in n for n in notes)
    assert any("decomposition.json" in n for n in notes)


def test_replay_table_says_unavailable_providers_in_one_line():
    # on a CPU the CuPy providers cannot run: one line per provider, as roofline says them, not a skipped row for
    # every replayed case (the replay table of resnet9 had 20 "cupy skipped" rows among 60)
    doc = decompose_step(
        "tests.ext_model:make_inplace",
        batch=4,
        device="cpu",
        replay=True,
        measure_ceilings=False,
        plot=False,
        profiled_steps=1,
        profiler_warmup_steps=0,
        timed_steps=0,
    )
    console = Console(width=120, record=True, color_system=None, file=open("/dev/null", "w"))
    print_decomposition(doc, console)
    text = console.export_text()
    table = text[text.index("replay:") :]
    rows = [ln.split() for ln in table.splitlines() if ln.strip()[:1].isdigit()]
    assert rows and not [r for r in rows if r[0].isdigit() and "cupy" in r]
    (line,) = [ln for ln in table.splitlines() if ln.startswith("not in the table: ")]
    assert "cupy (" in line and "unavailable" in line
