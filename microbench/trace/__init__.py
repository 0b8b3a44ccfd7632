"""The trace command's library: one reader per profiler format into one Timeline, kernel classification, metrics,
the one GPU time breakdown and the one trace analysis (analysis.TraceAnalysis). `dawnscope trace`: cli.py."""
