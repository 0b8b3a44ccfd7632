"""Communication cost of data-parallel training: collectives, DDP steps, multi-rank traces, a scaling model.

torch.distributed is the engine (gloo on CPUs, NCCL / RCCL on GPUs); nothing here moves bytes itself.
Modules: busbw (nccl-tests formulas), world (processes, ports, timeouts), collectives (benchmark with
checks), ddp (a model's DDP step split), ranks (several ranks' traces), scale (the scaling model),
fabrics (presets in microbench/data/fabrics.toml).
"""
