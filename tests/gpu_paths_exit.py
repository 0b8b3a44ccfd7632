"""Imported by a pre-flight child in tests/test_gpu_paths_context.py: ends that process as ROCm does on a GPU
memory fault (abort: SIGABRT), with core dumps off so that nothing is written into the working folder."""

import os
import resource

resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
os.abort()
