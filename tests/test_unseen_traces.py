"""Traces as users have them, not as the shared samples are: variants of the real traces in tests/data made the way a
writer or a user's hands would (steps without end times, the report's path given as the trace's), each read to an
answer or refused in one line that names the file, with nothing lost."""
from __future__ import annotations

import gzip
import json

from microbench import trace as trace_cli

from .conftest import TRACES


def _variant(tmp_path, name: str, edit) -> object:
    doc = json.loads(gzip.open(TRACES / f"{name}.json.gz").read())
    edit(doc)
    out = tmp_path / f"{name}.json"
    out.write_text(json.dumps(doc))
    return out


def _zero_steps(doc: dict) -> None:
    for e in doc["traceEvents"]:
        if str(e.get("name", "")).startswith("ProfilerStep") and e.get("ph") == "X":
            e["dur"] = 0


def test_step_ranges_without_an_end_time_are_no_steps(tmp_path, capsys):
    """ProfilerStep ranges of 0 us (a writer that lost their end times) once divided by a step time of 0: they are
    left out, the trace is read as having none, and the report says so."""
    for name in ("h100_bert_small", "v100_resnet50_tbplugin_2021schema"):
        path = _variant(tmp_path, name, _zero_steps)
        out = tmp_path / f"{name}.report.json"
        assert trace_cli.main([str(path), "--json", str(out)]) == 0
        doc = json.loads(out.read_text())
        assert doc["findings_per"] == "trace" and not doc.get("steps")
        assert "step range" in capsys.readouterr().out and "of 0 us left out" in json.dumps(doc)


def test_the_report_is_never_written_over_the_trace_it_reads(tmp_path, capsys):
    path = tmp_path / "t.json.gz"
    path.write_bytes((TRACES / "h100_bert_small.json.gz").read_bytes())
    before = path.read_bytes()
    for opt in ("--json", "--html"):
        assert trace_cli.main([str(path), opt, str(path)]) == 2
        err = capsys.readouterr().err
        assert "is also an input of this command" in err and opt in err and "Traceback" not in err
    assert path.read_bytes() == before
