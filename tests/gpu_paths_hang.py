"""Imported by a pre-flight child in tests/test_gpu_paths_context.py: never returns, as a kernel that hangs."""

import time

time.sleep(3600)
