"""Flags renamed for one meaning per flag name (core.args.RENAMED_FLAGS): the 0.1 aliases are gone, and an old
spelling is refused in one line that names the new one, through each command's own parser."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from microbench.comm import cli as comm
from microbench.core.args import RENAMED_FLAGS
from microbench.decompose import cli as decompose
from microbench.roofline import cli as roofline
from microbench.trace import cli as trace
from microbench.tta import cli as tta

SLICE = Path(__file__).parent / "data" / "h100_bert_small_slice.json"

# command -> (its parser, the arguments before the flag); flag -> a value it takes (None: a switch)
PARSERS = {
    "trace": (trace.build_parser, ["t.json"]),
    "comm ranks": (comm.build_parser, ["ranks", "a.json", "b.json"]),
    "tta run": (tta.build_parser, ["run", "--model", "digits"]),
    "tta thresholds": (tta.build_parser, ["thresholds", "dir"]),
}
VALUES = {"--steps": "Step#", "--workers": "3", "--target": "0.5", "--plot": "th.png", "--profile": None}
CASES = [(cmd, old, new) for cmd, table in RENAMED_FLAGS.items() for old, new in table.items()]


def test_every_renamed_command_is_covered():
    assert set(RENAMED_FLAGS) == set(PARSERS)


@pytest.mark.parametrize("cmd, old, new", CASES, ids=[f"{c}:{o}" for c, o, _ in CASES])
def test_old_spelling_is_refused_naming_the_new(cmd, old, new, capsys):
    build, head = PARSERS[cmd]
    tail = [VALUES[old]] if VALUES[old] is not None else []
    build().parse_args(head + [new] + tail)  # the new spelling parses
    assert capsys.readouterr().err == ""
    for args in ([old] + tail, [f"{old}={tail[0]}"] if tail else [old]):
        with pytest.raises(SystemExit) as e:
            build().parse_args(head + args)
        assert e.value.code == 2
        assert capsys.readouterr().err.splitlines() == [f"error: {old} is now {new}"]


def test_an_old_spelling_after_double_dash_is_a_value():
    args = trace.build_parser().parse_args(["--", "--steps"])
    assert args.file == ["--steps"]


@pytest.mark.parametrize(
    "build, head",
    [
        (comm.build_parser, ["collectives"]),
        (roofline.build_parser, []),
        (decompose.build_parser, ["--model", "resnet9"]),
    ],
)
def test_plot_and_no_plot(build, head):
    """`--plot` / `--no-plot` on every command that draws by default; plotting stays the default."""
    assert build().parse_args(head).no_plot is False
    assert build().parse_args(head + ["--plot"]).no_plot is False
    assert build().parse_args(head + ["--no-plot"]).no_plot is True


def test_roofline_json_is_the_results_document(tiny_config, tmp_path, capsys):
    """`--json OUT` on a command with an `--out DIR`: the same document as the folder's results.json."""
    out, doc = tmp_path / "out", tmp_path / "doc.json"
    assert (
        roofline.main(
            [
                "--profile",
                "tiny",
                "--config",
                str(tiny_config),
                "--out",
                str(out),
                "--device",
                "cpu",
                "--no-plot",
                "--json",
                str(doc),
            ]
        )
        == 0
    )
    assert json.loads(doc.read_text()) == json.loads((out / "results.json").read_text())
    assert json.loads(doc.read_text())["results"]


def test_json_path_is_checked_before_any_work(tmp_path, capsys):
    """A --json that cannot be written is one line before anything runs (a folder is not a file)."""
    assert roofline.main(["--profile", "quick", "--out", str(tmp_path / "o"), "--json", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--json" in err[0]
    assert not (tmp_path / "o").exists()


def _leaf_parsers():
    """Every command's parser, a subcommand's own (comm ranks, tta run, ...), by its prog."""
    import argparse

    from microbench.__main__ import COMMANDS
    from microbench.bench import cli as bench
    from microbench.compare import cli as compare
    from microbench.gate import cli as gate
    from microbench.help import cli as help_
    from microbench.inspect import cli as inspect
    from microbench.mcp import cli as mcp
    from microbench.predict import cli as predict
    from microbench.verify import cli as verify

    builds = {
        "roofline": roofline,
        "bench": bench,
        "trace": trace,
        "compare": compare,
        "gate": gate,
        "verify": verify,
        "mcp": mcp,
        "help": help_,
        "decompose": decompose,
        "comm": comm,
        "predict": predict,
        "inspect": inspect,
        "tta": tta,
    }
    assert set(builds) == set(COMMANDS)
    out = {}
    for mod in builds.values():
        ap = mod.build_parser()
        subs = [a for a in ap._actions if isinstance(a, argparse._SubParsersAction)]
        for p in [ap] if not subs else list(subs[0].choices.values()):
            out[p.prog.removeprefix("dawnscope ")] = {s: a for a in p._actions for s in a.option_strings}
    return out


def test_one_meaning_per_flag_across_the_commands():
    """`--json OUT` on every command; `--out DIR`, `--html OUT`, `--png OUT` where they are; `--steps` a count,
    `--step-range` a name; no old spelling left as a flag of its command's parser."""
    parsers = _leaf_parsers()
    assert len(parsers) == 18  # 11 commands, and the subcommands of comm (4) and tta (3)
    reads_bench_toml = (
        "roofline",
        "trace",
        "decompose",
        "predict",
        "inspect",
        "comm collectives",
        "comm ddp",
        "tta run",
    )
    assert all("--config" in parsers[p] for p in reads_bench_toml)
    for prog, opts in parsers.items():
        # every command writes its document with --json OUT; the agent server answers over stdio and writes nothing,
        # and help prints the documents
        assert ("--json" in opts and opts["--json"].metavar == "OUT") or prog in ("mcp", "help"), prog
        for flag, metavar in (("--out", "DIR"), ("--html", "OUT"), ("--png", "OUT"), ("--step-range", "NAME")):
            if flag in opts:
                assert opts[flag].metavar == metavar, (prog, flag)
        if "--steps" in opts:
            assert opts["--steps"].type is not None and opts["--steps"].metavar is None, prog  # a count
        if "--no-plot" in opts:
            assert "--plot" in opts, prog
        for old in RENAMED_FLAGS.get(prog, {}):
            assert old not in opts, (prog, old)
