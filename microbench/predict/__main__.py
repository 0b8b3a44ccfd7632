"""`python -m microbench.predict`, the same as `dawnscope predict`."""

import sys

from microbench.predict.cli import main

sys.exit(main())
