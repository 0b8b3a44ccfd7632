"""`python -m microbench.comm`, the same as `dawnscope comm`."""

import sys

from microbench.__main__ import run

sys.exit(run("comm", None))
