"""`python -m microbench.tta`, the same as `dawnscope tta`."""

import sys

from microbench.tta.cli import main

sys.exit(main())
