"""Imported by a pre-flight child in tests/test_gpu_paths_context.py: ends that process as ROCm does on a GPU
memory fault (abort: SIGABRT)."""
import os

os.abort()
