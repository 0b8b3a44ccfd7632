"""What our Triton kernels share besides their tile configurations: running on a CPU under Triton's
interpreter, compiling ahead of time for a GPU target we do not have, and the Tensor Core evidence that
both give.

Interpretation. Triton 3.9 decides it when a function is decorated: `@triton.jit` reads
`triton.knobs.runtime.interpret` (the environment variable TRITON_INTERPRET) and returns either a
`JITFunction` (compiled for the GPU) or an `InterpretedFunction`. Setting the knob later changes nothing
for kernels already decorated, and setting it early would take the GPU away from the whole process. So
our kernels are decorated normally, and `interpreted(kernel)` builds the interpreter's version of the same
Python function on demand: a wrapper launches that one for CPU tensors and the compiled one for GPU
tensors, in the same process, with nothing to export.

Inside the interpreter a compiled `@triton.jit` function cannot be called (`JITFunction.__call__` refuses
outside a kernel). Our kernels' own helpers are therefore swapped for interpreted versions in the
interpreted copy (its globals), but Triton's standard library written as `@triton.jit` functions and
decorated when triton was imported (`tl.cdiv`, `tl.zeros`, `tl.sum`, `tl.max`, ...) cannot be: our kernels
use only builtins there (`tl.full`, `(x + b - 1) // b`). (Swapping the library module's attributes during
a launch was tried: Triton's lazily imported Gluon package asserts that they are compiled functions.)
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import os
import threading
import types
from collections.abc import Callable

import torch
import triton
import triton.language as tl

from microbench.core import targets
from microbench.roofline import launches
from microbench.roofline.amdgcn import inspect_amd_build, matrix_instructions
from microbench.roofline.registry import Evidence
from microbench.roofline.sass import AotBuild, inspect_build

from .triton_configs import TileConfig, wants_wgmma

# CPU tensors run under the interpreter: a NumPy evaluation of every program instance, about a
# million times slower than the GPU. Problems above this many multiply-adds answer "unsupported" rather
# than stall a run (the quick profile's 512^3 GEMM is 1.3e8; its ResNet-50 3x3 conv is 9.2e8).
INTERPRETER_MAX_MACS = 2.0e8

INTERPRETED_REASON = "interpreted: correctness only, the interpreter's time is not the kernel's"


def interpreted(kernel):
    """The interpreter's version of a `@triton.jit` kernel: `interpreted(k)[grid](*args, **meta)`."""
    return _Interpreted(_interpreted(getattr(kernel, "fn", kernel)))


_INTERPRETED: dict = {}  # python function -> its InterpretedFunction
_NAMESPACES: dict[int, dict] = {}  # id(module globals) -> the interpreted copy of those globals


def squeeze_scalar_index() -> bool:
    """Make the interpreter's scalars usable as range() bounds on numpy 2.4 and later, on any Triton.

    The interpreter holds every scalar (a kernel's int arguments such as K, `tl.program_id`, values
    computed from them) as a one-element 1-D array, and Triton 3.6's interpreter converts one for
    `range()` with `int(array)`, which numpy 2.4 refuses ("only 0-dimensional arrays can be converted to
    Python scalars"): every `for k0 in range(0, K, BLOCK_K)`, and the persistent loops that start at
    `tl.program_id(0)`, failed. Triton 3.9 converts `int(array.squeeze())`. Where the installed
    interpreter has the old form, its tensor patch is wrapped to set the squeezing one; the kernels and
    their compiled code stay as they are. Returns True when it patched (False: nothing to do)."""
    from triton.runtime import interpreter

    original = getattr(interpreter, "_patch_lang_tensor", None)
    if original is None or getattr(original, "squeezes_index", False):
        return False
    try:
        old_form = "int(self.handle.data)" in inspect.getsource(original)
    except (OSError, TypeError):
        return False
    if not old_form:
        return False

    def patch_lang_tensor(tensor, scope):
        original(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.squeeze()))

    patch_lang_tensor.squeezes_index = True
    interpreter._patch_lang_tensor = patch_lang_tensor
    return True


def _interpreted(fn):
    """An InterpretedFunction of a copy of `fn` whose globals see interpreted versions of the
    `@triton.jit` functions of its module (and of theirs), so that nothing compiled is called inside."""
    from triton.runtime.interpreter import InterpretedFunction

    squeeze_scalar_index()

    if fn in _INTERPRETED:
        return _INTERPRETED[fn]
    ns = _namespace(fn.__globals__)  # may already have made ours, through a function calling fn
    if fn not in _INTERPRETED:
        clone = types.FunctionType(fn.__code__, ns, fn.__name__, fn.__defaults__, fn.__closure__)
        functools.update_wrapper(clone, fn)
        clone.__kwdefaults__ = fn.__kwdefaults__
        _INTERPRETED[fn] = InterpretedFunction(clone)
    return _INTERPRETED[fn]


def _namespace(module_globals: dict) -> dict:
    from triton.runtime.jit import JITFunction

    key = id(module_globals)
    if key not in _NAMESPACES:
        # Registered before it is filled: functions that call each other find it instead of recursing.
        # The interpreter also adds its own names to the globals it runs in: to this copy, not the module.
        ns = _NAMESPACES[key] = dict(module_globals)
        for name, v in module_globals.items():
            if isinstance(v, JITFunction):
                ns[name] = _interpreted(v.fn)
    return _NAMESPACES[key]


class _Interpreted:
    def __init__(self, fn):
        self.fn = fn

    def __getitem__(self, grid):
        return self.fn[grid]


def jit_function(kernel):
    """The compiled (JITFunction) version, even when TRITON_INTERPRET=1 made `kernel` an interpreted one."""
    from triton.runtime.jit import JITFunction

    if isinstance(kernel, JITFunction):
        return kernel
    return _jit(getattr(kernel, "fn", kernel))


@functools.cache
def _jit(fn):
    from triton.runtime.jit import JITFunction

    return JITFunction(fn)


@triton.jit
def grouped_tile(tile, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    """Tile number -> (matrix, first row, first column) of an [M, N] output (or of a batch of them).
    Grouped order: GROUP_M consecutive tiles walk down M before moving along N, so that the programs
    running at the same time share their operand panels in L2."""
    tiles_m = (M + BLOCK_M - 1) // BLOCK_M
    tiles_n = (N + BLOCK_N - 1) // BLOCK_N
    bz = tile // (tiles_m * tiles_n)
    t = tile % (tiles_m * tiles_n)
    tiles_in_group = GROUP_M * tiles_n
    first_m = (t // tiles_in_group) * GROUP_M
    group_rows = tl.minimum(tiles_m - first_m, GROUP_M)
    pid_m = first_m + (t % tiles_in_group) % group_rows
    pid_n = (t % tiles_in_group) // group_rows
    return bz, pid_m * BLOCK_M, pid_n * BLOCK_N


def interpreter_refusal(macs: int) -> str | None:
    if macs > INTERPRETER_MAX_MACS:
        return (
            f"{macs:.3g} multiply-adds is too large for the Triton interpreter on a CPU "
            f"(limit {INTERPRETER_MAX_MACS:.3g}); the GPU runs it"
        )
    return None


def autotune(kernel, configs: list, key: list[str], prune=None):
    """triton.autotune with a shorter benchmark per candidate than Triton's default (25 ms warm-up,
    100 ms of repeats): the full profile tunes hundreds of (shape, dtype) keys. The choice only picks a
    configuration; the reported time is measured afterwards by microbench.roofline.timing."""

    def bench(fn, quantiles):
        return triton.testing.do_bench(fn, warmup=5, rep=25, quantiles=quantiles)

    return triton.autotune(
        configs=configs, key=key, do_bench=bench, prune_configs_by={"early_config_prune": prune} if prune else None
    )(kernel)


# --------------------------------------------------------------------------------------------------
# What ran: the wrappers report each GPU launch (microbench.roofline.launches), so that an evidence hook can
# read the machine code of the kernel that actually ran (the autotuner's choice).


def report_launch(kernel_name: str, compiled, config_label: str) -> None:
    """Into microbench.roofline.launches' record, with Triton's CompiledKernel as the launch's detail."""
    launches.report_launch(kernel_name, config_label, detail=compiled)


# --------------------------------------------------------------------------------------------------
# Ahead-of-time compilation for a target we do not have.


def gpu_target(target: str):
    """`sm_80` / `sm_90` / `gfx942` -> Triton's GPUTarget (sm_90 compiles for sm_90a, which has wgmma)."""
    from triton.backends.compiler import GPUTarget

    if target.startswith("gfx"):
        return GPUTarget("hip", target, 64)
    return GPUTarget("cuda", int(target.removeprefix("sm_")), 32)


def aot_compile(kernel, args: dict, target: str, options: dict):
    """Compile `kernel` for `target` (sm_80, sm_90, or an AMD gfx arch) with the argument types and specializations the JIT would give
    these representative arguments: ints equal to 1 become constants, ints and pointers divisible by 16
    carry that hint (so the code is what a real aligned launch gets). Values of `args`: an int, a
    constexpr value for constexpr parameters, a string type for pointers (`*fp16`, assumed 16-byte
    aligned) or for tensor descriptors (`tensordesc<fp16[1, 128, 64]>`). Returns the CompiledKernel."""
    import triton
    from triton.compiler import ASTSource

    fn = jit_function(kernel)
    signature, constexprs, attrs = {}, {}, {}
    for i, p in enumerate(fn.params):
        if p.name not in args:
            raise KeyError(f"aot_compile({fn.__name__}): no value for argument {p.name!r}")
        v = args[p.name]
        if p.is_constexpr:
            signature[p.name] = "constexpr"
            constexprs[p.name] = v
        elif isinstance(v, bool):
            signature[p.name] = "i1"
        elif isinstance(v, int):
            if v == 1:
                signature[p.name] = "constexpr"
                constexprs[p.name] = 1
            else:
                signature[p.name] = "i32" if -(2**31) <= v < 2**31 else "i64"
                if v % 16 == 0:
                    attrs[(i,)] = [["tt.divisibility", 16]]
        elif isinstance(v, str):
            signature[p.name] = v
            if v.startswith("*"):
                attrs[(i,)] = [["tt.divisibility", 16]]
        else:
            raise TypeError(f"aot_compile: unsupported value {v!r} for {p.name}")
    src = ASTSource(fn=fn, signature=signature, constexprs=constexprs, attrs=attrs)
    try:
        return triton.compile(src, target=gpu_target(target), options=options)
    except Exception as e:  # noqa: BLE001 - one known transient failure is retried, anything else is raised
        if not (target.startswith("gfx") and any(m in str(e) for m in AMD_TRANSIENT)):
            raise
    return triton.compile(src, target=gpu_target(target), options=options)


# Triton 3.6 sometimes emits, for an OCP fp8 tl.dot on gfx942, an instruction gfx942 lacks
# (v_cvt_scalef32_pk_f16_fp8): the assembler says "instruction not supported on this GPU" and ld.lld stops
# ("target emulation unknown"). Seen on a plain 128x128 tl.dot, then the same compile succeeded on the next try
# (docs/amd.md); it is retried once.
AMD_TRANSIENT = ("instruction not supported on this GPU", "ld.lld: error")


def aot_build(
    kernel_name: str,
    dtype: str,
    cfg,
    target: str,
    compiled,
    *,
    default: bool = False,
    note: str = "",
    variant: str = "",
):
    """A compiled kernel as the static-inspection record it becomes (`microbench.roofline.sass.AotBuild`): its
    cubin (NVIDIA) or AMDGCN assembly (AMD). `variant` joins the configuration label (e.g. an fp8 flavour)."""

    amd = target.startswith("gfx")
    return AotBuild(
        kernel=kernel_name,
        config=" ".join(w for w in (dtype, variant, cfg.label()) if w),
        target=target,
        cubin=b"" if amd else compiled.asm["cubin"],
        amdgcn=compiled.asm["amdgcn"] if amd else "",
        default=default,
        wants_wgmma=wants_wgmma(target, dtype, cfg),
        dtype=dtype,
        dynamic_shared_bytes=compiled.metadata.shared,
        num_warps=cfg.num_warps,
        note=note,
    )


# --------------------------------------------------------------------------------------------------
# Evidence


def sass_evidence(cubin: bytes, kernel: str, config: str, target: str, dtype: str, how: str) -> Evidence:
    rec = inspect_build(AotBuild(kernel=kernel, config=f"{dtype} {config}", target=target, cubin=cubin, dtype=dtype))
    return Evidence("yes" if rec.tensor_core_instructions else "no", f"{how}: {rec.evidence()}")


def mfma_count(amdgcn: str) -> int:
    """AMD matrix-core instructions in an amdgcn listing."""
    return sum(matrix_instructions(amdgcn).values())


def amdgcn_evidence(asm: str, kernel: str, config: str, arch: str, dtype: str) -> Evidence:
    """The kernel that ran on an AMD GPU: its matrix instructions, and a fallback (an fp8 flavour the chip
    upcasts, fp32 without xf32) said as such; the verdict stays "yes" (matrix cores did run it)."""
    rec = inspect_amd_build(
        AotBuild(kernel=kernel, config=f"{dtype} {config}", target=arch, cubin=b"", amdgcn=asm, dtype=dtype)
    )
    return Evidence(
        "no" if rec.matrix_cores == "no" else "yes",
        f"amdgcn of the kernel that ran: {rec.evidence()}",
        fallback=rec.fallback,
    )


def ran_evidence(call: Callable[[], object], device, dtype: str) -> Evidence:
    """GPU: run the call once and read the machine code of the kernel(s) it launched."""
    with launches.launch_record() as ran:
        call()
        device.synchronize()
    if not ran:
        return Evidence("unknown", "the call launched no Triton kernel")
    last = ran[-1]
    asm = last.detail.asm
    if "cubin" in asm:
        return sass_evidence(asm["cubin"], last.kernel, last.config, device.arch, dtype, "SASS of the kernel that ran")
    if "amdgcn" in asm:
        return amdgcn_evidence(asm["amdgcn"], last.kernel, last.config, device.arch, dtype)
    return Evidence("unknown", f"no cubin or amdgcn in the compiled kernel ({', '.join(asm)})")


def static_evidence(records: list, dtype: str) -> Evidence:
    """CPU: the ahead-of-time SASS of the configuration(s) a GPU would run by default."""
    if not records:
        return Evidence("unknown", f"no ahead-of-time build for {dtype}")
    tc = [r.tensor_core_instructions > 0 for r in records]
    verdict = "yes" if all(tc) else "no" if not any(tc) else "unknown"
    text = "static (compiled ahead of time, not run): " + "; ".join(r.evidence() for r in records)
    return Evidence(verdict, text + amd_fallback_note(dtype))


def amd_fallback_note(dtype: str) -> str:
    """The AMD chips on which our kernels would run `dtype` on a fallback path, from the targets' data (the rule
    tests/test_inspect_amd.py checks against real assembly), without compiling for them here."""
    said = [f"{t}: {why}" for t in targets.AMD_TARGETS if (why := targets.predicted_fallback(t, dtype))]
    return f"; on AMD, a fallback path: {'; '.join(said)}" if said else ""


# ---- the provider hooks shared by the Triton GEMM and convolution -----------------------------------------
def provider_enabled(device) -> str | None:
    """On a GPU the compiled kernels run; on a CPU they need Triton's interpreter."""
    if device.is_gpu:
        return None
    try:
        import triton.runtime.interpreter  # noqa: F401
    except Exception as e:  # noqa: BLE001
        return f"unavailable: the Triton interpreter does not import ({type(e).__name__}: {e})"
    return None


def provider_timed(device) -> str | None:
    return None if device.is_gpu else INTERPRETED_REASON


def provider_evidence(static_records_of: Callable[[object], list]):
    """The `evidence` hook: on a GPU the SASS (or amdgcn) of the kernel that ran; on a CPU the ahead-of-time
    SASS of the records `static_records_of(case)` returns."""

    def evidence(case, device, call) -> Evidence:
        try:
            if device.is_gpu:
                return ran_evidence(call, device, case.dtype)
            return static_evidence(static_records_of(case), case.dtype)
        except Exception as e:  # noqa: BLE001 - evidence is best effort; the correctness result stands without it
            return Evidence(
                "unknown", f"no static evidence: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
            )

    return evidence


# --------------------------------------------------------------------------------------------------
# Compile budget: what a GPU run would compile, counted on a CPU. Under `planning(family)` the wrappers take
# their GPU path with CPU tensors, and instead of launching they record each (kernel, configuration,
# argument specialization) the JIT would compile: the autotuner's candidates after pruning, or the one
# fixed configuration. The same Triton rule specializes the arguments as at run time: an int equal to 1
# becomes a constant, ints and pointers divisible by 16 carry that hint, ints choose i32 or i64.

AUTOTUNE_ENV = "DAWNSCOPE_AUTOTUNE"


def autotune_enabled() -> bool:
    """DAWNSCOPE_AUTOTUNE=0 turns the autotuner off: the wrappers use their family's default configuration
    (a few compiles instead of hundreds: scripts/device-check runs with it)."""
    return os.environ.get(AUTOTUNE_ENV, "1").strip().lower() not in ("0", "false", "no", "off")


_planning = threading.local()


@contextlib.contextmanager
def planning(family: str, sms: int = 132):
    """Record compiles instead of launching, as a GPU of `family` with `sms` multiprocessors would."""
    prev = getattr(_planning, "state", None)
    _planning.state = {"family": family, "sms": sms, "compiles": []}
    try:
        yield _planning.state["compiles"]
    finally:
        _planning.state = prev


def planned() -> dict | None:
    return getattr(_planning, "state", None)


def _spec(v):
    """The JIT's specialization of one argument value (what makes two launches share a compiled kernel)."""
    if isinstance(v, bool):
        return ("i1",)
    if isinstance(v, int):
        return ("const", 1) if v == 1 else ("i32" if -(2**31) <= v < 2**31 else "i64", v % 16 == 0)
    if isinstance(v, torch.Tensor):
        return ("ptr", str(v.dtype), v.data_ptr() % 16 == 0)
    if hasattr(v, "block_shape") and hasattr(v, "base"):  # a TensorDescriptor: its type carries the block
        return ("desc", str(v.base.dtype), tuple(v.block_shape))
    return ("const", v if isinstance(v, (str, float, type(None))) else repr(v))


def record_plan(kernel, name: str, args: tuple, meta: dict, configs: list, prune=None, pre_hook=None) -> None:
    """Record the compiles of one launch: each configuration (after the autotuner's pruning) with the
    specialization of the arguments. `configs`: TileConfigs; `meta`: constexpr keywords of the launch."""
    fn = jit_function(kernel)
    named = dict(zip(fn.arg_names, args))
    named.update(meta)
    if prune is not None:
        tc = {c.label(): c for c in configs}
        kept = prune([c.triton_config() for c in configs], named)
        configs = [tc[TileConfig_of(k).label()] for k in kept]
    constexpr = {p.name for p in fn.params if p.is_constexpr}
    for cfg in configs:
        full = {**named, **cfg.meta(persistent_param="PERSISTENT" in fn.arg_names)}
        if pre_hook is not None:
            pre_hook(full)
        spec = tuple(
            (k, ("constexpr", full[k]) if k in constexpr else _spec(full[k])) for k in fn.arg_names if k in full
        )
        planned()["compiles"].append((name, cfg, spec))


def TileConfig_of(config):  # noqa: N802 - a late import keeps triton_configs free of triton_runtime

    return TileConfig.of(config)


def count_compiles(compiles: list) -> int:
    """Distinct compiled kernels: the JIT compiles each (kernel, configuration, specialization) once."""
    return len(set(compiles))
