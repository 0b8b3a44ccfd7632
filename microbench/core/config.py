"""bench.toml -> typed, validated objects.

Every problem is a ConfigError naming the file, the key (a dotted path) and the value; the command line
turns it into one line and exit code 2. Nothing here imports torch, so a bad config fails fast.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

import tomllib

from microbench.core import dtypes as dt_table
from microbench.core import ops
from microbench.core.conditions import ConditionSettings
from microbench.core.errors import ConfigError, InputError
from microbench.core.files import read_input
from microbench.core.ops import OpSpec
from microbench.core.resources import data_file, default_config
from microbench.core.shapes import Case
from microbench.core.stats import NoiseSettings

DEFAULT_CONFIG = default_config()
DATA_DIR = data_file("")

DTYPES = dt_table.CASE_DTYPES  # the dtypes of cases, each with its [tolerance] (microbench.core.dtypes)
DEVICE_KINDS = ("cpu", "cuda", "rocm")
DATASHEET_PRECISIONS = dt_table.PRECISIONS

# Upper bounds of numbers read from a config: beyond them a value is a typo, not a wish, and would hang a
# run (warmup_ms = 1e12) or overflow later arithmetic. docs/failures.md lists them.
MAX_TIMING_MS = 60_000.0  # timing.warmup_ms, timing.rep_ms: one minute per case
MAX_CASE_SECONDS = 3600.0  # timing.max_case_seconds
MAX_REPS = 1_000_000  # timing.min_reps, timing.max_reps
MAX_INPUT_SETS = 64  # timing.input_sets
MAX_TOLERANCE = 1.0  # a relative error of 1 passes an all-zero output: any larger turns the check off
MAX_DIM = 2**31 - 1  # any shape dimension, batch, group count, size in the ceilings' GEMM sweep
MAX_COPY_MB = 1 << 20  # ceilings.*.copy_mb: 1 TiB
MAX_CONFIG_BYTES = 16 << 20  # a config file (bench.toml is 30 KB): beyond this not a config
MAX_AGE_H = 24.0 * 365  # ceilings.*.max_age_h: a year
MAX_PEAK = 1e6  # datasheet TFLOP/s (int8: TOPS), TB/s and CPU FLOPs per cycle


@dataclass(frozen=True)
class TimingSettings:
    warmup_ms: float = 25.0
    rep_ms: float = 100.0
    min_reps: int = 5
    max_reps: int = 200
    input_sets: int = 3
    flush_l2: bool = True
    max_case_seconds: float = 10.0
    gpu_lead_max_ms: float = 50.0  # GPU: the longest sleep ahead of one batch of timed repeats (harness/timing)

    def exactly(self, reps: int) -> TimingSettings:
        """Exactly `reps` timed calls after time_calls()'s own untimed first call and probe, and no L2 flush between
        them: for training steps (their own working set is far larger than L2, and steps follow each other
        directly) and the batches of a step's loader."""
        return replace(self, warmup_ms=1e-9, rep_ms=1e-9, min_reps=reps, max_reps=reps, flush_l2=False)


@dataclass(frozen=True)
class CeilingSettings:
    """How the measured ceilings are searched on one kind of device ([ceilings.KIND] in bench.toml)."""

    gemm_sizes: dict[str, tuple[int, ...]]  # per dtype: the values each of m, n, k takes in the search
    copy_mb: tuple[int, ...]  # copy sizes for the memory ceiling
    budget_s: float = 10.0  # search time per dtype unless the profile says otherwise
    repeats: int = 3  # the best shapes are measured this many times; their median of medians counts
    top: int = 2  # how many of the best shapes are repeated
    max_age_h: float = 24.0  # cached measured ceilings older than this are measured again


@dataclass(frozen=True)
class DatasheetDevice:
    key: str
    name: str
    match: tuple[str, ...]
    exclude: tuple[str, ...]
    peaks_tflops: dict[str, float]  # precision -> TFLOP/s (int8: TOPS)
    memory_tbs: float | None
    # What the chip reaches rather than what it is rated for, and its shape (microbench.predict): published
    # max-achievable TFLOP/s per precision (MAMF finder), achievable memory TB/s, SMs / CUs, and the shortest
    # kernel a profiler shows on it. Empty / None: unknown (the prediction says which default it used).
    achievable_tflops: dict[str, float] = field(default_factory=dict)
    achievable_memory_tbs: float | None = None
    compute_units: int | None = None
    kernel_floor_us: float | None = None
    aliases: tuple[str, ...] = ()  # short names that mean this entry where several entries match them (`A100`)
    # What the chip is, beside what it is called (core.datasheet.match_datasheet): its die (`GA100`), NVIDIA's
    # compute capability (`8.0`) or AMD's gfx target (`gfx942`), and the memory sizes it ships with (GB, as
    # sold). Where the name settles nothing, these settle the chip; `source` names the public document.
    chip: str | None = None
    cc: str | None = None
    arch: str | None = None
    memory_gb: tuple[float, ...] = ()
    source: str | None = None
    level: str = "sku"  # "chip": made from several entries whose compute peaks agree (memory may be unknown)


@dataclass(frozen=True)
class CpuTier:
    requires: tuple[str, ...]
    flops_per_cycle: dict[str, float]


@dataclass(frozen=True)
class CaseSet:
    name: str
    description: str
    providers: tuple[str, ...]
    cases: tuple[Case, ...]
    ceiling_budget_s: float | None = None  # the ceiling search's time per dtype; None: [ceilings.KIND].budget_s
    max_case_seconds: float | None = None  # the longest call this profile times; None: timing.max_case_seconds


@dataclass(frozen=True)
class Config:
    path: Path
    timing: TimingSettings
    tolerance: dict[str, float]
    ceilings: dict[str, CeilingSettings]
    case_sets: dict[str, CaseSet]
    devices: tuple[DatasheetDevice, ...]
    cpu_tiers: tuple[CpuTier, ...]
    raw: dict = field(repr=False, default_factory=dict)
    noise: NoiseSettings = field(default_factory=NoiseSettings)
    conditions: ConditionSettings = field(default_factory=ConditionSettings)

    def case_set(self, name: str) -> CaseSet:
        if name not in self.case_sets:
            raise ConfigError(
                self.path, f"no such profile (have: {', '.join(sorted(self.case_sets))})", key="profiles", value=name
            )
        return self.case_sets[name]


class _Reader:
    """Typed access to a TOML table that remembers the dotted path, for error messages."""

    def __init__(self, path: Path):
        self.path = path

    def fail(self, key: str, value, problem: str):
        raise ConfigError(self.path, problem, key=key, value=value)

    def keys(self, table: dict, where: str, allowed: set[str], required: set[str] = frozenset()):
        if not isinstance(table, dict):
            self.fail(where, table, "expected a table")
        for k in table:
            if k not in allowed:
                self.fail(
                    f"{where}.{k}" if where else k, table[k], f"unknown key (allowed: {', '.join(sorted(allowed))})"
                )
        for k in required:
            if k not in table:
                self.fail(f"{where}.{k}" if where else k, None, "missing required key")

    def num(self, table: dict, key: str, where: str, default=None, positive=True, integer=False, maximum=None):
        """A number in its domain: the right type, finite (TOML has nan and inf), positive, at most
        `maximum` (integers: MAX_DIM unless given)."""
        if key not in table:
            if default is None:
                self.fail(f"{where}.{key}", None, "missing required key")
            return default
        v = table[key]
        ok = isinstance(v, int) if integer else isinstance(v, (int, float))
        if isinstance(v, bool) or not ok:
            self.fail(f"{where}.{key}", v, "expected an integer" if integer else "expected a number")
        if not math.isfinite(v):
            self.fail(f"{where}.{key}", v, "expected a finite number")
        if positive and v <= 0:
            self.fail(f"{where}.{key}", v, "must be positive")
        maximum = MAX_DIM if maximum is None and integer else maximum
        if maximum is not None and v > maximum:
            self.fail(f"{where}.{key}", v, f"larger than the largest accepted value, {maximum:g}")
        return v

    def flag(self, table: dict, key: str, where: str, default: bool) -> bool:
        v = table.get(key, default)
        if not isinstance(v, bool):
            self.fail(f"{where}.{key}", v, "expected true or false")
        return v

    def strings(self, table: dict, key: str, where: str, default=None) -> tuple[str, ...]:
        if key not in table:
            if default is None:
                self.fail(f"{where}.{key}", None, "missing required key")
            return tuple(default)
        v = table[key]
        if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
            self.fail(f"{where}.{key}", v, "expected a list of strings")
        return tuple(v)

    def dtypes(self, table: dict, where: str) -> tuple[str, ...]:
        names = self.strings(table, "dtypes", where)
        for d in names:
            if d not in DTYPES:
                self.fail(f"{where}.dtypes", d, f"unknown dtype (known: {', '.join(DTYPES)})")
        if not names:
            self.fail(f"{where}.dtypes", names, "empty list")
        return names

    def dim_pair(self, table: dict, key: str, where: str, default: int, minimum: int):
        v = table.get(key, default)
        vals = v if isinstance(v, list) else [v]
        if len(vals) not in (1, 2) or not all(isinstance(x, int) and not isinstance(x, bool) for x in vals):
            self.fail(f"{where}.{key}", v, "expected an integer or [h, w]")
        if any(x < minimum for x in vals):
            self.fail(f"{where}.{key}", v, "must be positive" if minimum > 0 else "must not be negative")
        if any(x > MAX_DIM for x in vals):
            self.fail(f"{where}.{key}", v, f"larger than the largest accepted value, {MAX_DIM}")
        return (vals[0], vals[-1])


def _from_data(rd: _Reader, source: str, where: str, spec: OpSpec) -> list[dict]:
    """`deepbench.toml:gemm.training` -> a list of shape tables, converted by the family's spec from the
    data file's row layout (DeepBench's)."""
    fname, _, table_path = source.partition(":")
    if not fname or not table_path:
        rd.fail(f"{where}.from", source, "expected FILE:TABLE")
    data_path = _data_file(rd, fname, f"{where}.from", source)
    data = _read_toml(data_path)
    node = data
    for part in table_path.split("."):
        if not isinstance(node, dict) or part not in node:
            rd.fail(f"{where}.from", source, f"{data_path.name} has no table {table_path!r}")
        node = node[part]
    if not isinstance(node, list):
        rd.fail(f"{where}.from", source, f"{table_path} in {data_path.name} is not a list of rows")
    rows = []
    for i, row in enumerate(node):
        if not isinstance(row, list):
            rd.fail(f"{where}.from", source, f"row {i} is not a list")
        try:
            rows.append(spec.data_row(row))
        except ValueError as e:
            rd.fail(f"{where}.from", source, f"row {i} {e}")
    return rows


def _data_file(rd: _Reader, fname: str, key: str, spec: str) -> Path:
    """A data file named in a config: relative to the config's own folder (then the project's data files,
    microbench/data), never outside it: `../../etc/passwd` and absolute paths are refused, whichever folder
    the command runs in."""
    rel = Path(fname)
    if rel.is_absolute():
        rd.fail(key, spec, "expected a path relative to the config's folder, not an absolute one")
    roots = (rd.path.resolve().parent, DATA_DIR.resolve())
    for root in roots:
        candidate = (root / rel).resolve()  # resolves `..` and symbolic links
        if not candidate.is_relative_to(root):
            rd.fail(key, spec, f"the path climbs out of the config's folder ({root})")
        if candidate.is_file():
            return candidate
    rd.fail(key, spec, f"no such file in {roots[0]} or {roots[1]}")


def _read_toml(path: Path) -> dict:
    """A TOML file, with every way it can be unreadable as one ConfigError."""
    try:
        text = read_input(path, max_bytes=MAX_CONFIG_BYTES).decode("utf-8")
    except InputError as e:
        raise ConfigError(path, e.problem) from None
    except UnicodeDecodeError as e:
        raise ConfigError(
            path, f"not UTF-8 text (TOML files are UTF-8): byte {e.start} is {e.object[e.start]:#04x}"
        ) from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(path, f"TOML syntax error: {e}") from None
    except RecursionError:
        raise ConfigError(path, "TOML nested too deeply") from None


def _group_cases(rd: _Reader, group: dict, where: str, spec: OpSpec) -> list[Case]:
    rd.keys(group, where, {"dtypes", "shapes", "from"} | spec.group_keys, {"dtypes"})
    dtypes = rd.dtypes(group, where)
    if ("shapes" in group) == ("from" in group):
        rd.fail(where, None, "give exactly one of `shapes` or `from`")
    if "from" in group:
        if not isinstance(group["from"], str):
            rd.fail(f"{where}.from", group["from"], "expected a string FILE:TABLE")
        tables = _from_data(rd, group["from"], where, spec)
        shape_where = f"{where}.from[{{}}]"
    else:
        tables = group["shapes"]
        if not isinstance(tables, list) or not tables:
            rd.fail(f"{where}.shapes", tables, "expected a non-empty list of tables")
        shape_where = f"{where}.shapes[{{}}]"
    shapes = [spec.parse_shape(rd, t, shape_where.format(i)) for i, t in enumerate(tables)]
    case_ops = spec.case_ops(rd, group, where)
    return [Case(op, shape, dt) for shape in shapes for op in case_ops for dt in dtypes]


def _case_sets(rd: _Reader, raw: dict) -> dict[str, CaseSet]:
    out: dict[str, CaseSet] = {}
    extends: dict[str, str] = {}
    own: dict[str, list[Case]] = {}
    for name, t in raw.items():
        where = f"profiles.{name}"
        rd.keys(
            t,
            where,
            {"description", "providers", "extends", "ceiling_budget_s", "max_case_seconds", *ops.FAMILIES},
            {"providers"},
        )
        providers = rd.strings(t, "providers", where)
        if not providers:
            rd.fail(f"{where}.providers", providers, "empty list")
        cases: list[Case] = []
        for family, spec in ops.FAMILIES.items():
            groups = t.get(family, [])
            if not isinstance(groups, list):
                rd.fail(f"{where}.{family}", groups, f"expected an array of tables ([[{where}.{family}]])")
            for i, g in enumerate(groups):
                cases += _group_cases(rd, g, f"{where}.{family}[{i}]", spec)
        if "extends" in t:
            if not isinstance(t["extends"], str) or t["extends"] not in raw:
                rd.fail(f"{where}.extends", t["extends"], "no such profile")
            extends[name] = t["extends"]
        own[name] = cases
        budget = float(rd.num(t, "ceiling_budget_s", where)) if "ceiling_budget_s" in t else None
        limit = (
            float(rd.num(t, "max_case_seconds", where, maximum=MAX_CASE_SECONDS)) if "max_case_seconds" in t else None
        )
        out[name] = CaseSet(name, str(t.get("description", "")), providers, (), budget, limit)

    def all_cases(name: str, seen: tuple[str, ...] = ()) -> list[Case]:
        if name in seen:
            rd.fail(f"profiles.{name}.extends", extends[name], "circular `extends`")
        base = all_cases(extends[name], seen + (name,)) if name in extends else []
        merged = list(dict.fromkeys(base + own[name]))  # keep order, drop duplicates
        return merged

    for name, p in out.items():
        cases = all_cases(name)
        if not cases:
            rd.fail(f"profiles.{name}", None, "profile has no cases")
        out[name] = CaseSet(p.name, p.description, p.providers, tuple(cases), p.ceiling_budget_s, p.max_case_seconds)
    return out


def _devices(rd: _Reader, raw: dict) -> tuple[DatasheetDevice, ...]:
    devs = []
    for key, t in raw.items():
        where = f"devices.{key}"
        rd.keys(
            t,
            where,
            {
                "name",
                "match",
                "exclude",
                "memory_tbs",
                *DATASHEET_PRECISIONS,
                *_DEVICE_SHAPE_KEYS,
                *_DEVICE_IDENTITY_KEYS,
            },
            {"name", "match"},
        )
        match = rd.strings(t, "match", where)
        if not match:
            rd.fail(f"{where}.match", match, "empty list: the entry would match every device")
        peaks = {p: float(rd.num(t, p, where, maximum=MAX_PEAK)) for p in DATASHEET_PRECISIONS if p in t}
        mem = float(rd.num(t, "memory_tbs", where, maximum=MAX_PEAK)) if "memory_tbs" in t else None
        devs.append(
            DatasheetDevice(
                key,
                str(t["name"]),
                tuple(s.upper() for s in match),
                tuple(s.upper() for s in rd.strings(t, "exclude", where, default=[])),
                peaks,
                mem,
                **_device_shape(rd, t, where),
                **_device_identity(rd, t, where),
            )
        )
    return tuple(devs)


_DEVICE_SHAPE_KEYS = ("achievable", "achievable_memory_tbs", "compute_units", "kernel_floor_us", "aliases")
_DEVICE_IDENTITY_KEYS = ("chip", "cc", "arch", "memory_gb", "source")


def _device_shape(rd: _Reader, t: dict, where: str) -> dict:
    """The optional achievable figures and shape of a [devices.*] entry (see DatasheetDevice)."""
    ach = t.get("achievable", {})
    rd.keys(ach, f"{where}.achievable", set(DATASHEET_PRECISIONS))
    return {
        "achievable_tflops": {p: float(rd.num(ach, p, f"{where}.achievable", maximum=MAX_PEAK)) for p in ach},
        "achievable_memory_tbs": float(rd.num(t, "achievable_memory_tbs", where, maximum=MAX_PEAK))
        if "achievable_memory_tbs" in t
        else None,
        "compute_units": int(rd.num(t, "compute_units", where, integer=True, maximum=1_000_000))
        if "compute_units" in t
        else None,
        "kernel_floor_us": float(rd.num(t, "kernel_floor_us", where, maximum=1e6)) if "kernel_floor_us" in t else None,
        "aliases": tuple(a.upper() for a in rd.strings(t, "aliases", where, default=[])),
    }


def _device_identity(rd: _Reader, t: dict, where: str) -> dict:
    """The optional identity of a [devices.*] entry: die, compute capability or gfx target, memory sizes."""
    out: dict = {}
    for key in ("chip", "cc", "arch", "source"):
        if key in t:
            if not isinstance(t[key], str) or not t[key].strip():
                rd.fail(f"{where}.{key}", t[key], "expected a non-empty string")
            out[key] = t[key].strip()
    if "cc" in out and not re.fullmatch(r"\d+\.\d+", out["cc"]):
        rd.fail(f"{where}.cc", out["cc"], "expected a compute capability MAJOR.MINOR (8.0)")
    if "arch" in out and not re.fullmatch(r"gfx[0-9a-f]+", out["arch"]):
        rd.fail(f"{where}.arch", out["arch"], "expected a gfx target (gfx942)")
    sizes = t.get("memory_gb", [])
    if not isinstance(sizes, list) or not all(isinstance(m, (int, float)) and 0 < m < 1e5 for m in sizes):
        rd.fail(f"{where}.memory_gb", sizes, "expected a list of memory sizes in GB ([40, 80])")
    out["memory_gb"] = tuple(float(m) for m in sizes)
    return out


def load_config(path: str | Path | None = None) -> Config:
    path = Path(path) if path is not None else DEFAULT_CONFIG
    rd = _Reader(path)
    raw = _read_toml(path)

    rd.keys(
        raw,
        "",
        {"timing", "tolerance", "ceilings", "profiles", "devices", "cpu_estimate", "noise", "conditions"},
        {"profiles"},
    )

    t = raw.get("timing", {})
    rd.keys(t, "timing", {f for f in TimingSettings.__dataclass_fields__})
    d = TimingSettings()
    timing = TimingSettings(
        warmup_ms=float(rd.num(t, "warmup_ms", "timing", d.warmup_ms, maximum=MAX_TIMING_MS)),
        rep_ms=float(rd.num(t, "rep_ms", "timing", d.rep_ms, maximum=MAX_TIMING_MS)),
        min_reps=rd.num(t, "min_reps", "timing", d.min_reps, integer=True, maximum=MAX_REPS),
        max_reps=rd.num(t, "max_reps", "timing", d.max_reps, integer=True, maximum=MAX_REPS),
        input_sets=rd.num(t, "input_sets", "timing", d.input_sets, integer=True, maximum=MAX_INPUT_SETS),
        flush_l2=rd.flag(t, "flush_l2", "timing", d.flush_l2),
        max_case_seconds=float(rd.num(t, "max_case_seconds", "timing", d.max_case_seconds, maximum=MAX_CASE_SECONDS)),
        gpu_lead_max_ms=float(rd.num(t, "gpu_lead_max_ms", "timing", d.gpu_lead_max_ms, maximum=MAX_TIMING_MS)),
    )
    if timing.min_reps > timing.max_reps:
        rd.fail("timing.min_reps", timing.min_reps, f"larger than timing.max_reps = {timing.max_reps}")

    tol_raw = raw.get("tolerance", {})
    rd.keys(tol_raw, "tolerance", set(DTYPES), set(DTYPES))
    tolerance = {dt: float(rd.num(tol_raw, dt, "tolerance", maximum=MAX_TOLERANCE)) for dt in DTYPES}

    rd.keys(raw.get("ceilings", {}), "ceilings", set(DEVICE_KINDS))
    ceilings = {kind: _ceiling_settings(rd, c, kind) for kind, c in raw.get("ceilings", {}).items()}

    if not isinstance(raw["profiles"], dict) or not raw["profiles"]:
        rd.fail("profiles", raw["profiles"], "expected at least one profile table")
    case_sets = _case_sets(rd, raw["profiles"])
    if not isinstance(raw.get("devices", {}), dict):
        rd.fail("devices", raw["devices"], "expected a table")
    devices = _devices(rd, raw.get("devices", {}))

    tiers = []
    est = raw.get("cpu_estimate", {})
    rd.keys(est, "cpu_estimate", {"tier"})
    if not isinstance(est.get("tier", []), list):
        rd.fail("cpu_estimate.tier", est["tier"], "expected an array of tables ([[cpu_estimate.tier]])")
    for i, tier in enumerate(est.get("tier", [])):
        where = f"cpu_estimate.tier[{i}]"
        rd.keys(tier, where, {"requires", "fp32", "bf16", "fp16"}, {"requires", "fp32"})
        tiers.append(
            CpuTier(
                rd.strings(tier, "requires", where),
                {p: float(rd.num(tier, p, where, maximum=MAX_PEAK)) for p in ("fp32", "bf16", "fp16") if p in tier},
            )
        )
    return Config(
        path,
        timing,
        tolerance,
        ceilings,
        case_sets,
        devices,
        tuple(tiers),
        raw,
        _noise_settings(rd, raw.get("noise", {})),
        _condition_settings(rd, raw.get("conditions", {})),
    )


def _ceiling_settings(rd: _Reader, c: dict, kind: str) -> CeilingSettings:
    where = f"ceilings.{kind}"
    if kind not in DEVICE_KINDS:
        rd.fail(where, kind, f"unknown device kind (known: {', '.join(DEVICE_KINDS)})")
    rd.keys(c, where, {"gemm_sizes", "copy_mb", "budget_s", "repeats", "top", "max_age_h"}, {"gemm_sizes", "copy_mb"})
    sizes = c["gemm_sizes"]
    rd.keys(sizes, f"{where}.gemm_sizes", set(DTYPES))
    gemm_sizes = {dt: _sizes(rd, lst, f"{where}.gemm_sizes.{dt}") for dt, lst in sizes.items()}
    d = CeilingSettings({}, ())
    return CeilingSettings(
        gemm_sizes,
        _sizes(rd, c["copy_mb"], f"{where}.copy_mb", MAX_COPY_MB),
        float(rd.num(c, "budget_s", where, d.budget_s, maximum=MAX_CASE_SECONDS)),
        rd.num(c, "repeats", where, d.repeats, integer=True, maximum=MAX_REPS),
        rd.num(c, "top", where, d.top, integer=True, maximum=MAX_REPS),
        float(rd.num(c, "max_age_h", where, d.max_age_h, maximum=MAX_AGE_H)),
    )


def _sizes(rd: _Reader, lst, where: str, maximum=None) -> tuple[int, ...]:
    """A positive integer or a non-empty list of them, sorted."""
    lst = [lst] if isinstance(lst, int) and not isinstance(lst, bool) else lst
    if not isinstance(lst, list) or not lst:
        rd.fail(where, lst, "expected a non-empty list of sizes")
    return tuple(sorted(rd.num({"n": v}, "n", where, integer=True, maximum=maximum) for v in lst))


def _settings_from(rd: _Reader, t: dict, where: str, cls):
    """A flat settings dataclass of numbers (and tuples of numbers) from a table; missing keys keep defaults."""
    d = cls()
    rd.keys(t, where, set(cls.__dataclass_fields__))
    vals = {}
    for k, default in vars(d).items():
        if k not in t:
            continue
        if isinstance(default, tuple):
            v = t[k] if isinstance(t[k], list) else [t[k]]
            vals[k] = tuple(float(rd.num({k: x}, k, where)) for x in v)
        else:
            vals[k] = rd.num(t, k, where, integer=isinstance(default, int))
    return cls(**vals)


def _noise_settings(rd: _Reader, t: dict) -> NoiseSettings:
    return _settings_from(rd, t, "noise", NoiseSettings)


def _condition_settings(rd: _Reader, t: dict) -> ConditionSettings:
    return _settings_from(rd, t, "conditions", ConditionSettings)
