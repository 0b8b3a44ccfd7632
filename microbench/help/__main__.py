"""`python -m microbench.help`, the same as `dawnscope help`."""

import sys

from microbench.help.cli import main

sys.exit(main())
