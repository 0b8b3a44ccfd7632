"""What static inspection works on and what it writes: one kernel configuration compiled ahead of time for one
target (`AotBuild`), and the record read from its machine code (`StaticRecord`), NVIDIA (roofline/sass.py) and
AMD (roofline/amdgcn.py) alike. A module of its own so that both readers import it and neither imports the other
for it; `sass.inspect_build` picks the reader by target.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass
class AotBuild:
    """One kernel configuration compiled ahead of time for one target."""

    kernel: str  # e.g. "triton_gemm"
    config: str  # e.g. "fp16 BM128 BN128 BK64 w4 s3"
    target: str  # sm_80 or sm_90
    cubin: bytes = field(repr=False)
    default: bool = False  # a configuration the kernel uses by default (tests: no spills)
    wants_wgmma: bool = False  # meant for Hopper wgmma (tests: HGMMA on sm_90)
    dtype: str = ""  # fp16, bf16, fp32 (TF32 forbidden), tf32, fp8_e4m3
    ptxas_log: str = ""
    dynamic_shared_bytes: int | None = None  # shared memory requested at launch (Triton: metadata.shared)
    function: str | None = None  # the kernel's symbol when the cubin holds several kernels
    amdgcn: str = field(default="", repr=False)  # AMD targets: the assembly listing instead of a cubin
    num_warps: int | None = None  # warps (AMD: waves) per block, for occupancy
    note: str = ""  # said in the record's note (e.g. the fp8 flavour an AMD build was given)


@dataclass
class StaticRecord:
    """What `dawnscope inspect --json` writes, one per (kernel, config, target)."""

    kernel: str
    config: str
    target: str
    dtype: str
    default: bool
    wants_wgmma: bool
    hmma: int
    hgmma: int
    qgmma: int
    imma: int
    ffma: int
    registers: int
    shared_bytes: int  # static shared memory in the cubin (Triton allocates most of it dynamically: see note)
    dynamic_shared_bytes: int | None
    stack_bytes: int
    local_bytes: int
    spill_stores: int  # STL instructions
    spill_loads: int  # LDL instructions
    tensor_core_instructions: int
    note: str = ""
    # Vendor-neutral fields (NVIDIA and AMD records alike): matrix (Tensor Core / matrix core) instructions,
    # their kinds, how many one warp / wave issues per K step, the verdict and any fallback, occupancy.
    matrix_instructions: int = 0
    matrix_instruction_kinds: list = field(default_factory=list)  # names, e.g. ["v_mfma_f32_32x32x8_bf16"]
    matrix_kinds: list = field(default_factory=list)  # [{name, operand, shape, precision, count}]
    matrix_per_k_step: int | None = None
    matrix_cores: str = "no"  # yes / no / fallback
    fallback: str | None = None  # why the matrix instructions are not the dtype's own (None: they are)
    vgprs: int | None = None  # AMD: architectural VGPRs, AGPRs, SGPRs (NVIDIA: `registers`)
    agprs: int | None = None
    sgprs: int | None = None
    lds_bytes: int | None = None  # AMD: static + dynamic LDS per workgroup
    waves_per_simd: int | None = None  # AMD: waves per SIMD the registers allow
    occupancy: int | None = None  # resident warps per SM (NVIDIA) / waves per SIMD (AMD), registers and shared memory
    occupancy_unit: str = ""
    num_warps: int | None = None

    @property
    def spills(self) -> bool:
        return bool(self.spill_stores or self.spill_loads or self.local_bytes or self.stack_bytes)

    def as_dict(self) -> dict:
        d = asdict(self)
        d["spills"] = self.spills
        return d

    def evidence(self) -> str:
        """One line of what the machine code shows: SASS counts (NVIDIA) or AMDGCN kinds and verdict (AMD)."""
        if self.target.startswith("gfx"):
            return self._amdgcn_line()
        tc = ", ".join(
            f"{k.upper()} {getattr(self, k)}" for k in ("hmma", "hgmma", "qgmma", "imma") if getattr(self, k)
        )
        return (
            f"SASS {self.target} {self.kernel} [{self.config}]: {tc or 'no Tensor Core instructions'}, "
            f"FFMA {self.ffma}, {self.registers} registers, {'spills' if self.spills else 'no spills'}"
        )

    def _amdgcn_line(self) -> str:
        kinds = ", ".join(f"{k['name']} x{k['count']}" for k in self.matrix_kinds) or "no matrix instructions"
        verdict = f"fallback: {self.fallback}" if self.fallback else f"matrix cores {self.matrix_cores}"
        spills = f"scratch {self.stack_bytes} B (spills)" if self.spills else "no scratch"
        return (
            f"AMDGCN {self.target} {self.kernel} [{self.config}]: {kinds}; {verdict}; VGPR {self.vgprs} "
            f"AGPR {self.agprs} SGPR {self.sgprs}, {self.waves_per_simd} waves/SIMD, LDS {self.lds_bytes} B, "
            f"{spills}"
        )
