"""Errors that end a command with exit code 2 and one line naming the file, key and value."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Callable


class InputError(Exception):
    """Bad user input (config, trace or results file). Printed as one line; exit code 2."""

    exit_code = 2

    def __init__(self, path: str | Path | None, problem: str, key: str | None = None, value=None):
        self.path = str(path) if path is not None else None
        self.key = key
        self.value = value
        self.problem = problem
        super().__init__(self.line())

    def line(self) -> str:
        where = self.path or "<input>"
        if self.key is not None:
            where += f": {self.key}"
            if self.value is not None:
                where += f" = {self.value!r}"
        return f"{where}: {self.problem}"


class ConfigError(InputError):
    pass


def run_command(body: Callable[[], int]) -> int:
    """A command's body with its one-line endings: bad input -> `error: LINE`, exit 2; Ctrl-C ->
    `interrupted`, exit 130 (never a traceback)."""
    try:
        return body()
    except InputError as e:
        line = e.line() if e.path else e.line().replace("<input>: ", "", 1)  # an option, not a file
        print(f"error: {line}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
