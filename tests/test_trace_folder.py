"""The folder torch.profiler.tensorboard_trace_handler writes (microbench/trace/folder.py): one process's cycles
are one run, read newest first; several processes are a job; unrelated files are said in one line. Was: "no
collective calls: not a rank of a distributed job" for two cycles of one process, "give the traces of at least two
ranks" for a folder of one trace."""

from __future__ import annotations

import json
import shutil

from microbench.trace import cli as trace_cli

from .conftest import SLICE


def _cycle(folder, worker: str, ms: int, steps: int) -> None:
    """A copy of the H100 slice under the handler's name, its step renamed so that the cycles differ."""
    doc = json.loads(SLICE.read_text())
    for e in doc["traceEvents"]:
        if e.get("name") == "ProfilerStep#6":
            e["name"] = f"ProfilerStep#{steps}"
    (folder / f"{worker}.{ms}.pt.trace.json").write_text(json.dumps(doc))


def test_one_process_cycles_are_read_newest_first_and_the_others_named(tmp_path, capsys):
    folder = tmp_path / "log"
    folder.mkdir()
    _cycle(folder, "host_4242", 1733450000000, 3)
    _cycle(folder, "host_4242", 1733450009000, 9)  # newer
    out = tmp_path / "out.json"
    assert trace_cli.main([str(folder), "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["file"].endswith("host_4242.1733450009000.pt.trace.json")
    assert [s["name"] for s in doc["steps"]] == ["ProfilerStep#9"]
    err = capsys.readouterr().err
    assert "2 profiling cycles of one process (host_4242)" in err and "host_4242.1733450000000" in err


def test_a_folder_of_one_trace_is_that_trace(tmp_path, capsys):
    folder = tmp_path / "log"
    folder.mkdir()
    shutil.copy(SLICE, folder / "anything.json")
    out = tmp_path / "out.json"
    assert trace_cli.main([str(folder), "--json", str(out)]) == 0
    assert json.loads(out.read_text())["summary"]["kernel_count"] > 0


def test_profiler_cycles_beside_unrelated_traces_are_one_line(tmp_path, capsys):
    folder = tmp_path / "log"
    folder.mkdir()
    _cycle(folder, "host_4242", 1733450000000, 3)
    shutil.copy(SLICE, folder / "other.json")
    assert trace_cli.main([str(folder)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "1 other trace file(s) (other.json)" in err
