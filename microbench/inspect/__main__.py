"""`python -m microbench.inspect`, the same as `dawnscope inspect`."""

import sys

from microbench.__main__ import run

sys.exit(run("inspect", None))
