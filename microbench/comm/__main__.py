"""`python -m microbench.comm`, the same as `dawnscope comm`."""

import sys

from microbench.comm.cli import main

sys.exit(main())
