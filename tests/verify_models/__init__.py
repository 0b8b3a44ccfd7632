"""KernelBench-style single-file models (a `Model` and its inputs, one file each) for `dawnscope verify`'s checks
kept in docs/verify/: workloads the findings' rules were not written on. Each file's `workload()` is a
`module:factory` (`--model tests.verify_models.conv_stack:workload`)."""
