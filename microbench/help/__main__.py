"""`python -m microbench.help`, the same as `dawnscope help`."""

import sys

from microbench.__main__ import run

sys.exit(run("help", None))
