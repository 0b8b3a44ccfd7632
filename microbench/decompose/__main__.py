"""`python -m microbench.decompose`, the same as `dawnscope decompose`."""

import sys

from microbench.decompose.cli import main

sys.exit(main())
