"""Communication cost of data-parallel training: collectives, DDP steps, multi-rank traces, a scaling model.

torch.distributed is the engine (gloo on CPUs, NCCL / RCCL on GPUs); nothing here moves bytes itself.
Modules: busbw (nccl-tests formulas), world (processes, ports, timeouts), collectives (benchmark with
checks), ddp (a model's DDP step split), ranks (one rank's trace reduced; calls matched across ranks), job (a
whole job's ranks combined), engine (the workers that read them: a process pool or Dask), scale (the scaling
model), fabrics (presets in microbench/data/fabrics.toml). Everything reads traces through the typed timeline
(microbench/trace/timeline.py) and finds communication by the kernel rules' `comm` class.
"""
