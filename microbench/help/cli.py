"""dawnscope help [TOPIC]: list the documents, or print one (the library: microbench.help.docs)."""

from __future__ import annotations

import argparse
import sys

from microbench.core.args import Parser
from microbench.core.errors import run_command
from microbench.help.docs import find, title, topics


def build_parser() -> argparse.ArgumentParser:
    ap = Parser(
        prog="dawnscope help",
        description="The documentation, from the installed package: without TOPIC the list of documents; with one "
        "(a name such as traces, or the path a message gives, docs/traces.md) that document's text.",
        epilog="Exit codes: 0 done, 2 no such document.",
    )
    ap.add_argument("topic", nargs="?", default=None, help="a document: its name, file name or docs/ path")
    ap.add_argument("--path", action="store_true", help="print where the document is instead of its text")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_command(lambda: _run(args))


def _run(args) -> int:
    if args.topic is None:
        known = topics()
        width = max((len(k) for k in known), default=0)
        print("documents (dawnscope help NAME):")
        for name, path in known.items():
            print(f"  {name:<{width}}  {title(path)}")
        return 0
    path = find(args.topic)
    print(path if args.path else path.read_text(encoding="utf-8"), end="" if not args.path else "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
