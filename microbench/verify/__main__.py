"""`python -m microbench.verify`, the same as `dawnscope verify`."""

import sys

from microbench.__main__ import run

sys.exit(run("verify", None))
