"""`python -m microbench.predict`, the same as `dawnscope predict`."""

import sys

from microbench.__main__ import run

sys.exit(run("predict", None))
