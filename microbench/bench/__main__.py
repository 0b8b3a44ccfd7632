"""`python -m microbench.bench`, the same as `dawnscope bench`."""

import sys

from microbench.__main__ import run

sys.exit(run("bench", None))
