"""`python -m microbench.roofline`, the same as `dawnscope roofline`."""

import sys

from microbench.roofline.cli import main

sys.exit(main())
