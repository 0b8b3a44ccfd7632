"""dawnscope mcp [--allow DIR]: serve the library's analyses to an agent over the Model Context Protocol (stdio),
read-only (the library: microbench.mcp.server; docs/agents.md)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from microbench.core.args import Parser
from microbench.core.errors import InputError, run_command
from microbench.mcp.server import build_server


def build_parser() -> argparse.ArgumentParser:
    ap = Parser(
        prog="dawnscope mcp",
        description="A Model Context Protocol server on stdin / stdout for agents (Claude Code, Cursor, VS Code, any "
        "MCP client): tools that read traces, compare captures, gate them, read results files and explain kernel "
        "names, each answer the document `--json` writes with what it cannot answer. Read-only. Needs the mcp SDK: "
        "pip install 'dawnscope[mcp]'.",
        epilog="Exit codes: 0 the client closed the session, 2 bad input (a folder that does not exist; no mcp SDK).",
    )
    ap.add_argument(
        "--allow",
        action="append",
        type=Path,
        default=None,
        metavar="DIR",
        help="a folder whose files the tools may read (repeatable; relative paths are taken from the first); "
        "default: the current folder",
    )
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_command(lambda: _run(args))


def _run(args) -> int:
    allowed = args.allow or [Path.cwd()]
    for d in allowed:
        if not d.is_dir():
            raise InputError(d, "not a folder", key="--allow")
    build_server(allowed).run("stdio")
    return 0


if __name__ == "__main__":
    sys.exit(main())
