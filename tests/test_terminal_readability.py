"""What the terminal reports read like at 120 and 80 columns (a pipe, a CI log, a narrow window): kernel names as
labels, not wrapped fragments; the columns a narrow table keeps (never an all-dash one before one with values, the
times of a comparison before its ratios); captions that name only shown columns; the caveat of a counter trace
beside its headline; the evidence codes explained; one footnote for every table that left columns out."""

from __future__ import annotations

import pytest
from rich.console import Console

from microbench.compare import cli as compare_cli
from microbench.predict import cli as predict_cli
from microbench.report.cells import LeftOut, empty_columns, fit_columns, kept_in, table_width
from microbench.report.trace_compare import compare_drop_order
from microbench.report.trace_report import evidence_legend, print_trace_report
from microbench.trace import cli as trace_cli
from tests.conftest import TRACES, needs_traces

from .conftest import analyze


def _report(doc: dict, width: int, **kw) -> str:
    console = Console(width=width, record=True, file=open("/dev/null", "w"))
    print_trace_report(doc, console=console, **kw)
    return console.export_text()


def _table(text: str, title: str) -> list[str]:
    """The lines of the table under `title`: its header line to the blank line that closes it."""
    lines = text.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith(title))
    head = next(i for i in range(start, len(lines)) if lines[i].startswith(" ") and lines[i].strip())
    end = next(i for i in range(head + 2, len(lines)) if not lines[i].strip())
    return lines[head:end]


def _joined(text: str) -> str:
    return " ".join(text.split())


def _run(main, argv: list[str], columns: int, monkeypatch, capsys) -> str:
    capsys.readouterr()
    monkeypatch.setenv("COLUMNS", str(columns))
    assert main(argv) == 0
    return capsys.readouterr().out


# 1. predict's kernel table: the trace report's labels


@needs_traces
@pytest.mark.parametrize("columns", [120, 80])
def test_predict_labels_kernels_as_the_trace_report_does(monkeypatch, capsys, columns):
    # the H100 BERT's kernels printed as `void` / `cutlass::Kernel2<cutlass_80_wmma_..._32x…` / `128, 128,`; at 80
    # columns the three cutlass GEMMs read alike
    out = _run(
        predict_cli.main, [str(TRACES / "h100_bert_small.json.gz"), "--on", "MI300X"], columns, monkeypatch, capsys
    )
    region = out[out.index("top kernels by source time") : out.index("modelled operators")]
    rows = [ln.strip(" │┃") for ln in region.splitlines()[1:] if ln.strip(" │┃─━┏┓┗┛┡┩└┘┳┻╇┼┴┬")]
    rows = [r for r in rows if not r.startswith("kernel ")]  # the header
    assert not [r for r in rows if r.split()[0] in ("void", "128,", "namespace)::")], rows
    cutlass = [r.split()[0] for r in rows if r.startswith("Kernel2<cutlass_80")]
    assert len(cutlass) == 3 and len(set(cutlass)) == 3, cutlass
    assert any(r.startswith("Memcpy DtoH (Device -> Pinned)") for r in rows)  # a copy's name says where it went
    assert max(len(ln) for ln in out.splitlines()) <= columns


# 2. compare of two trace reports


@needs_traces
def test_trace_compare_at_80_columns_keeps_both_times_and_names_the_json(monkeypatch, capsys, tmp_path):
    # the operators table kept op, shape, dtype and a bare `[2] vs base`; the footnote said the rest was only in
    # "the HTML page", though the JSON has it too
    docs = []
    for name in ("h100_bert_small", "mi300_bert_small"):
        docs.append(str(tmp_path / f"{name}.json"))
        assert trace_cli.main([str(TRACES / f"{name}.json.gz"), "--json", docs[-1]]) == 0
    monkeypatch.chdir(tmp_path)  # the footnote names the file as given: short, one line
    out = _run(compare_cli.main, docs + ["--json", "cmp.json"], 80, monkeypatch, capsys)
    header = _table(out, "operators (GEMM")[0]
    assert "[1] us" in header and "[2] us" in header and "[1] vs base" not in header, header
    foot = _joined(out[out.index("narrow terminal") :])
    assert "the JSON comparison cmp.json" in foot and "the HTML page (--html OUT)" in foot
    assert max(len(ln) for ln in out.splitlines()) <= 80


def test_the_baselines_own_ratio_goes_first_and_the_times_last():
    cols = [("op", "left")] + [(f"[{i}] {c}", "right") for i in (1, 2) for c in ("us", "share %", "TFLOP/s", "vs base")]
    order = compare_drop_order(cols)
    assert order[0] == "[1] vs base"
    assert order[-2:] == ["[2] us", "[1] us"]  # times last: a ratio alone says how much, not of what
    assert order.index("[2] vs base") < order.index("[2] us")
    assert compare_drop_order(cols, base=1)[0] == "[2] vs base"  # --baseline names the second machine


# 3. all-empty columns and captions


def test_a_column_with_no_value_goes_before_any_with_one():
    cols = [("op", "left"), ("GFLOP", "right"), ("op TFLOP/s", "right"), ("% datasheet", "right")]
    rows = [(["aten::conv2d", "236.760", "-", "-"], None), (["aten::mm", "1.5", "-", ""], None)]
    assert empty_columns(cols, rows) == ["op TFLOP/s", "% datasheet"]
    fit = fit_columns(cols, rows, table_width(cols, rows) - 1, drop_order=("GFLOP", "% datasheet", "op TFLOP/s"))
    assert [c for c, _ in fit.columns] == ["op", "GFLOP"]  # every empty one goes, the one with values stays
    assert fit.empty == ["op TFLOP/s", "% datasheet"] and fit.dropped == []
    assert fit_columns(cols, rows, 200, ("GFLOP",)).empty == []  # a table that fits keeps them all
    assert empty_columns(cols, []) == []


@needs_traces
def test_operator_table_keeps_its_values_and_its_caption_names_shown_columns(cfg):
    # the V100 ResNet-50's op rates are withheld (FLOPs cover 68% of the matrix time): at 120 columns the table hid
    # GFLOP and showed op TFLOP/s, kernel TFLOP/s and % datasheet with "-" in every row, under a caption ending
    # "% of op TFLOP/s"; at 80, op, a cut shape and an all-dash column
    doc = analyze(TRACES / "v100_resnet50_tbplugin_2021schema.json.gz", cfg)
    for width in (120, 80):
        text = _report(doc, width)
        title = next(ln for ln in text.splitlines() if ln.startswith("operators with a work model"))
        table = _table(text, "operators with a work model")
        header = table[0].split()
        assert "TFLOP/s" not in header and "datasheet" not in header, header
        assert "op us" in table[0] and not title.endswith("% of op TFLOP/s") and "TFLOP/s" not in title
        for o in doc["ops"][:15]:  # the row's key whole
            assert any(o["op"] in ln and o["shape"] in ln for ln in table), o["shape"]
        assert "no value in any row" in _joined(text)
        assert max(len(ln) for ln in text.splitlines()) <= width
    assert "GFLOP" in _table(_report(doc, 120), "operators with a work model")[0]


# 4. a counter trace: its caveat beside the headline, its counter columns kept


@needs_traces
def test_counter_trace_says_its_times_are_ranges_beside_the_headline(cfg):
    # the CUPTI range-profiler trace's warning was the report's last line, under every figure it invalidates
    doc = analyze(TRACES / "a100_cupti_counters.json.gz", cfg)
    text = _report(doc, 120)
    lines = text.splitlines()
    head = next(i for i, ln in enumerate(lines) if ln.startswith("77 kernels, kernel time"))
    assert "(the profiler's ranges, not run times: the warning below)" in _joined("\n".join(lines[head : head + 2]))
    warn = next(i for i, ln in enumerate(lines) if ln.startswith("warning: CUPTI range-profiler trace"))
    assert head < warn < next(i for i, ln in enumerate(lines) if "kernel time by class" in ln)
    assert not any("CUPTI range-profiler trace" in ln for ln in lines[warn + 2 :])  # said once, up front
    header = _table(text, "top 15 kernels")[0]
    assert "counted GFLOP" in header and "evidence" in header, header  # the trace's point, kept at 120


# 5. the evidence codes


@needs_traces
def test_evidence_codes_have_a_legend(cfg):
    doc = analyze(TRACES / "a100_cupti_counters.json.gz", cfg)  # name rules and structure rules both
    text = _report(doc, 120)
    assert "kernel[40]" in text and "inferred: structure[1]" in text
    legend = _joined(text[text.index("evidence: kernel[N]") :])
    assert legend.startswith("evidence: kernel[N] = rule N (from 0) of data/kernel_rules.toml's [[kernel]]")
    assert "inferred: structure[N] = a [[structure]] rule" in legend
    assert "evidence: kernel[N]" not in _report(doc, 80)  # no column, no legend


def test_the_legend_says_only_the_codes_shown():
    assert evidence_legend(["kernel[3]", "kernel[40]"]) == (
        "evidence: kernel[N] = rule N (from 0) of data/kernel_rules.toml's [[kernel]] name rules"
    )
    assert "launcher[N]" in evidence_legend(["inferred: launcher[2]", "counters"])
    assert evidence_legend([]) is None


# 6. one footnote for the tables a narrow terminal cut


@needs_traces
def test_narrow_tables_share_one_footnote_that_names_the_files_written(cfg):
    # at 80 columns the BERT trace printed four "narrow terminal: columns ... are in the JSON report (--json OUT)
    # and the HTML page (--html OUT)" lines, one per table
    doc = analyze(TRACES / "h100_bert_small.json.gz", cfg)
    # the step-breakdown table (report/findings_report.py draws it) is in the one line too
    assert _report(doc, 80).count("narrow terminal") == 1
    text = _report(doc, 80, kept_in=kept_in("out.json", "out.html"))
    ours = _joined(text[text.rindex("narrow terminal") :])  # the report's last line
    assert ours.startswith(
        "narrow terminal: 14 columns of 4 tables left out (top kernels: evidence, calls, class; "
        "steps: kernels, exposed memcpy, CPU range; step breakdown: idle in sync, memset; "
        "operators: "
    )
    assert "in the JSON report out.json and the HTML page out.html" in ours and "--json OUT" not in ours


def test_left_out_counts_columns_and_tables():
    left = LeftOut(kept_in())
    cols = [("op", "left"), ("a", "right"), ("b", "right")]
    rows = [(["x" * 10, "1.0", "-"], None)]
    left.add("t1", fit_columns(cols, rows, 12, ("a",)))
    assert left.line() == (
        "narrow terminal: 1 column of the t1 table left out (a): in the JSON report (--json OUT) "
        "and the HTML page (--html OUT); 1 column with no value in any row left out first (b)"
    )
    left.add("t2", fit_columns(cols, rows, 14, ("a", "b")))
    assert left.line().startswith("narrow terminal: 2 columns of 2 tables left out (t1: a; t2: a)")
    assert LeftOut("x").line() is None


def test_the_width_rule_is_richs():
    # cells.table_width decides without rich: it must measure roofline_report.rich_table's table as rich does
    from microbench.report.roofline_report import _natural_width, _table

    cols = [("kernel", "left"), ("[1] vs base", "right"), ("share", "right")]
    rows = [(["Kernel2<cutlass_80_wmma…", "1.00x", "32.1%"], None), (["x", "0.66x", "-"], None)]
    assert table_width(cols, rows) == _natural_width(_table(cols, rows))
    assert table_width(cols[:1], rows and [(r[:1], s) for r, s in rows]) == _natural_width(
        _table(cols[:1], [(r[:1], s) for r, s in rows])
    )
