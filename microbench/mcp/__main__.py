"""`python -m microbench.mcp`, the same as `dawnscope mcp`."""

import sys

from microbench.mcp.cli import main

sys.exit(main())
