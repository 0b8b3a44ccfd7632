"""`python -m microbench.compare`, the same as `dawnscope compare`."""

import sys

from microbench.__main__ import run

sys.exit(run("compare", None))
