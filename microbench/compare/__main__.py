"""`python -m microbench.compare`, the same as `dawnscope compare`."""

import sys

from microbench.compare.cli import main

sys.exit(main())
