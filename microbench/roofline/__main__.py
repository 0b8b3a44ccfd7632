"""`python -m microbench.roofline`, the same as `dawnscope roofline`."""

import sys

from microbench.__main__ import run

sys.exit(run("roofline", None))
