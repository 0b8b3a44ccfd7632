"""`dawnscope inspect`: our Triton and CUDA C++ kernels compiled ahead of time, their matrix instructions,
registers, spills and occupancy (cli.py); at real shapes: compiles.py."""
