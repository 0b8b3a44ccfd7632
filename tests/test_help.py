"""`dawnscope help`: the documents the messages name (`docs/<name>.md`) from the installed package. Was: every
message pointed at docs/*.md, which an installed package did not have."""

from __future__ import annotations

import re

import pytest

from microbench.help.cli import main as help_main

from .conftest import REPO


def test_every_document_a_message_names_is_there(capsys):
    """Each `docs/<name>.md` that the package's code names is a topic of `dawnscope help`, by that very path."""
    named = set()
    for py in (REPO / "microbench").rglob("*.py"):
        if py.parent.name != "help":  # its own docstrings write the pattern, docs/<name>.md
            named |= set(re.findall(r"docs/([A-Za-z_-]+)\.md", py.read_text()))
    assert len(named) >= 10
    for name in sorted(named):
        assert help_main([f"docs/{name}.md", "--path"]) == 0
        assert capsys.readouterr().out.strip().endswith(f"{name}.md")


def test_a_topic_prints_its_text_and_the_list_names_them_all(capsys):
    assert help_main(["traces"]) == 0
    assert capsys.readouterr().out == (REPO / "docs" / "traces.md").read_text()
    assert help_main([]) == 0
    listing = capsys.readouterr().out
    assert re.search(r"^  findings +Findings: what is wasted", listing, re.M) and re.search(r"^  gate +", listing, re.M)


@pytest.mark.parametrize("topic, says", [("finding", "did you mean: findings"), ("nothing", "there are: ")])
def test_an_unknown_topic_is_one_line(capsys, topic, says):
    assert help_main([topic]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: help: no document named") and says in err and err.count("\n") == 1
