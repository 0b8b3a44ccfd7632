"""`python -m microbench.tta`, the same as `dawnscope tta`."""

import sys

from microbench.__main__ import run

sys.exit(run("tta", None))
