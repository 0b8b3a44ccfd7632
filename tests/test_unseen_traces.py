"""Traces as users have them, not as the shared samples are: variants of the real traces in tests/data made the way a
writer or a user's hands would (steps without end times, the report's path given as the trace's), each read to an
answer or refused in one line that names the file, with nothing lost."""

from __future__ import annotations

import gzip
import json

from microbench.trace import cli as trace_cli

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


def _cpu_ahead(doc: dict) -> None:
    """The GPU's events 5 ms later: a step whose CPU has launched its work and ended before the GPU ran it."""
    for e in doc["traceEvents"]:
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation") and "ts" in e:
            e["ts"] = float(e["ts"]) + 5000.0


def test_a_step_whose_cpu_runs_ahead_is_judged_over_its_gpu_time(tmp_path):
    """MFU of a step is over its time to its last GPU activity where the CPU range ends sooner (it read 3,706 % over
    a CPU range of launches only); the trace's MFU counts the steps' operators over the steps' time."""
    from microbench.trace.analysis import TraceAnalysis

    ta = TraceAnalysis.open(_variant(tmp_path, "h100_bert_small", _cpu_ahead))
    (st,) = ta.mfu["steps"]
    (step,) = ta.steps
    assert st["wall_us"] == step["breakdown_span_us"] > step["wall_us"] + 4000
    assert ta.mfu["model_flops"] == st["model_flops"] and ta.mfu["window_us"] == st["wall_us"]
    assert not ta.mfu["impossible"]


def test_an_mfu_above_100_percent_is_flagged():
    from microbench.trace.opmetrics import mfu_above_peak

    m = {"mfu": 0.4, "steps": [{"name": "ProfilerStep#3", "mfu": 37.06}, {"name": "ProfilerStep#4", "mfu": 0.5}]}
    (line,) = mfu_above_peak(m)
    assert line.startswith("ProfilerStep#3: MFU 3706.0% is above 100 %: impossible")


def _archives(tmp_path) -> dict[str, object]:
    import bz2
    import io
    import lzma
    import tarfile
    import zipfile

    text = gzip.open(TRACES / "h100_bert_small.json.gz").read()
    made = {}
    made["a zip archive"] = tmp_path / "t.zip"
    with zipfile.ZipFile(made["a zip archive"], "w") as z:
        z.writestr("trace.json", text)
    made["a bzip2 file"] = tmp_path / "t.json.bz2"
    made["a bzip2 file"].write_bytes(bz2.compress(text))
    made["an xz file"] = tmp_path / "t.json.xz"
    made["an xz file"].write_bytes(lzma.compress(text))
    made["a tar archive"] = tmp_path / "logs.tar.gz"
    with tarfile.open(made["a tar archive"], "w:gz") as t:
        info = tarfile.TarInfo("trace.json")
        info.size = len(text)
        t.addfile(info, io.BytesIO(text))
    made["a gzip file inside a gzip file"] = tmp_path / "t.json.gz.gz"
    made["a gzip file inside a gzip file"].write_bytes(gzip.compress(gzip.compress(text)))
    made["rocprofv3's CSV output"] = tmp_path / "908_kernel_trace.csv"
    made["rocprofv3's CSV output"].write_text(
        '"Kind","Agent_Id","Queue_Id","Kernel_Id","Kernel_Name","Correlation_Id"\n'
        '"KERNEL_DISPATCH",4,1,12,"Cijk_Ailk_Bljk",7\n'
    )
    made["an Nsight Systems report"] = tmp_path / "report1.nsys-rep"
    made["an Nsight Systems report"].write_bytes(b"\x00\x01binary report")
    return made


def test_files_that_are_not_traces_are_named_with_what_to_do(tmp_path, capsys):
    """An archive, another compression, rocprofv3's CSV or an Nsight report: one line saying what the file is and how
    to get a trace this reads from it (data/file_signatures.toml), not "not JSON: starts with 'P'"."""
    for what, path in _archives(tmp_path).items():
        assert trace_cli.main([str(path)]) == 2
        err = capsys.readouterr().err
        assert what in err and "not a trace this reads: " in err and "Traceback" not in err, (what, err)


def test_a_byte_order_mark_and_events_without_a_category(tmp_path, capsys):
    """A UTF-8 byte-order mark before the JSON is read past; complete events with no category at all (another tool's
    Chrome trace) are counted and said, not dropped without a word."""
    path = tmp_path / "bom.json"
    path.write_bytes(b"\xef\xbb\xbf" + gzip.open(TRACES / "h100_bert_small.json.gz").read())
    out = tmp_path / "bom.report.json"
    assert trace_cli.main([str(path), "--json", str(out)]) == 0
    assert json.loads(out.read_text())["summary"]["kernel_count"] == 60
    other = tmp_path / "results.json"
    other.write_text(
        json.dumps(
            {
                "traceEvents": [
                    {"ph": "X", "name": "Cijk_gemm", "pid": 6, "tid": 0, "ts": 10.0 + i, "dur": 0.5} for i in range(5)
                ]
            }
        )
    )
    capsys.readouterr()
    assert trace_cli.main([str(other)]) == 0
    assert "skipped 5 complete events without a category (cat)" in capsys.readouterr().out
    pairs = tmp_path / "be.json"
    pairs.write_text(
        json.dumps(
            {
                "traceEvents": [
                    {"ph": ph, "name": "k", "cat": "kernel", "pid": 0, "tid": 7, "ts": 10.0 + i}
                    for i, ph in enumerate("BEBE")
                ]
            }
        )
    )
    assert trace_cli.main([str(pairs)]) == 0
    assert "skipped 4 begin / end ('B' / 'E') events" in capsys.readouterr().out


def test_a_jobs_report_opens_with_its_straggler_ranks_findings(tmp_path, capsys):
    """`trace RANK0 RANK1`: the findings of the straggler rank first (its id in the JSON, `findings_rank`), then the
    job's cross-rank tables."""
    out = tmp_path / "job.json"
    ranks = [str(TRACES / f"a100_torchrec_rank{i}.json.gz") for i in (0, 1)]
    assert trace_cli.main(ranks + ["--readers", "0", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    doc = json.loads(out.read_text())
    assert doc["findings_rank"] == doc["straggler_rank"] and doc["findings"]
    assert text.index(f"rank {doc['straggler_rank']} (the straggler)'s findings") < text.index("straggler: rank")
    assert text.index("1. " + doc["findings"][0]["id"]) < text.index("straggler: rank")  # the job's lines after


def test_source_names_the_chip_for_the_whole_report(tmp_path):
    """`trace --source` on a trace that names no device (the TorchRec rank): the chip's datasheet for every figure,
    MFU and % of peak included, not only for the findings; the integrity note keeps what the trace itself lacks."""
    out = tmp_path / "r.json"
    assert (
        trace_cli.main([str(TRACES / "a100_torchrec_rank0.json.gz"), "--source", "a100_sxm4_80gb", "--json", str(out)])
        == 0
    )
    doc = json.loads(out.read_text())
    (dev,) = doc["devices"]
    assert dev["datasheet"]["entry"] == "a100_sxm4_80gb" and "given by --source" in dev["datasheet"]["note"]
    assert doc["mfu"]["mfu"] is not None and 0 < doc["mfu"]["mfu"] < 1
    assert not any(
        "MFU" in str(m.get("unreliable")) for m in doc["integrity"]["missing"] if m.get("what") == "device properties"
    )


def test_a_rocprofv3_record_that_ends_before_it_starts_is_said(tmp_path):
    from microbench.trace.analysis import read_trace

    doc = json.loads(gzip.open(TRACES / "mi350x_rocprofv3.json.gz").read())
    (proc,) = (
        doc["rocprofiler-sdk-tool"] if isinstance(doc["rocprofiler-sdk-tool"], list) else [doc["rocprofiler-sdk-tool"]]
    )
    rec = proc["buffer_records"]["kernel_dispatch"][0]
    rec["end_timestamp"] = rec["start_timestamp"] - 1000
    path = tmp_path / "roc.json"
    path.write_text(json.dumps(doc))
    tl = read_trace(path)
    assert tl.skipped == {
        "durations of rocprofv3 kernel_dispatch records that end before they start (each record kept, at 0 us)": 1
    }


def test_a_nan_in_the_json_is_named_with_its_place(tmp_path, capsys):
    """Python's json.dump writes NaN by default, and JSON has no NaN: the one line says so, where (a byte offset in a
    one-line file, whose line number says nothing), and how to write it instead."""
    doc = json.loads(gzip.open(TRACES / "h100_bert_small.json.gz").read())
    doc["traceEvents"][5]["args"] = {"weird": float("nan")}
    path = tmp_path / "nan.json"
    path.write_text(json.dumps(doc))
    assert trace_cli.main([str(path)]) == 2
    err = capsys.readouterr().err
    assert "not valid JSON: NaN at byte " in err and "allow_nan=False" in err


def test_a_tensorboard_log_folder_says_where_its_traces_are(tmp_path, capsys):
    """A TensorBoard log folder keeps its traces under plugins/profile/RUN/: given the folder, the one line names
    them (not read: several runs are no job)."""
    run = tmp_path / "plugins" / "profile" / "2026_12_03"
    run.mkdir(parents=True)
    (run / "worker0.1700000000.pt.trace.json.gz").write_bytes((TRACES / "h100_bert_small.json.gz").read_bytes())
    assert trace_cli.main([str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "no traces in this folder" in err and "1 in its subfolders (plugins/profile/2026_12_03/worker0." in err


def test_a_step_range_the_trace_lacks_is_bad_input(capsys):
    path = str(TRACES / "h100_bert_small.json.gz")
    assert trace_cli.main([path, "--step-range", "ProfilerStp#6"]) == 2
    err = capsys.readouterr().err
    assert "no range named 'ProfilerStp#6' (its ranges include: ProfilerStep#6)" in err and "--step-range" in err
    assert trace_cli.main([path, "--step-range", "ProfilerStep#6"]) == 0


def _no_launches(doc: dict) -> None:
    """A profile of operators and kernels without the runtime calls (a tool that kept only those two kinds), and a
    communication id beyond 64 bits on an operator (HTA's tests keep a trace of such `Comms Id`s)."""
    doc["traceEvents"] = [
        e
        for e in doc["traceEvents"]
        if not str(e.get("cat", "")).endswith(("_runtime", "_driver")) and e.get("ph") != "f" and e.get("ph") != "s"
    ]
    op = next(e for e in doc["traceEvents"] if e.get("cat") == "cpu_op")
    op.setdefault("args", {})["Comms Id"] = 2**70 + 1


def test_kernels_and_operators_without_launches_are_read_to_a_report(tmp_path, capsys):
    """The operator owning a kernel is found through its launch: with no launch in the trace the owner search
    indexed an empty table (IndexError); now each kernel has no owner and the report says launches are missing."""
    path = _variant(tmp_path, "h100_bert_small", _no_launches)
    out = tmp_path / "report.json"
    assert trace_cli.main([str(path), "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    kernels = sum(1 for e in json.loads(path.read_text())["traceEvents"] if e.get("cat") == "kernel")
    assert kernels and doc["summary"]["kernel_count"] == kernels
    text = capsys.readouterr().out
    assert "launches missing" in text and "Traceback" not in text
