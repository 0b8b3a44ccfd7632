"""`python -m microbench.gate`, the same as `dawnscope gate`."""

import sys

from microbench.gate.cli import main

sys.exit(main())
