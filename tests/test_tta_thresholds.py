"""`tta thresholds`: time-to-accuracy and rank over a range of thresholds, on the real DAWNBench and MLPerf
files (expected values read from the raw files here, not by the code under test) and on our own runs' curves;
bad ranges and unusable files."""

from __future__ import annotations

import json

import pytest

from microbench.tta import cli as tta
from microbench.tta import thresholds as T

from .conftest import mllog_events, needs_shared


def _curve_by_hand(tsv, column):
    """(seconds, accuracy) rows of a DAWNBench TSV, read by hand: BOM and CR dropped, columns by name."""
    text = tsv.read_bytes().decode("utf-8").lstrip("\ufeff")
    rows = [[c.strip() for c in ln.rstrip("\r").split("\t")] for ln in text.split("\n") if ln.strip()]
    head = [h.lower() for h in rows[0]]
    return [(float(r[head.index("hours")]) * 3600, float(r[head.index(column)])) for r in rows[1:]]


def _first(curve, thr):
    return next((t for t, a in curve if a >= thr), None)


@needs_shared("dawnbench")
def test_cifar10_times_and_ranks_at_each_threshold(shared_dir):
    train = shared_dir / "dawnbench" / "CIFAR10" / "train"
    study = T.study([train], user_range=(92.0, 95.0, 0.5))
    curves = {tsv.stem: _curve_by_hand(tsv, "top1accuracy") for tsv in sorted(train.glob("*.tsv"))}
    assert {e["entry"] for e in study.entries} == set(curves)
    for thr in (92.0, 93.5, 94.0, 95.0):
        expected = {name: _first(c, thr) for name, c in curves.items()}
        rows = {r["entry"]: r for r in study.rows if r["threshold"] == thr}
        for name, t in expected.items():
            assert rows[name]["tta_seconds"] == (pytest.approx(t, rel=1e-12) if t is not None else None)
            faster = sum(1 for o in expected.values() if o is not None and t is not None and o < t)
            assert rows[name]["rank"] == (None if t is None else 1 + faster)
    for e in study.entries:  # where an entry stops reaching: the first threshold above its best accuracy
        best = max(a for _, a in curves[e["entry"]])
        assert e["max_accuracy"] == pytest.approx(best)
        above = [t for t in (92.0, 92.5, 93.0, 93.5, 94.0, 94.5, 95.0) if t > best]
        assert e["stops_reaching_at"] == (above[0] if above else None)
    (task,) = study.tasks
    assert task["reaching"] == [sum(1 for c in curves.values() if _first(c, t) is not None) for t in task["thresholds"]]


@needs_shared("dawnbench")
def test_squad_f1_is_scaled_to_percent_and_default_range_is_around_its_threshold(shared_dir):
    study = T.study([shared_dir / "dawnbench" / "SQuAD"])
    (task,) = study.tasks
    assert task["official_threshold"] == pytest.approx(73.0)
    assert task["thresholds"][0] == pytest.approx(71.0) and task["thresholds"][-1] == pytest.approx(74.0)
    assert all(0 < e["max_accuracy"] <= 100 for e in study.entries)


def test_mlperf_resnet_scored_by_the_rule_at_each_threshold(shared_dir):
    folder = shared_dir / "mlperf" / "v1.0" / "Dell_2xXE8545x4A100-SXM-80GB" / "resnet"
    runs = []
    for f in sorted(folder.glob("result_*.txt")):
        start, evals = None, []
        for ev in mllog_events(f):
            if ev["key"] == "run_start" and start is None:
                start = ev["time_ms"]
            elif ev["key"] == "eval_accuracy":
                evals.append(((ev["time_ms"] - start) / 1e3, ev["value"] * 100))
        runs.append(evals)
    study = T.study([folder], user_range=(70.0, 76.0, 1.0))
    (task,) = study.tasks
    assert task["task"] == "resnet" and task["official_threshold"] == pytest.approx(75.9)
    for thr in (70.0, 73.0, 75.0):
        times = sorted(_first(r, thr - 1e-9) for r in runs)
        expected = sum(times[1:-1]) / len(times[1:-1])  # drop the fastest and the slowest
        (row,) = [r for r in study.rows if r["threshold"] == thr]
        assert row["tta_seconds"] == pytest.approx(expected, rel=1e-9)
    (row,) = [r for r in study.rows if r["threshold"] == 76.0]
    assert row["tta_seconds"] is None  # the runs stop at the target: none reaches 76 %


@needs_shared("dawnbench")
def test_command_writes_json_and_plot(shared_dir, tmp_path, capsys):
    out, png = tmp_path / "th.json", tmp_path / "th.png"
    assert (
        tta.main(
            ["thresholds", str(shared_dir / "dawnbench"), "--task", "imagenet", "--json", str(out), "--png", str(png)]
        )
        == 0
    )
    doc = json.loads(out.read_text())
    assert {r["task"] for r in doc["rows"]} == {"ImageNet"}
    assert {"file", "task", "threshold", "tta_seconds", "rank"} <= set(doc["rows"][0])
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "ImageNet" in capsys.readouterr().out


def test_our_runs_curves_are_entries(tmp_path):
    doc = {
        "schema": "dawnscope.tta/1",
        "model": "digits",
        "target": 0.9,
        "recipe": "tuned",
        "runs": [
            {"seed": 0, "epochs": [{"elapsed_s": 1.0, "accuracy": 0.8}, {"elapsed_s": 2.0, "accuracy": 0.93}]},
            {"seed": 1, "epochs": [{"elapsed_s": 1.5, "accuracy": 0.91}]},
        ],
    }
    (tmp_path / "tta.json").write_text(json.dumps(doc))
    study = T.study([tmp_path], user_range=(85.0, 95.0, 5.0))
    got = {(r["entry"], r["threshold"]): (r["tta_seconds"], r["rank"]) for r in study.rows}
    assert got == {
        ("seed 0 (tuned)", 85.0): (2.0, 2),
        ("seed 1 (tuned)", 85.0): (1.5, 1),
        ("seed 0 (tuned)", 90.0): (2.0, 2),
        ("seed 1 (tuned)", 90.0): (1.5, 1),
        ("seed 0 (tuned)", 95.0): (None, None),
        ("seed 1 (tuned)", 95.0): (None, None),
    }


@needs_shared("dawnbench")
def test_files_without_a_curve_are_listed_and_the_others_go_on(shared_dir, tmp_path):
    bad = tmp_path / "CIFAR10" / "train"
    bad.mkdir(parents=True)
    (bad / "no_accuracy.tsv").write_text("epoch\thours\n1\t0.1\n")
    (tmp_path / "tta.json").write_text(json.dumps({"schema": "dawnscope.tta/1", "target": 0.9, "runs": []}))
    good = shared_dir / "dawnbench" / "CIFAR10" / "train" / "basenet.tsv"
    study = T.study([tmp_path, good])
    assert {u["file"].rsplit("/", 1)[-1] for u in study.unreadable} == {"no_accuracy.tsv", "tta.json"}
    assert [e["entry"] for e in study.entries] == ["basenet"]


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--from", "90", "--to", "101", "--step", "1"], "--to: 101 is not a threshold in percent"),
        (["--from", "-1", "--to", "90", "--step", "1"], "--from: -1 is not a threshold"),
        (["--from", "90", "--to", "95"], "--step: a range needs all three"),
        (["--from", "90", "--to", "95", "--step", "0"], "--step: 0: a range needs a positive step"),
        (["--from", "95", "--to", "90", "--step", "1"], "--to: 90 is below --from 95"),
        (["--from", "0", "--to", "100", "--step", "1e-6"], "thresholds (at most"),
        (["--from", "nan", "--to", "95", "--step", "1"], "--from: nan is not a finite number"),
        (["--task", "nope"], "--task: 'nope': no entry of that task"),
    ],
)
@needs_shared("dawnbench")
def test_bad_ranges_are_one_line_and_exit_2(shared_dir, argv, words, capsys):
    assert tta.main(["thresholds", str(shared_dir / "dawnbench" / "SQuAD"), *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and words in err, err
