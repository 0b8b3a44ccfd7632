"""`python -m microbench.trace`, the same as `dawnscope trace`."""

import sys

from microbench.__main__ import run

sys.exit(run("trace", None))
