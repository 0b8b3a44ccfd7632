"""The roofline command's library (the measurement harness): the provider registry, timing, ceilings, the runner,
Tensor Core evidence, static SASS / AMDGCN inspection. `dawnscope roofline`: cli.py."""
