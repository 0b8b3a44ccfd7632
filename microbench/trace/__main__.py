"""`python -m microbench.trace`, the same as `dawnscope trace`."""

import sys

from microbench.trace.cli import main

sys.exit(main())
