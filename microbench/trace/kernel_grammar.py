"""Kernel names read by their library's naming grammar (microbench/data/kernel_grammars.toml): what the name says
(the op, the architecture it was built for, the instruction class, the MMA shape, the element types), and the
Tensor Core verdict that follows. classify.classify_kernel asks here first; a name no grammar reads, or whose
grammar leaves Tensor Core use unknown, goes on to the flat name rules."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache

import tomllib

from microbench.core.args import digits
from microbench.core.resources import data_file

GRAMMARS_PATH = data_file("kernel_grammars.toml")
MATRIX_OPS = ("gemm", "conv", "attention", "gemv")


@dataclass(frozen=True)
class Grammar:
    family: str
    pattern: re.Pattern
    instr_pattern: re.Pattern | None
    op_pattern: re.Pattern | None
    types_pattern: re.Pattern | None
    op: str | None
    types_settle: bool
    no_shape: str | None
    no_instr: str | None
    attention_tc: bool


@dataclass(frozen=True)
class Parsed:
    """What a kernel name says under its family's grammar, and the verdict."""

    family: str
    op: str  # gemm / conv / attention / gemv / pooling / copy / reduction / elementwise
    arch: int | None  # the SM it was built for (NVIDIA)
    instr: str | None
    shape: str | None
    types: str | None
    cls: str
    tensor_cores: str  # yes / no / unknown
    why: str


@cache
def _data() -> dict:
    return tomllib.loads(GRAMMARS_PATH.read_text())


@cache
def _tensor_core_types() -> re.Pattern:
    return re.compile(_data()["tensor_core"]["types"])


@cache
def grammars() -> tuple[Grammar, ...]:
    out = []
    for g in _data()["grammar"]:
        flags = 0 if g.get("case_sensitive") else re.IGNORECASE
        out.append(
            Grammar(
                g["family"],
                re.compile(g["pattern"], flags),
                re.compile(g["instr_pattern"], flags) if g.get("instr_pattern") else None,
                re.compile(g["op_pattern"], flags) if g.get("op_pattern") else None,
                re.compile(g["types_pattern"], flags) if g.get("types_pattern") else None,
                g.get("op"),
                bool(g.get("types_settle")),
                g.get("no_shape"),
                g.get("no_instr"),
                bool(g.get("attention_is_tensor_core")),
            )
        )
    return tuple(out)


def _group(m: re.Match, *names: str) -> str | None:
    for n in names:
        if n in m.re.groupindex and m.group(n):
            return m.group(n)
    return None


def _instr(g: Grammar, m: re.Match, name: str) -> tuple[str | None, str | None]:
    """The instruction word (lower case) and a GemmShape's M,N,K where the name carries one."""
    word = _group(m, "instr")
    if g.instr_pattern is not None:
        im = g.instr_pattern.search(name)
        if im:
            found = next((x for x in im.groups() if x), None)
            if found and re.fullmatch(r"[0-9]+, ?[0-9]+, ?[0-9]+", found):
                return ("simt" if re.fullmatch(r"1, ?1, ?1", found) else "tensorop"), found
            word = found or word
    return (word.lower() if word else None), None


def _searched(pattern: re.Pattern | None, name: str) -> str | None:
    hit = pattern.search(name) if pattern is not None else None
    return next((x for x in hit.groups() if x), None) if hit else None


def parse(name: str) -> Parsed | None:
    """The first grammar that reads `name` (the name without its parameter list), or None."""
    for g in grammars():
        m = g.pattern.search(name)
        if m:
            return _parsed(g, m, name)
    return None


def _parsed(g: Grammar, m: re.Match, name: str) -> Parsed:
    data = _data()
    op_word = (_group(m, "op") or _searched(g.op_pattern, name) or g.op or "gemm").lower().strip(":")
    op = data["op_words"].get(op_word, "conv" if "conv" in op_word else "gemm")
    arch_raw = _group(m, "arch")
    arch = None
    if arch_raw:
        arch = int(arch_raw) if digits(arch_raw) else data["arch_words"].get(arch_raw.lower())
    instr, gemm_shape = _instr(g, m, name)
    shape = _group(m, "shape") or gemm_shape
    types = _group(m, "types") or _searched(g.types_pattern, name)
    tc, why = verdict(g, op, arch, instr, shape, types)
    cls = data["op_classes"][op]
    if op in MATRIX_OPS and tc == "yes":
        cls = "tc_gemm"
    return Parsed(g.family, op, arch, instr, shape, types, cls, tc, why)


def verdict(
    g: Grammar, op: str, arch: int | None, instr: str | None, shape: str | None, types: str | None
) -> tuple[str, str]:
    """Tensor Core use from what the name says: the op first, then the architecture it was built for, the
    instruction word, the MMA shape, the element types; else unknown."""
    words, tc = _data()["instr_words"], _data()["tensor_core"]
    if op not in MATRIX_OPS:
        return "no", f"{op} kernel, no matrix math"
    if arch is not None and arch < tc["first_sm"]:
        return "no", f"built for sm_{arch}, which has no Tensor Cores"
    if instr and instr in words:
        return words[instr], f"instruction class {instr!r}"
    if shape:
        return "yes", f"MMA shape {shape}"
    if op == "attention" and g.attention_tc:
        return "yes", "FlashAttention's attention kernels run on mma / wgmma only"
    if g.no_shape and not shape:
        return g.no_shape, "no MMA shape in a legacy name: a SIMT kernel"
    if g.no_instr and not instr:
        return g.no_instr, "no matrix-instruction word in the name: the vector ALUs"
    if g.types_settle and types:
        t = types.lower()
        if _tensor_core_types().search(t) or (len(t) <= 5 and set(t) & set(tc["nvjet_letters"]) and "f" not in t):
            return "yes", f"element types {types}: Tensor Core operands"
    return "unknown", "the name does not say"
