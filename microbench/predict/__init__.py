"""What a workload would take on another chip: a trace's kernels (or a model's recorded operators) moved to a
target device through its achievable compute per precision, its achievable memory bandwidth, its SM / CU count
(wave quantization) and its launch floor; communication through the fabric presets; CPU-side gaps held.
The command is microbench/predict/cli.py; definitions and the validation are in docs/predict.md."""
