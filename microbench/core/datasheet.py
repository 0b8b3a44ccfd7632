"""Datasheet peaks: which bench.toml [devices] entry a device name matches."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from pathlib import Path

import tomllib

from microbench.core.archjson import is_arch_json, read_arch
from microbench.core.config import DatasheetDevice, load_config
from microbench.core.dtypes import PRECISION_OF, PRECISIONS
from microbench.core.errors import InputError
from microbench.core.jsonio import load_json
from microbench.core.resources import data_file

MAX_CEILING_TFLOPS = 1e6  # an exaFLOP/s from one device: beyond any chip, a typo


def norm_tokens(name: str) -> set[str]:
    """Device name -> upper-case tokens split at non-alphanumerics (the datasheet matching rule). Here, not in
    core.device, so that matching a trace's device name does not import torch."""
    return {t for t in re.split(r"[^A-Z0-9]+", name.upper()) if t}


def infinity_cache_bytes(arch: str) -> int:
    """The Infinity Cache of an AMD gfx target (microbench/data/amd_chips.toml), 0 where it has none."""
    table = tomllib.loads(data_file("amd_chips.toml").read_text())["infinity_cache_bytes"]
    return int(table.get(arch.split(":")[0], 0))


def amd_product_name(
    arch: str, compute_units: int, memory_bytes: int, devices: tuple[DatasheetDevice, ...] | None = None
) -> str | None:
    """The product an AMD device is, from gcnArchName, its CU count and memory (match_datasheet by properties
    alone): for a device ROCm names generically ("AMD Radeon Graphics", the marketing name coming from a libdrm
    table that lags new boards). None unless exactly one entry fits (MI350X and MI355X do not part)."""
    facts = DeviceFacts("", "amd", None, arch.split(":")[0], compute_units, memory_bytes)
    entry, _ = match_datasheet("", devices if devices is not None else load_config().devices, facts)
    return entry.name if entry is not None and entry.level == "sku" else None


# A trace's memory size (GiB, after the driver's reservation and ECC) against a part's size as sold (GB): an
# 80 GB A100 reports 79.3 GiB, a 48 GB A40 with ECC 44.6 GiB, a 192 GB MI300X 191.5 GiB. 0.88 keeps ECC and
# reservations in and the next size down out (40 < 0.88 x 48); +0.5 GiB above the size sold is rounding.
MEMORY_FIT = (0.88, 0.5)
VENDOR_TOKENS = {"nvidia": {"NVIDIA", "TESLA", "GEFORCE", "QUADRO"}, "amd": {"AMD", "RADEON", "INSTINCT"}}


@dataclass(frozen=True)
class DeviceFacts:
    """What a trace records about a device beside its name (Kineto's deviceProperties, an Nsight export's
    TARGET_INFO_GPU, a live device): each None where unrecorded."""

    name: str = ""
    vendor: str | None = None  # "nvidia" / "amd"
    cc: str | None = None  # "8.0"; ROCm's major.minor (9.4 for gfx942) is read as a gfx prefix, not a cc
    arch: str | None = None  # "gfx942" (feature suffix dropped)
    compute_units: int | None = None
    memory_bytes: int | None = None

    def described(self) -> str:
        parts = [f"cc {self.cc}" if self.cc and self.vendor != "amd" else "", self.arch or ""]
        if self.compute_units:
            parts.append(f"{self.compute_units} {'CUs' if self.vendor == 'amd' else 'SMs'}")
        if self.memory_bytes:
            parts.append(f"{self.memory_bytes / 2**30:.1f} GiB")
        return ", ".join(p for p in parts if p)

    @property
    def specific(self) -> bool:
        """Enough to name a chip without the name: an architecture and a unit count."""
        return bool((self.cc or self.arch) and self.compute_units)


def facts_from_properties(props: dict) -> DeviceFacts:
    """DeviceFacts from a deviceProperties entry (Kineto's keys; the Nsight, rocprof and ncu readers write the
    same). ROCm writes gcnArchName and its own major.minor (9.4 = gfx94x)."""
    name = str(props.get("name") or "")
    tokens = norm_tokens(name)
    vendor = next((v for v, marks in VENDOR_TOKENS.items() if marks & tokens), None)
    arch = str(props["gcnArchName"]).split(":")[0] if props.get("gcnArchName") else None
    if arch:
        vendor = "amd"
    major, minor = props.get("computeMajor"), props.get("computeMinor")
    cc = f"{major}.{minor}" if isinstance(major, int) and isinstance(minor, int) else None
    units = props.get("numSms")
    mem = props.get("totalGlobalMem")
    return DeviceFacts(
        name,
        vendor,
        cc,
        arch,
        units if isinstance(units, int) and units > 0 else None,
        mem if isinstance(mem, int) and mem > 0 else None,
    )


def _entry_vendor(e: DatasheetDevice) -> str | None:
    return "nvidia" if e.cc else "amd" if e.arch else None


def _fits(e: DatasheetDevice, f: DeviceFacts, memory: bool = True) -> bool:
    """No recorded property contradicts the entry (a property either side leaves unknown is no evidence).
    `memory`: whether the memory size counts (not for an entry the name names: boards ship in more sizes than
    the datasheets list, an "NVIDIA H100" with 95 GiB among them)."""
    vendor = _entry_vendor(e)
    if f.vendor and vendor and f.vendor != vendor:
        return False
    if f.arch and e.arch and f.arch != e.arch:
        return False
    if f.cc and e.cc and f.vendor != "amd" and vendor == "nvidia" and f.cc != e.cc:
        return False
    if f.cc and e.arch and not f.arch and f.vendor != "nvidia":
        major, _, minor = f.cc.partition(".")
        if not e.arch.startswith(f"gfx{major}{minor}"):
            return False
    if f.compute_units and e.compute_units and f.compute_units != e.compute_units:
        return False
    if memory and f.memory_bytes and e.memory_gb:
        gib = f.memory_bytes / 2**30
        low, over = MEMORY_FIT
        if not any(low * m <= gib <= m + over for m in e.memory_gb):
            return False
    return True


def _named(e: DatasheetDevice, tokens: set[str]) -> bool:
    return set(e.match) <= tokens and not (set(e.exclude) & tokens)


def _model_tokens(e: DatasheetDevice) -> set[str]:
    """The match tokens that name a model (A100, 3090, MI300X), not a form (SXM4) or a size (80GB)."""
    return {t for t in e.match if re.search(r"\d", t) and not t.endswith("GB") and not t.startswith("SXM")}


def match_datasheet(
    name: str, devices: tuple[DatasheetDevice, ...], facts: DeviceFacts | None = None
) -> tuple[DatasheetDevice | None, str]:
    """The datasheet entry of a device (bench.toml, [devices]): by the name's tokens (all `match` tokens
    present, no `exclude` token) among the entries the recorded properties fit (compute capability or gfx
    target, SM / CU count, memory); where the name names no entry, by the model token and the properties, or by
    the properties alone. One entry: that SKU. Several whose compute peaks agree: the chip's peaks (an entry of
    level "chip"; memory bandwidth only where they agree too). Else none, and the note says why."""
    facts = facts or DeviceFacts(name)
    tokens = norm_tokens(name)
    named = [d for d in devices if _named(d, tokens)]
    fits = [d for d in devices if _fits(d, facts)]
    # without the name, an entry is taken only on properties it states (an entry without them, such as the
    # MI300X VF's, is matched by name alone)
    known = [d for d in fits if (d.cc or d.arch) and d.compute_units]
    what = facts.described()
    if named:
        hard = [d for d in named if _fits(d, facts, memory=False)]
        cands = [d for d in hard if d in fits] or hard  # the memory picks among named entries, never refuses one
        if not cands:
            keys = ", ".join(d.key for d in named)
            return None, (
                f"unknown device {name!r}: its name matches {keys} but its properties ({what}) are not theirs "
                "(a MIG slice or partition?); measured ceilings only"
            )
        how = f"matched {name!r}"
    elif facts.specific and (model := [d for d in known if _model_tokens(d) & tokens]):
        cands, how = model, f"matched {name!r} by model and properties ({what})"
    elif facts.specific and known:
        cands, how = known, f"matched by properties alone ({what}; no entry names {name!r})"
    else:
        return None, _unknown(name, facts)
    if len(cands) == 1 and (named or _generic(name)):
        return cands[0], f"datasheet entry {cands[0].key!r} ({cands[0].name}) {how}"
    # several entries, or one found without its name (another product with its properties: its compute, not
    # necessarily its memory)
    return _chip_level(cands, name, how)


def _generic(name: str) -> bool:
    """A name that names no model ("AMD Radeon Graphics", ""): the properties are all there is."""
    return not any(re.search(r"\d", t) for t in norm_tokens(name))


def _same(values: list) -> bool:
    return all(v is not None for v in values) and all(
        abs(v - values[0]) <= 0.005 * max(abs(values[0]), 1e-9) for v in values
    )


def _chip_level(cands: list[DatasheetDevice], name: str, how: str) -> tuple[DatasheetDevice | None, str]:
    """Several entries (or one the name does not name): their shared compute peaks, or none where they differ."""
    keys = ", ".join(d.key for d in cands)
    precisions = set(cands[0].peaks_tflops)
    same_peaks = all(set(d.peaks_tflops) == precisions for d in cands) and all(
        _same([d.peaks_tflops[p] for d in cands]) for p in precisions
    )
    if not same_peaks:
        return (
            None,
            f"ambiguous device {name!r}: datasheet entries {keys} all fit ({how}), with other peaks; measured ceilings only",
        )
    chips = {d.chip for d in cands}
    chip = cands[0].chip if len(chips) == 1 and cands[0].chip else " / ".join(d.name for d in cands)
    mems = [d.memory_tbs for d in cands]
    memory = mems[0] if _same(mems) and (len(cands) > 1 or _generic(name)) else None
    first = cands[0]
    entry = replace(
        first,
        key="chip:" + re.sub(r"[^a-z0-9]+", "_", (first.chip or first.key).lower()).strip("_"),
        name=f"{chip} ({' or '.join(d.name for d in cands)})",
        memory_tbs=memory,
        achievable_tflops=first.achievable_tflops
        if all(d.achievable_tflops == first.achievable_tflops for d in cands)
        else {},
        achievable_memory_tbs=first.achievable_memory_tbs if memory is not None else None,
        level="chip",
    )
    bandwidth = "" if memory is not None else "; memory bandwidth of this SKU unknown"
    share = "they share them" if len(cands) > 1 else "the one entry they fit"
    return entry, f"compute peaks of {chip} ({keys} {how}: {share}){bandwidth}"


def nvidia_architecture(cc: str) -> str:
    """The architecture of an NVIDIA compute capability (microbench/data/compute_capabilities.toml: `8.6` ->
    `Ampere`), never a product (one capability is several); "" where the table does not know it."""
    table = tomllib.loads(data_file("compute_capabilities.toml").read_text())["cc"]
    return table.get(cc, "").split(" (")[0]


def _unknown(name: str, facts: DeviceFacts) -> str:
    what = facts.described()
    arch = nvidia_architecture(facts.cc) if facts.cc and facts.vendor != "amd" else ""
    props = f" ({', '.join(x for x in (arch, what) if x)})" if (arch or what) else ""
    return f"unknown device {name!r}{props}: no datasheet entry fits; measured ceilings only"


# The measured ceilings' cache of this machine (microbench/roofline/ceilings.py writes it): a --ceilings file too, read
# by the one rule of every command that reads measured ceilings (_measured: none its run judged noisy or busy).
CACHE_SCHEMA = "dawnscope.ceilings-cache/1"


def _ceilings_list(doc) -> list | None:
    """The measured ceilings of a results.json (`ceilings`) or of the ceilings cache (`items`), else None."""
    if not isinstance(doc, dict):
        return None
    items = doc.get("items") if doc.get("schema") == CACHE_SCHEMA else doc.get("ceilings")
    return items if isinstance(items, list) else None


def ceilings_file(
    path: Path, device_name: str | None = None, devices: tuple[DatasheetDevice, ...] = ()
) -> tuple[dict[str, float], float | None]:
    """Measured ceilings from a file: a results.json of microbench.roofline.cli (its measured `ceilings`), the
    measured ceilings' cache of a machine (~/.cache/dawnscope/ceilings-*.json, which `roofline`, `decompose` and
    `pytest --benchmark-only` read), or a TraceLens GPU arch JSON (core.archjson). Returns TFLOP/s by precision
    column and memory TB/s (or None). With `device_name`, the file must be of that machine
    (check_ceilings_machine). A ceiling its own run judged noisy, or measured on a busy machine, is not used.
    Anything else is one line naming the file."""
    doc = load_json(path)
    ceilings = _ceilings_list(doc)
    if not is_arch_json(doc) and ceilings is None:
        raise InputError(
            path,
            "neither a results.json of microbench.roofline.cli (no `ceilings` list), the measured ceilings' cache "
            f"({CACHE_SCHEMA}) nor a TraceLens GPU arch JSON (no `max_achievable_tflops`)",
            key="ceilings",
        )
    parsed = read_arch(doc, path) if is_arch_json(doc) else _measured(path, ceilings)
    if device_name is not None:
        check_ceilings_machine(path, ceilings_machine(doc), device_name, devices)
    return parsed


def _measured(path: Path, ceilings: list) -> tuple[dict[str, float], float | None]:
    out: dict[str, float] = {}
    memory_tbs = None
    noisy = 0
    for c in ceilings:
        if not (
            isinstance(c, dict)
            and c.get("source") == "measured"
            and isinstance(c.get("value"), (int, float))
            and math.isfinite(c["value"])
            and c["value"] > 0
        ):
            continue
        if c.get("noise") or c.get("flags") or c.get("busy"):  # its own run said the number cannot be trusted
            noisy += 1
        elif c.get("kind") == "compute" and c.get("dtype") in PRECISION_OF:
            out[PRECISION_OF[c["dtype"]]] = float(c["value"])
        elif c.get("kind") == "memory" and memory_tbs is None:
            memory_tbs = float(c["value"]) / 1e3  # GB/s
    if not out:
        raise InputError(
            path,
            "no measured compute ceiling in its `ceilings`"
            + (
                f" that its run did not judge noisy or busy ({noisy} noisy or busy: measure again on a quiet machine)"
                if noisy
                else ""
            ),
            key="ceilings",
        )
    return out, memory_tbs


def ceilings_machine(doc) -> str | None:
    """The machine a ceilings file was measured on: results.json's hardware name, the cache's key machine, an arch
    JSON's name."""
    if not isinstance(doc, dict):
        return None
    if doc.get("schema") == CACHE_SCHEMA:
        key = doc.get("key") if isinstance(doc.get("key"), dict) else {}
        doc = {"hardware": key.get("machine")}
    name = (doc.get("hardware") or {}).get("name") if isinstance(doc.get("hardware"), dict) else doc.get("name")
    return name if isinstance(name, str) and name.strip() else None


def check_ceilings_machine(
    path: Path, file_machine: str | None, device_name: str, devices: tuple[DatasheetDevice, ...]
) -> None:
    """Measured ceilings are another machine's unless both names match the same datasheet entry (or, for a
    device no entry knows, are the same name): judging an H100's kernels against a CPU's ceilings gives
    percentages in the ten thousands, so it is refused (one line), never used silently."""
    if file_machine is None:
        raise InputError(
            path, "names no machine (no hardware.name / name): cannot tell whose ceilings these are", key="ceilings"
        )
    mine, _ = match_datasheet(file_machine, devices)
    theirs, _ = match_datasheet(device_name, devices)
    same = (
        (mine.key == theirs.key)
        if (mine and theirs)
        else (mine is None and theirs is None and norm_tokens(file_machine) == norm_tokens(device_name))
    )
    if not same:
        raise InputError(
            path,
            f"ceilings measured on {file_machine!r}, not on {device_name!r}: give a file measured on that machine",
            key="ceilings",
        )


def ceilings_from_args(pairs: list[str], results: Path | None) -> dict[str, float]:
    """TFLOP/s by precision, from --ceilings (a results file's measured compute ceilings, or a TraceLens GPU arch
    JSON) then --ceiling."""
    out: dict[str, float] = dict(ceilings_file(results)[0]) if results is not None else {}
    for pair in pairs:
        prec, _, value = pair.partition("=")
        try:
            tflops = float(value)
        except ValueError:
            tflops = -1.0
        if prec not in PRECISIONS or not (math.isfinite(tflops) and 0 < tflops <= MAX_CEILING_TFLOPS):
            raise InputError(
                None,
                f"expected PREC=TFLOPS with PREC one of {', '.join(PRECISIONS)} and a "
                f"finite positive number up to {MAX_CEILING_TFLOPS:g}",
                key="--ceiling",
                value=pair,
            )
        out[prec] = tflops
    return out


def find_entry(name: str, devices, option: str = "--on"):
    """A bench.toml [devices] entry by its key (`h100_sxm5`), a short name an entry lists in `aliases` (`A100`),
    a device name as a profiler writes it (`NVIDIA H100 80GB HBM3`), or a short name all of whose tokens one
    entry's `match` holds (`V100`, `MI300X`). Unknown or ambiguous: one line naming the known entries."""
    by_key = {d.key: d for d in devices}
    if name.lower() in by_key:
        return by_key[name.lower()]
    aliased = [d for d in devices if name.upper() in d.aliases]
    if len(aliased) == 1:
        return aliased[0]
    entry, note = match_datasheet(name, devices)
    if entry is not None:
        return entry
    tokens = norm_tokens(name)
    short = [
        d for d in devices if tokens and tokens <= set(d.match) | norm_tokens(d.name) and not (tokens & set(d.exclude))
    ]
    if len(short) == 1:
        return short[0]
    known = ", ".join(sorted(by_key))
    why = "ambiguous" if len(short) > 1 or note.startswith("ambiguous") else "unknown device"
    raise InputError(
        None, f"{why}: no single bench.toml [devices] entry matches (known: {known})", key=option, value=name
    )
