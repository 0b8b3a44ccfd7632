"""`python -m microbench.gate`, the same as `dawnscope gate`."""

import sys

from microbench.__main__ import run

sys.exit(run("gate", None))
