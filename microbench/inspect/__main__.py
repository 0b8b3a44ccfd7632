"""`python -m microbench.inspect`, the same as `dawnscope inspect`."""

import sys

from microbench.inspect.cli import main

sys.exit(main())
