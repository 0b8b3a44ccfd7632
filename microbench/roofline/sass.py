"""Static evidence from machine code, without a GPU: assemble PTX with the ptxas that ships inside Triton's
package, disassemble cubins with its cuobjdump, and count what matters (Tensor Core instructions, FFMA,
registers, shared memory, spills / local memory).

The contract for kernels that can be inspected: a module in `kernels/` defines

    def aot_builds(target: str) -> list[AotBuild]     # target: "sm_80" or "sm_90"

which compiles each of its configurations ahead of time for `target` (Triton: `triton.compile` with a
`GPUTarget`; CUDA C++: NVRTC to PTX, then `assemble`). `dawnscope inspect` walks those modules.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from collections import Counter
from functools import lru_cache
from pathlib import Path

from microbench.core.targets import NVIDIA_TARGETS, nvidia_warps_per_sm
from microbench.roofline import amdgcn
from microbench.roofline.aot import AotBuild, StaticRecord

# SASS opcodes we count. Tensor Core ones: HMMA (fp16/bf16/tf32 mma.sync), HGMMA (Hopper wgmma, fp16/bf16/
# tf32), QGMMA (Hopper wgmma fp8), IMMA (int8 mma.sync), IGMMA (Hopper int8 wgmma), DMMA (fp64).
TENSOR_OPCODES = ("HMMA", "HGMMA", "QGMMA", "IMMA", "IGMMA", "DMMA")
COUNTED_OPCODES = TENSOR_OPCODES + ("FFMA", "LDL", "STL", "LDSM", "LDGSTS", "UTMALDG")
TARGETS = NVIDIA_TARGETS  # this module's targets; the inspection's are microbench.core.targets.TARGETS

_INSN = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_]*)(?:\.[A-Z0-9_.]+)?\b")
_RES = re.compile(r"REG:(\d+)\s+STACK:(\d+)\s+SHARED:(\d+)\s+LOCAL:(\d+)")
_PTXAS_SPILL = re.compile(r"(\d+) bytes spill stores, (\d+) bytes spill loads")


class ToolchainError(RuntimeError):
    pass


@lru_cache(maxsize=1)
def toolchain() -> dict[str, Path]:
    """ptxas, cuobjdump and nvdisasm from Triton's package (no CUDA toolkit needed)."""
    try:
        import triton
    except ImportError as e:
        raise ToolchainError(f"triton is not installed: {e}") from None
    base = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"
    tools = {}
    for name in ("ptxas", "cuobjdump", "nvdisasm"):
        p = base / name
        if not p.is_file():
            found = shutil.which(name)
            if not found:
                raise ToolchainError(f"{name} not found in {base} or on PATH")
            p = Path(found)
        tools[name] = p
    return tools


def ptxas_arch(target: str) -> str:
    """sm_90 kernels that use wgmma need the architecture-specific sm_90a."""
    return "sm_90a" if target == "sm_90" else target


# ptxas's refusal of a PTX file newer than itself, e.g. Triton 3.6's ptxas 12.8 reading NVRTC 13's PTX:
# "ptxas k.ptx, line 5; fatal   : Unsupported .version 9.0; current version is '8.7'"
_TOO_NEW = re.compile(r"Unsupported \.version (\d+\.\d+); current version is '(\d+\.\d+)'")
_PTX_VERSION = re.compile(r"^(\s*\.version\s+)(\d+\.\d+)", re.MULTILINE)


def ptx_version(ptx: str) -> str | None:
    m = _PTX_VERSION.search(ptx)
    return m.group(2) if m else None


def lower_ptx_version(ptx: str, version: str) -> str:
    """The same PTX declaring ISA `version`: right when every instruction and directive it uses exists in
    that ISA (ptxas then accepts it); ptxas refuses it otherwise, with the line that needs the newer ISA."""
    return _PTX_VERSION.sub(lambda m: m.group(1) + version, ptx, count=1)


def _ptxas(ptx: str, target: str) -> tuple[subprocess.CompletedProcess, bytes]:
    with tempfile.TemporaryDirectory() as d:
        src, out = Path(d) / "k.ptx", Path(d) / "k.cubin"
        src.write_text(ptx)
        proc = subprocess.run(
            [str(toolchain()["ptxas"]), f"-arch={ptxas_arch(target)}", "-v", "-o", str(out), str(src)],
            capture_output=True,
            text=True,
            timeout=300,
        )
        return proc, (out.read_bytes() if proc.returncode == 0 else b"")


def assemble(ptx: str, target: str) -> tuple[bytes, str]:
    """PTX -> cubin with Triton's ptxas. Returns (cubin, ptxas -v log).

    PTX from an NVRTC newer than this ptxas (NVRTC 13 writes `.version 9.0`, Triton 3.6's ptxas 12.8 reads
    up to 8.7) is lowered to the newest version ptxas names, and the log's first line says so; when the
    code needs the newer ISA, ptxas refuses the lowered file too and the error says both."""
    proc, cubin = _ptxas(ptx, target)
    if proc.returncode == 0:
        return cubin, proc.stderr
    too_new = _TOO_NEW.search(proc.stderr)
    if not too_new:
        raise ToolchainError(f"ptxas -arch={ptxas_arch(target)} failed:\n{proc.stderr.strip()}")
    have, accepted = too_new.groups()
    lowered, cubin = _ptxas(lower_ptx_version(ptx, accepted), target)
    if lowered.returncode != 0:
        raise ToolchainError(
            f"ptxas -arch={ptxas_arch(target)} refuses PTX .version {have} (it reads up to {accepted}), "
            f"and the PTX lowered to .version {accepted} uses what that ISA lacks:\n"
            f"{lowered.stderr.strip()}"
        )
    return cubin, f"{PTX_LOWERED_NOTE.format(have=have, accepted=accepted)}\n{lowered.stderr}"


PTX_LOWERED_NOTE = (
    "PTX .version {have} lowered to {accepted}, the newest this ptxas reads (the code needs no newer ISA)"
)


@lru_cache(maxsize=32)  # several AotBuilds may share one cubin (one kernel each): disassemble it once
def _cuobjdump(cubin: bytes, flag: str) -> str:
    with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as f:
        f.write(cubin)
        path = f.name
    try:
        proc = subprocess.run([str(toolchain()["cuobjdump"]), flag, path], capture_output=True, text=True, timeout=300)
    finally:
        os.unlink(path)
    if proc.returncode != 0:
        raise ToolchainError(f"cuobjdump {flag} failed: {proc.stderr.strip()}")
    return proc.stdout


def disassemble(cubin: bytes) -> str:
    return _cuobjdump(cubin, "-sass")


# A kernel's section in cuobjdump's listings: "Function : NAME" (-sass) or "Function NAME:" (-res-usage).
_FUNCTION = re.compile(r"^\s*Function\s*:?\s*([^\s:]+):?\s*$", re.MULTILINE)


@lru_cache(maxsize=32)
def _sections(listing: str) -> dict[str, str]:
    marks = list(_FUNCTION.finditer(listing))
    return {
        m.group(1): listing[m.start() : marks[i + 1].start() if i + 1 < len(marks) else len(listing)]
        for i, m in enumerate(marks)
    }


def function_section(listing: str, function: str) -> str:
    """The part of a cuobjdump listing that belongs to `function` (a cubin holding several kernels)."""
    sections = _sections(listing)
    if function not in sections:
        raise ToolchainError(f"no function {function} in the cubin (has: {', '.join(sections)})")
    return sections[function]


def opcode_counts(sass: str) -> Counter:
    return Counter(m.group(1) for m in _INSN.finditer(sass))


# A Tensor Core opcode with its modifiers: HMMA.16816.F32.BF16, HGMMA.64x128x16.F32.BF16
_TC_FULL = re.compile(
    r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P[T0-9]+\s+)?((?:" + "|".join(TENSOR_OPCODES) + r")(?:\.[A-Za-z0-9_]+)*)"
)
_ADDR = re.compile(r"/\*([0-9a-f]{4,})\*/")
_BRA = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P[T0-9]+\s+)?BRA(?:\.[A-Z.]+)?\s+(?:`\(\S+\)|0x([0-9a-f]+))")


def tc_per_k_step(sass: str) -> int | None:
    """Tensor Core instructions per iteration of the innermost loop that has any (the K loop), from the
    backward branches of the listing; None when no loop holds one."""
    lines = sass.splitlines()
    addrs = [(int(m.group(1), 16), ln) for ln in lines if (m := _ADDR.search(ln))]
    best = None
    for addr, ln in addrs:
        b = _BRA.search(ln)
        if not b or b.group(2) is None or int(b.group(2), 16) >= addr:
            continue
        start = int(b.group(2), 16)
        n = sum(1 for a, body in addrs if start <= a <= addr and _TC_FULL.search(body))
        if n and (best is None or addr - start < best[0]):
            best = (addr - start, n)
    return best[1] if best else None


def inspect_build(b: AotBuild, dynamic_shared_bytes: int | None = None) -> StaticRecord:
    if b.target.startswith("gfx"):
        return amdgcn.inspect_amd_build(b)
    sass = disassemble(b.cubin)
    usage = _cuobjdump(b.cubin, "-res-usage")
    if b.function:
        sass, usage = function_section(sass, b.function), function_section(usage, b.function)
    ops = opcode_counts(sass)
    res = _RES.search(usage)
    reg, stack, shared, local = (int(x) for x in res.groups()) if res else (0, 0, 0, 0)
    tc = sum(ops[o] for o in TENSOR_OPCODES)
    if dynamic_shared_bytes is None:
        dynamic_shared_bytes = b.dynamic_shared_bytes
    kinds = Counter(m.group(1) for m in _TC_FULL.finditer(sass))
    smem = max(shared, dynamic_shared_bytes or 0)
    occupancy = nvidia_warps_per_sm(b.target, reg, b.num_warps, smem) if b.num_warps and reg else None
    matrix = dict(
        matrix_instructions=tc,
        matrix_instruction_kinds=sorted(kinds),
        matrix_kinds=[{"name": k, "count": n} for k, n in sorted(kinds.items())],
        matrix_per_k_step=tc_per_k_step(sass),
        matrix_cores="yes" if tc else "no",
        occupancy=occupancy,
        occupancy_unit="warps/SM",
        num_warps=b.num_warps,
    )
    return StaticRecord(
        kernel=b.kernel,
        config=b.config,
        target=b.target,
        dtype=b.dtype,
        default=b.default,
        wants_wgmma=b.wants_wgmma,
        hmma=ops["HMMA"],
        hgmma=ops["HGMMA"],
        qgmma=ops["QGMMA"],
        imma=ops["IMMA"] + ops["IGMMA"],
        ffma=ops["FFMA"],
        registers=reg,
        shared_bytes=shared,
        dynamic_shared_bytes=dynamic_shared_bytes,
        stack_bytes=stack,
        local_bytes=local,
        spill_stores=ops["STL"],
        spill_loads=ops["LDL"],
        tensor_core_instructions=tc,
        note=b.ptxas_log.splitlines()[0] if b.ptxas_log.startswith("PTX .version") else b.note,
        **matrix,
    )
