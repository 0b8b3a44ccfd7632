"""`dawnscope --version` (a user's first question about an install) printed "unknown command '--version'"."""

from __future__ import annotations

import tomllib

from microbench.__main__ import main
from tests.conftest import REPO


def test_version(capsys):
    assert main(["--version"]) == 0
    out = capsys.readouterr().out.strip()
    expected = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert out.startswith(f"dawnscope {expected}")


def test_no_command_is_the_usage_and_exit_2(capsys):
    assert main([]) == 2
    assert "dawnscope --version" in capsys.readouterr().out
