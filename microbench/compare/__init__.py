"""`dawnscope compare`: results files, pytest-benchmark files, traces (each analysed as `dawnscope trace --json`
does) or inspect files side by side (cli.py); the tables are drawn by microbench.report."""
