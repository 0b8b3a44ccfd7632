"""`python -m microbench.decompose`, the same as `dawnscope decompose`."""

import sys

from microbench.__main__ import run

sys.exit(run("decompose", None))
