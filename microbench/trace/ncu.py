"""Nsight Compute CSV (`ncu --csv ...`) -> per-kernel hardware counters.

Two layouts, told apart by the header:
- long (the default and `--page details`): one row per kernel x section x metric, columns `ID`, `Kernel Name`,
  ..., `Section Name`, `Metric Name`, `Metric Unit`, `Metric Value`. Section sets use display names
  (`Duration`, `Memory Throughput`); `--metrics a,b` puts raw metric names in a section named
  "Command line profiler metrics".
- raw (`--page raw`): one row per kernel, one column per metric, the second row holding the units.
Values carry thousands separators ("1,215,000,000.00"); "n/a" is no value; ncu's own `==PROF==` / `==WARNING==`
lines may precede the header. Units are scaled with SI prefixes as ncu prints them (Kbyte = 1e3 byte, usecond).

What is derived per kernel (names differ between architectures; see `ncu --query-metrics`):
- `duration_ns`: gpu__time_duration.sum, or the Speed Of Light section's `Duration`;
- `tensor_pipe_pct`: the largest sm__pipe_tensor*...pct_of_peak_sustained_* (share of the tensor pipe's peak);
- `tensor_ops_by_precision`: sm__ops_path_tensor_src_<p>_dst_<q>.sum, summed per source precision <p> (operation
  counts as ncu defines them; not converted to FLOPs here);
- `tensor_inst`: the largest sm__inst_executed_pipe_tensor*.sum (overlapping metrics are not added);
- `sass_flops`: add + mul + 2 x fma over fp64/fp32/fp16 thread instructions (smsp__sass_thread_inst_executed_op_*,
  the ncu roofline's own count of non-tensor FLOPs);
- `dram_bytes`: dram__bytes.sum, or read + write, or the Memory Workload Analysis throughput x duration.
"""

from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass, field
from pathlib import Path

from microbench.core.args import digits
from microbench.core.datasheet import nvidia_architecture
from microbench.core.errors import InputError
from microbench.core.files import read_input
from microbench.trace.counters import sass_flops
from microbench.trace.timeline import KERNEL, NO_ID, TimelineBuilder

IDENTITY_COLUMNS = (
    "ID",
    "Process ID",
    "Process Name",
    "Host Name",
    "Kernel Name",
    "Kernel Time",
    "Context",
    "Stream",
    "Block Size",
    "Grid Size",
    "Device",
    "CC",
)
LONG_COLUMNS = ("Section Name", "Metric Name", "Metric Unit", "Metric Value")
_SI = {"": 1.0, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}
_TIME_NS = {"ns": 1.0, "nsecond": 1.0, "us": 1e3, "usecond": 1e3, "ms": 1e6, "msecond": 1e6, "s": 1e9, "second": 1e9}
_CC = re.compile(r"\d{1,2}\.\d{1,2}")  # a compute capability as ncu writes it: 9.0, 10.0, 12.1
MAX_DEVICE = 2**31 - 1
MAX_VALUE = 1e30  # any metric value: beyond it (or inf, nan) the export is corrupt, and sums overflow
MAX_DURATION_NS = 1e15  # one kernel: 11.6 days, the Kineto reader's MAX_DUR_US
_TENSOR_OPS = re.compile(r"^sm__ops_path_tensor_src_([a-z0-9]+?)(?:_dst_[a-z0-9]+)?\.sum$")


@dataclass
class NcuKernel:
    id: int
    name: str
    device: int | None
    cc: str | None
    stream: str | None
    block: str | None
    grid: str | None
    metrics: dict[str, tuple[float | None, str]] = field(default_factory=dict)  # metric -> (value, unit)

    def value(self, *names: str) -> float | None:
        for n in names:
            v = self.metrics.get(n)
            if v is not None and v[0] is not None:
                return v[0]
        return None

    @property
    def duration_ns(self) -> float | None:
        v = self.metrics.get("gpu__time_duration.sum") or self.metrics.get("Duration")
        return None if v is None or v[0] is None else _scaled(v[0], v[1], _TIME_NS, "time")

    @property
    def tensor_pipe_pct(self) -> float | None:
        vals = [
            v
            for k, (v, _) in self.metrics.items()
            if k.startswith("sm__pipe_tensor") and ".pct_of_peak_sustained" in k and v is not None
        ]
        return max(vals) if vals else None

    @property
    def tensor_inst(self) -> float | None:
        vals = [
            v
            for k, (v, _) in self.metrics.items()
            if k.startswith("sm__inst_executed_pipe_tensor") and k.endswith(".sum") and v is not None
        ]
        return max(vals) if vals else None

    @property
    def tensor_ops_by_precision(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for k, (v, _) in self.metrics.items():
            m = _TENSOR_OPS.match(k)
            if m and v is not None:
                out[m.group(1)] = out.get(m.group(1), 0.0) + v
        return out

    @property
    def sass_flops(self) -> float | None:
        return sass_flops(self.values())

    def values(self) -> dict[str, float | None]:
        return {k: v for k, (v, _) in self.metrics.items()}

    @property
    def dram_bytes(self) -> float | None:
        if (b := self.value("dram__bytes.sum")) is not None:
            return _scaled(b, self.metrics["dram__bytes.sum"][1], {}, "bytes")
        parts = [
            (k, self.metrics[k])
            for k in ("dram__bytes_read.sum", "dram__bytes_write.sum")
            if k in self.metrics and self.metrics[k][0] is not None
        ]
        if parts:
            return sum(_scaled(v, u, {}, "bytes") for _, (v, u) in parts)
        thr = self.metrics.get("Memory Workload Analysis/Memory Throughput")
        if thr and thr[0] is not None and thr[1].endswith("/s") and self.duration_ns is not None:
            return _scaled(thr[0], thr[1][:-2], {}, "bytes") * self.duration_ns * 1e-9
        return None

    def summary(self) -> dict:
        """The numbers a timeline row carries (JSON-ready)."""
        dur = self.duration_ns
        flops, nbytes = self.sass_flops, self.dram_bytes
        return {
            "id": self.id,
            "kernel": self.name,
            "device": self.device,
            "cc": self.cc,
            "duration_ns": dur,
            "tensor_pipe_pct": self.tensor_pipe_pct,
            "tensor_inst": self.tensor_inst,
            "tensor_ops_by_precision": self.tensor_ops_by_precision,
            "sass_flops": flops,
            "achieved_sass_tflops": flops / dur * 1e-3 if flops is not None and dur else None,
            "dram_bytes": nbytes,
            "achieved_dram_tbs": nbytes / dur * 1e-3 if nbytes is not None and dur else None,
        }


def _scaled(value: float, unit: str, table: dict[str, float], kind: str) -> float:
    """value in `unit` -> base unit (ns for time, byte for bytes)."""
    unit = (unit or "").strip()
    if kind == "time":
        if unit not in table:
            raise ValueError(f"unknown time unit {unit!r}")
        return value * table[unit]
    m = re.fullmatch(r"([KMGTP]?)i?byte", unit) if unit else None
    if unit == "":
        return value
    if not m:
        raise ValueError(f"unknown byte unit {unit!r}")
    return value * _SI[m.group(1)]


def parse_number(text: str) -> float | None:
    """ncu's printed value -> float; '1,215,000.5' -> 1215000.5; 'n/a' and '' -> None."""
    t = text.strip().replace(",", "")
    if t in ("", "n/a", "N/A"):
        return None
    try:
        return float(t)
    except ValueError:
        return None


def looks_like_ncu_csv(head: str) -> bool:
    """True when the text (the start of a file) is an `ncu --csv` export: its header first, or ncu's own `==PROF==`
    lines first. `ncu --csv ./app > out.csv` writes the application's stdout between ncu's lines and before the
    header (a training script's log can be longer than the head read here): where ncu's lines open the file, the
    reader looks for the header in the whole file and names its absence."""
    lines = head.splitlines()
    if lines and lines[0].startswith("==PROF=="):
        return True
    for line in lines:
        if line.startswith("=="):
            continue
        return line.startswith('"ID",') and '"Kernel Name"' in line
    return False


def _rows(path: Path) -> list[list[str]]:
    text = read_input(path).decode("utf-8", errors="replace")
    lines = text.splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.startswith('"ID",')), None)
    if start is None:
        raise InputError(path, 'not an Nsight Compute CSV: no header line starting with "ID" (ncu --csv)')
    return [r for r in csv.reader(io.StringIO("\n".join(lines[start:]))) if r and not r[0].startswith("==")]


def _kernel(cols: dict[str, int], row: list[str], path: Path, line: int) -> NcuKernel:
    def get(c):
        i = cols.get(c)
        return row[i] if i is not None and i < len(row) and row[i] != "" else None

    try:
        kid = int(get("ID"))
    except (TypeError, ValueError):
        raise InputError(path, f"row {line}: ID {get('ID')!r} is not a kernel number") from None
    dev, cc = get("Device"), get("CC")
    if dev is not None and not (digits(dev) and int(dev) <= MAX_DEVICE):
        raise InputError(path, f"row {line}: Device = {dev!r}: expected a device number from 0 to {MAX_DEVICE:,}")
    if cc is not None and not _CC.fullmatch(cc):
        raise InputError(path, f"row {line}: CC = {cc!r}: expected a compute capability like 9.0")
    return NcuKernel(
        kid,
        get("Kernel Name") or "",
        int(dev) if dev is not None else None,
        cc,
        get("Stream"),
        get("Block Size"),
        get("Grid Size"),
    )


def _value(text: str, path: Path, line: int, metric: str) -> float | None:
    """A metric's printed value, checked: finite and within MAX_VALUE in magnitude."""
    v = parse_number(text)
    if v is not None and not abs(v) <= MAX_VALUE:  # also false for nan
        raise InputError(
            path, f"row {line}: {metric} = {text.strip()[:40]!r}: expected a finite number within +-{MAX_VALUE:g}"
        )
    return v


def read_ncu_csv(path: str | Path) -> list[NcuKernel]:
    """The kernels of an `ncu --csv` export (long or `--page raw` layout), in ID order."""
    path = Path(path)
    rows = _rows(path)
    header = rows[0]
    cols = {c: i for i, c in enumerate(header)}
    if "Kernel Name" not in cols:
        raise InputError(path, "Nsight Compute CSV without a 'Kernel Name' column")
    kernels: dict[int, NcuKernel] = {}
    if all(c in cols for c in LONG_COLUMNS):
        need = max(cols[c] for c in LONG_COLUMNS) + 1  # the rule columns after them may be missing
        for n, row in enumerate(rows[1:], start=2):
            if len(row) < need:
                raise InputError(path, f"row {n}: {len(row)} fields, the metric columns need {need}")
            k = _kernel(cols, row, path, n)
            k = kernels.setdefault(k.id, k)
            name, section = row[cols["Metric Name"]], row[cols["Section Name"]]
            if not name:
                continue  # rule-only rows (a section's advice) carry no metric
            unit, value = row[cols["Metric Unit"]], _value(row[cols["Metric Value"]], path, n, name)
            k.metrics.setdefault(name, (value, unit))
            k.metrics[f"{section}/{name}"] = (value, unit)  # display names repeat across sections
        return [kernels[i] for i in sorted(kernels)]
    units = rows[1] if len(rows) > 1 and rows[1][cols["ID"]] == "" else None
    metric_cols = [(i, c) for i, c in enumerate(header) if c not in IDENTITY_COLUMNS]
    for n, row in enumerate(rows[2 if units else 1 :], start=3 if units else 2):
        k = _kernel(cols, row, path, n)
        for i, c in metric_cols:
            if i < len(row):
                k.metrics[c] = (_value(row[i], path, n, c), units[i] if units and i < len(units) else "")
        kernels[k.id] = k
    return [kernels[i] for i in sorted(kernels)]


def read(path: str | Path):
    """The export as a Timeline: one kernel row per profiled kernel, carrying its counters. Nsight Compute
    replays each kernel alone and records no timestamps: the rows are laid end to end in ID order (a
    serialized timeline: spans, idle time and overlap mean nothing here; kernel time and counters do)."""
    path = Path(path)
    b = TimelineBuilder(str(path), "ncu")
    t = 0.0
    for k in read_ncu_csv(path):
        try:
            dur_ns = k.duration_ns
        except ValueError as e:
            raise InputError(path, f"kernel ID {k.id}: duration: {e}") from None
        if dur_ns is not None and not 0 <= dur_ns <= MAX_DURATION_NS:
            raise InputError(
                path, f"kernel ID {k.id} ({k.name[:60]}): duration {dur_ns:g} ns: expected 0 to {MAX_DURATION_NS:g} ns"
            )
        if dur_ns is None:
            raise InputError(
                path,
                f"kernel ID {k.id} ({k.name[:60]}): no duration (gpu__time_duration.sum or the "
                "Speed Of Light section's Duration): profile with --section SpeedOfLight or "
                "--metrics gpu__time_duration.sum",
            )
        dev = k.device if k.device is not None else 0
        if k.cc and dev not in b.device_properties:
            major, _, minor = k.cc.partition(".")
            b.device_properties[dev] = {
                "id": dev,
                "name": device_name(k.cc),
                "computeMajor": int(major),
                "computeMinor": int(minor or 0),
            }
        b.add_activity(k.name, t, dur_ns * 1e-3, dev, _stream(k.stream), NO_ID, NO_ID, KERNEL)
        b.add_counters(k.values() | _derived(k))
        b.cover(t, t + dur_ns * 1e-3)
        t += dur_ns * 1e-3
    b.meta["serialized"] = "Nsight Compute replays kernels one at a time: no timestamps"
    return b.build()


def device_name(cc: str) -> str:
    """The device an export names only by its compute capability: its architecture (microbench/data/
    compute_capabilities.toml), never one product, so that no datasheet peak is picked from it."""

    arch = nvidia_architecture(cc)  # the architecture only: product names would pick a datasheet entry
    return f"NVIDIA {arch + ' ' if arch else ''}GPU, compute capability {cc} (the export's CC column)"


def _derived(k: NcuKernel) -> dict[str, float]:
    """Base-unit numbers the report uses beside the raw metrics."""
    try:
        nbytes = k.dram_bytes
    except ValueError:  # a byte unit we do not know: leave the bytes out rather than guess a scale
        return {}
    return {} if nbytes is None else {"dram_bytes": nbytes}


def _stream(s: str | None) -> int:
    try:
        return int(s) if s is not None else 0
    except ValueError:
        return 0
