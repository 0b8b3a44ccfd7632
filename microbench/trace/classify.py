"""Kernel and operator classification by rules kept as data (microbench/data/kernel_rules.toml)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache, lru_cache
from pathlib import Path

import tomllib

from microbench.core.kernel_names import kernel_signature_name
from microbench.core.resources import data_file
from microbench.trace import kernel_grammar

RULES_PATH = data_file("kernel_rules.toml")
TENSOR_CORE_VALUES = ("yes", "no", "unknown")
# The layers of Tensor Core evidence, strongest first (docs/traces.md, "Tensor Core evidence"): hardware
# counters, machine code (our own kernels' SASS / AMDGCN), the library name rules ([[kernel]]), the name's
# structure ([[structure]]: the instruction family or element type in it; an inference, labelled so), the
# launching operator (its family and dtypes; inferred too), else unknown.
EVIDENCE_LAYERS = ("counters", "machine code", "name rule", "structure (inferred)", "operator (inferred)", "unknown")
INFERRED = ("structure (inferred)", "operator (inferred)")


@dataclass(frozen=True)
class Rule:
    section: str  # kernel, cpu_impl or operator
    index: int
    pattern: re.Pattern
    cls: str
    tensor_cores: str
    note: str
    applies_to: tuple[str, ...] = ()  # [[structure]] / [[launcher]]: the name-rule classes it may settle
    dtypes: tuple[tuple[str, float], ...] = ()  # [[launcher]]: dtype -> lowest NVIDIA compute capability

    @property
    def rule_id(self) -> str:
        return f"{self.section}[{self.index}]"


@dataclass(frozen=True)
class Classification:
    cls: str
    tensor_cores: str
    rule: str  # the rule that matched (`kernel[4] /xmma|.../`) or "unknown"
    note: str
    basis: str = "name rule"  # the evidence layer of the Tensor Core verdict (EVIDENCE_LAYERS)

    @property
    def label(self) -> str:
        return class_labels().get(self.cls, self.cls)


@cache
def _data(path: str = str(RULES_PATH)) -> dict:
    return tomllib.loads(Path(path).read_text())


def class_set(name: str) -> tuple[str, ...]:
    """A set of classes of kernel_rules.toml [class_sets] (`gemm`: the math kernels of a matrix operator)."""
    return tuple(_data()["class_sets"][name])


@cache
def _load(path: str = str(RULES_PATH)) -> tuple[dict[str, str], dict[str, tuple[Rule, ...]]]:
    data = _data(path)
    classes = dict(data["classes"])
    unknown_default = set(data["class_sets"]["tensor_cores_unknown_by_default"])
    sections: dict[str, tuple[Rule, ...]] = {}
    for section in ("kernel", "structure", "launcher", "cpu_impl", "operator"):
        rules = []
        for i, r in enumerate(data.get(section, [])):
            cls = r.get("class", "other")
            tc = r.get("tensor_cores", "unknown" if cls in unknown_default else "no")
            applies = tuple(r.get("applies_to", ()))
            if cls not in classes or tc not in TENSOR_CORE_VALUES or not set(applies) <= set(classes):
                raise ValueError(f"{path}: {section}[{i}]: bad class {cls!r}, tensor_cores {tc!r} or applies_to")
            rules.append(
                Rule(
                    section,
                    i,
                    re.compile(r["pattern"], re.IGNORECASE),
                    cls,
                    tc,
                    r.get("note", ""),
                    applies,
                    tuple((k, float(v)) for k, v in r.get("dtypes", {}).items()),
                )
            )
        sections[section] = tuple(rules)
    return classes, sections


def class_labels() -> dict[str, str]:
    return _load()[0]


def _first(section: str, name: str) -> Classification:
    for rule in _load()[1][section]:
        if rule.pattern.search(name):
            return Classification(
                rule.cls,
                rule.tensor_cores,
                f"{rule.rule_id} /{rule.pattern.pattern}/",
                rule.note,
                "unknown" if rule.tensor_cores == "unknown" else "name rule",
            )
    return Classification("other", "unknown", "unknown", "no rule matched", "unknown")


def _structure(c: Classification, name: str) -> Classification:
    """Where the name rule leaves Tensor Core use unknown: the first [[structure]] rule for its class whose
    pattern is in the name settles it, labelled inferred (`basis`), the class and the name rule kept."""
    if c.tensor_cores != "unknown":
        return c
    for rule in _load()[1]["structure"]:
        if c.cls in rule.applies_to and rule.pattern.search(name):
            return Classification(
                c.cls,
                rule.tensor_cores,
                f"{c.rule} + {rule.rule_id} /{rule.pattern.pattern}/",
                f"inferred from the name's structure: {rule.note}",
                "structure (inferred)",
            )
    return c


@lru_cache(maxsize=1)
def name_cap_chars() -> int:
    """kernel_rules.toml's name_cap_chars: the characters of a kernel name the rules read."""
    return int(_data()["name_cap_chars"])


@lru_cache(maxsize=65536)
def classify_kernel(name: str) -> Classification:
    """A GPU kernel name (or Kineto activity name: Memcpy/Memset) -> class and Tensor Core use. The rules
    see the name without its parameter list (`kernel_signature_name`). The library's naming grammar first
    (kernel_grammar: what the name says of op, arch, instruction class, types), where it settles the verdict; then
    a name rule's verdict; where it
    leaves Tensor Core use unknown, the name's structure ([[structure]] rules, an inference: `basis`). A name
    longer than kernel_rules.toml's name_cap_chars is read on its first that many characters."""
    sig = kernel_signature_name(name[: name_cap_chars()])
    parsed = kernel_grammar.parse(sig)
    if parsed is not None and parsed.tensor_cores != "unknown":
        said = ", ".join(
            f"{k} {v}" for k, v in (("op", parsed.op), ("built for sm", parsed.arch), ("instruction", parsed.instr),
                                    ("MMA shape", parsed.shape), ("types", parsed.types)) if v
        )  # fmt: skip
        return Classification(parsed.cls, parsed.tensor_cores, f"grammar [{parsed.family}]", f"{parsed.why} ({said})")
    c = _first("kernel", sig)
    return _structure(c, sig) if c.tensor_cores == "unknown" else c


def is_comm(name: str) -> bool:
    """Whether a kernel is communication (class `comm` of kernel_rules.toml: NCCL, RCCL, MSCCL(++), symmetric-
    memory and custom all-reduce kernels): the one test of it, for every module that splits comm from compute."""
    return classify_kernel(name).cls == "comm"


@lru_cache(maxsize=4096)
def classify_operator(name: str) -> Classification:
    """A PyTorch operator name (CPU profiles, where there are no kernels) -> class; Tensor Core use is
    unknown at that level unless oneDNN says which implementation ran (`classify_cpu_impl`)."""
    c = _first("operator", name)
    return Classification(c.cls, "no" if c.cls not in ("gemm", "other") else "unknown", c.rule, c.note)


@lru_cache(maxsize=4096)
def classify_cpu_impl(impl: str) -> Classification:
    """A oneDNN implementation name (`brg_matmul:avx512_core_bf16`) -> whether a CPU matrix unit ran it."""
    return _first("cpu_impl", impl)


@lru_cache(maxsize=65536)
def is_launcher(name: str) -> bool:
    """Whether an operator or range name is one a [[launcher]] rule reads (a collective, a matrix operator)."""
    return any(r.pattern.search(name) for r in _load()[1]["launcher"])


def _name_dtype(name: str) -> str | None:
    for dtype, pattern in _data()["launcher_name_dtypes"].items():
        if re.search(pattern, name, re.IGNORECASE):
            return dtype
    return None


def _dtype_holds(rule: Rule, launcher: str, dtype: str | None, vendor: str | None, cc: float | None) -> bool:
    """A [[launcher]] rule's dtype condition: the operator's type (recorded, else in its name) is one only the
    chip's Tensor Cores run, on a chip known to have them for it."""
    if not rule.dtypes:
        return True
    min_cc = dict(rule.dtypes).get(dtype or _name_dtype(launcher) or "")
    if min_cc is None or vendor not in ("nvidia", "amd"):
        return False
    return vendor == "amd" or (cc is not None and cc >= min_cc)


@lru_cache(maxsize=4096)
def classify_by_launcher(
    c: Classification, launcher: str, dtype: str | None = None, vendor: str | None = None, cc: float | None = None
) -> Classification | None:
    """Where a kernel's name leaves it unsettled (class `other`, or a GEMM of unknown unit): the first [[launcher]]
    rule for its class whose pattern is in the launching operator's or range's name and whose dtype condition
    holds; an inference, labelled `operator (inferred)`. None: the launcher says nothing."""
    for rule in _load()[1]["launcher"]:
        if c.cls not in rule.applies_to or (rule.dtypes and c.tensor_cores != "unknown"):
            continue
        if rule.pattern.search(launcher) and _dtype_holds(rule, launcher, dtype, vendor, cc):
            return Classification(
                rule.cls,
                rule.tensor_cores,
                f"{c.rule} + {rule.rule_id} /{rule.pattern.pattern}/",
                f"inferred from the launching operator {launcher!r}: {rule.note}",
                "operator (inferred)",
            )
    return None
