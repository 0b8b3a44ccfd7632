"""`dawnscope bench`: the pytest-benchmark suite (test_suite.py: a profile's cases x providers, each checked against
float64, timed and judged as `roofline` judges them) and its pytest plugin (plugin.py: benchmarks timed only with
--benchmark-only, the machine's fingerprint and conditions in the JSON, our columns after pytest-benchmark's table),
run from an install (cli.py)."""
