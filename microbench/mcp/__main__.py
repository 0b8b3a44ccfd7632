"""`python -m microbench.mcp`, the same as `dawnscope mcp`."""

import sys

from microbench.__main__ import run

sys.exit(run("mcp", None))
