"""`dawnscope COMMAND ...` (the console script) and `python -m microbench COMMAND ...`: one door to the commands,
each of which also runs as `python -m microbench.COMMAND`."""

from __future__ import annotations

import importlib
import importlib.metadata
import sys
from pathlib import Path

import tomllib

from microbench.core.errors import missing_extra

# command -> module; the module's main(argv) does the work (argument parsing and calls into one library)
COMMANDS = {
    "roofline": "microbench.roofline.cli",
    "bench": "microbench.bench.cli",
    "trace": "microbench.trace.cli",
    "compare": "microbench.compare.cli",
    "gate": "microbench.gate.cli",
    "verify": "microbench.verify.cli",
    "mcp": "microbench.mcp.cli",
    "help": "microbench.help.cli",
    "decompose": "microbench.decompose.cli",
    "comm": "microbench.comm.cli",
    "predict": "microbench.predict.cli",
    "inspect": "microbench.inspect.cli",
    "tta": "microbench.tta.cli",
}
USAGE = (
    "usage: dawnscope {" + ",".join(COMMANDS) + "} ...   (dawnscope COMMAND --help for each; dawnscope help for the "
    "documents the messages name; dawnscope --version)"
)


def version() -> str:
    """The installed distribution's version; in a source checkout that is not installed, pyproject.toml's."""
    try:
        return importlib.metadata.version("dawnscope")
    except importlib.metadata.PackageNotFoundError:
        pyproject = Path(__file__).resolve().parent.parent / "pyproject.toml"
        return tomllib.loads(pyproject.read_text())["project"]["version"] + " (source checkout)"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    if not args or args[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if args else 2
    if args[0] in ("-V", "--version"):
        print(f"dawnscope {version()}")
        return 0
    command, rest = args[0], args[1:]
    if command not in COMMANDS:
        print(f"dawnscope: error: unknown command {command!r}; {USAGE.removeprefix('usage: ')}", file=sys.stderr)
        return 2
    return run(command, rest)


def run(command: str, argv: list[str] | None, **kw) -> int:
    """One command's main(argv): how a command hands its arguments to another (`roofline --model` to
    decompose) without importing the other's module. A command whose module needs an optional package that is not
    installed says which extra brings it (one line, exit 2)."""
    try:
        module = importlib.import_module(COMMANDS[command])
    except ModuleNotFoundError as e:
        line = missing_extra(e)
        if line is None:
            raise
        print(f"error: dawnscope {command}: {line}", file=sys.stderr)
        return 2
    return module.main(argv, **kw)


if __name__ == "__main__":
    sys.exit(main())
