"""The benchmark suite, collected in a checkout (`pytest --benchmark-only`; a plain `pytest` runs each benchmark
once as a correctness check): the tests live in the package, microbench/bench/test_suite.py, so that an install runs
the same ones (`dawnscope bench`)."""

from microbench.bench.test_suite import bench_env, pytest_generate_tests, test_benchmark  # noqa: F401
