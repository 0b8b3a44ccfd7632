"""How many Triton kernels a GPU run of a profile compiles, counted on a CPU (the count itself: `python -m inspect.compiles`).

Every case of the profile goes through the `triton` provider as on a GPU of the given family, with
`kernels.triton_runtime.planning` recording, instead of launching, each (kernel, configuration, argument
specialization) the JIT would compile: the autotuner's candidates after its pruning, or the default
configuration with DAWNSCOPE_AUTOTUNE=0. Operands are allocated, never filled (their layout and alignment
is what specializes a kernel). Our CUDA C++ kernels are not counted here: NVRTC builds one program per .cu
file and architecture (two in all), whatever the profile.
"""

from __future__ import annotations

import os
from collections import Counter
from contextlib import ExitStack, contextmanager

import torch

from microbench import kernels
from microbench.core import dtypes
from microbench.core.ops import conv2d, gemm
from microbench.core.targets import dot_input_precision
from microbench.roofline import registry
from microbench.roofline.sass import inspect_build


@contextmanager
def _unfilled_operands():
    """make_inputs without the random fill: `torch.empty` of the same shape, dtype and layout."""

    def empty(shape, dtype, device, gen):
        return torch.empty(shape, dtype=dtypes.torch_dtype(dtype), device=device)

    with ExitStack() as stack:
        for module in (gemm, conv2d):
            stack.enter_context(_swapped(module, "random_operand", empty))
        yield


@contextmanager
def _swapped(owner, attr: str, value):
    """`owner.attr` is `value` inside the block, and what it was after."""
    before = getattr(owner, attr)
    setattr(owner, attr, value)
    try:
        yield
    finally:
        setattr(owner, attr, before)


@contextmanager
def environ(name: str, value: str):
    """The environment variable `name` is `value` inside the block, and what it was (or unset) after."""
    before = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = before


def plan_cases(case_list, family: str, sms: int = 132) -> list:
    """The compiles of these cases on a GPU of `family` (with its `sms`), as recorded by the providers."""
    from microbench.core.cases import make_inputs
    from microbench.kernels import triton_runtime

    kernels.load_all()
    with triton_runtime.planning(family, sms) as compiles, _unfilled_operands():
        for case in case_list:
            p = registry.get(case.family, "triton")
            try:
                registry.bind(p, case, *make_inputs(case))()
            except registry.Unsupported:
                continue
    return compiles


def count(case_list, family: str, sms: int = 132) -> dict:
    compiles = plan_cases(case_list, family, sms)
    by_kernel = Counter(name for name, *_ in set(compiles))
    return {"total": len(set(compiles)), "launch_plans": len(compiles), "by_kernel": dict(sorted(by_kernel.items()))}


# ---- the same compiles ahead of time, for their SASS: spills at the profile's real specializations -------
def _aot_value(spec):
    """A representative argument with the recorded specialization (what aot_compile reads)."""
    kind = spec[0]
    if kind == "constexpr":
        return spec[1]
    if kind == "const":
        return spec[1]
    if kind in ("i32", "i64"):
        base = 2**31 if kind == "i64" else 0
        return base + (32 if spec[1] else 33)
    if kind == "i1":
        return True
    if kind == "ptr":
        return "*" + dtypes.get(dtypes.name_of(getattr(torch, spec[1].removeprefix("torch.")))).triton
    if kind == "desc":
        ty = dtypes.get(dtypes.name_of(getattr(torch, spec[1].removeprefix("torch.")))).triton
        return f"tensordesc<{ty}[{', '.join(map(str, spec[2]))}]>"
    raise ValueError(f"unknown specialization {spec!r}")


def _kernel(name: str):
    from microbench.kernels import conv_triton, gemm_triton

    if name == "triton_gemm":
        return gemm_triton._gemm_kernel
    if name == "triton_gemm_tma":
        return gemm_triton._gemm_tma_kernel
    return conv_triton.KERNELS[name.removeprefix("triton_conv_")]


def inspect_one(plan, target: str) -> dict:
    """Compile one recorded plan for `target` and read its SASS (runs in a worker process)."""
    from microbench.kernels.triton_runtime import aot_build, aot_compile

    name, cfg, spec = plan
    args = {k: _aot_value(v) for k, v in spec}
    args.update(cfg.meta(persistent_param="PERSISTENT" in args))  # the configuration's own block sizes
    if target.startswith("gfx") and "INPUT_PRECISION" in args:  # gfx950 has no xf32: IEEE, as a run there does
        args["INPUT_PRECISION"] = dot_input_precision(target, args["INPUT_PRECISION"] == "tf32")
    dtype = next((v[1] for k, v in spec if v[0] in ("ptr", "desc")), "?").removeprefix("torch.")
    try:
        compiled = aot_compile(_kernel(name), args, target, cfg.options())
        rec = inspect_build(aot_build(name, dtype, cfg, target, compiled))
    except Exception as e:  # noqa: BLE001 - a configuration that does not compile is a finding too
        return {"kernel": name, "config": cfg.label(), "target": target, "error": f"{type(e).__name__}: {e}"[:300]}
    return {**rec.as_dict(), "spec": [[k, list(v)] for k, v in spec]}


def default_plans(profile_cases, family: str) -> list:
    """The compiles of a profile with autotuning off: its default configurations at its real specializations."""
    with environ("DAWNSCOPE_AUTOTUNE", "0"):
        return sorted(set(plan_cases(profile_cases, family)), key=repr)


def inspect_plans(plans, target: str, jobs: int) -> list[dict]:
    """Compile in `jobs` processes (Triton compiles hold the GIL)."""
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(max_workers=jobs) as pool:
        return list(pool.map(inspect_one, plans, [target] * len(plans)))
