"""The DAWNBench / MLPerf benchmark models and their training steps."""
