"""Result rows and the files they go to (results.json, results.csv), written row by row so that an
interrupted run keeps everything it measured.

A row is a shared Measurement (time, FLOPs, bytes, ceilings, Tensor Core evidence, status, flags) and a
subject that depends on its kind: a kernel case, a layer of a model's step, a kernel read from a trace.
Reports, plots and comparisons work on the measurement and the flat view of the subject, so a new kind
needs no special case there."""

from __future__ import annotations

import csv
import hashlib
import os
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import ClassVar

from microbench.core.args import digits
from microbench.core.jsonio import clean, dumps

STATUSES = ("ok", "wrong", "skipped", "failed")
SCHEMA = "dawnscope.results/1"


@dataclass(kw_only=True)
class Measurement:
    """What every row has, whatever it is about: the work measured (or analysed) on one device, how long it
    took, how it stands against the ceilings, whether Tensor Cores did it and how we know. Throughput fields
    stay None unless the work was both correct and timed."""

    device: str = ""
    status: str = "ok"  # ok, wrong, skipped, failed
    reason: str = ""
    time_ms: dict | None = None  # {median, p20, p80, cov, reps}
    flops: int | None = None
    bytes: int | None = None
    tflops: float | None = None
    gbps: float | None = None  # bytes / time (for a collective: nccl-tests' algbw)
    busbw_gbps: float | None = None  # collectives only: algbw x the nccl-tests bus factor of the op
    intensity: float | None = None
    ceiling: str | None = None  # the roof this row is judged against: "measured bf16 roofline (compute)"
    ceiling_tflops: float | None = None  # attainable TFLOP/s under that roof at this intensity
    pct_of_ceiling: float | None = None
    pct_of_measured: float | None = None  # of the measured compute peak of this dtype
    pct_of_datasheet: float | None = None  # of the datasheet (GPU) or estimated (CPU) compute peak
    datasheet_source: str | None = None  # datasheet or estimate
    bound: str | None = None  # compute or memory
    tensor_cores: str = "unknown"  # yes, no, unknown
    tensor_core_evidence: str = ""
    flags: list[str] = field(default_factory=list)  # e.g. "above measured ceiling"

    def __post_init__(self):
        if self.status not in STATUSES:
            raise ValueError(f"status {self.status!r} not in {STATUSES}")


MEASUREMENT_FIELDS = tuple(f.name for f in fields(Measurement))
# The subject as every results file has carried it: what compare keys cases on, what old readers expect.
FLAT_KEYS = ("op", "shape", "dtype", "provider", "layer", "phase")
# Keys every row of a results file has had; a kind without them writes these values.
LEGACY_DEFAULTS = {"rel_err": None, "tolerance": None, "tf32_allowed": None, "baseline": False}

ROW_KINDS: dict[str, type[ResultRow]] = {}


def row_kind(cls):
    """Class decorator: a row kind that results files can hold and `row_from_dict` can read back."""
    ROW_KINDS[cls.kind] = cls
    return cls


@dataclass(kw_only=True)
class ResultRow(Measurement):
    """A measurement and its subject. One subclass per kind of subject (a kernel case, a model layer, a kernel
    read from a trace, ...); adding a kind is one small class: its subject fields, `flat()` and `from_flat()`.

    On file a row is flat: `kind`, the FLAT_KEYS, the measurement, the kind's own fields, `params`."""

    kind: ClassVar[str] = ""
    source: ClassVar[str] = ""  # the `source` older files carry for this kind
    params: dict = field(default_factory=dict)  # details for machines (the shape's parameters, ...)

    def flat(self) -> dict:
        """The subject as FLAT_KEYS."""
        raise NotImplementedError

    @classmethod
    def from_flat(cls, d: dict) -> dict:
        """The kind's own fields from a file's row that lacks them (written before rows had kinds)."""
        return {}

    @property
    def is_baseline(self) -> bool:
        """The row other rows of its case are compared with (the baseline provider's)."""
        return False

    def key(self) -> tuple:
        """What identifies the same case across machines and files."""
        f = self.flat()
        return tuple(f.get(k) for k in FLAT_KEYS)

    def as_dict(self) -> dict:
        d = {"kind": self.kind, **LEGACY_DEFAULTS, **{k: None for k in FLAT_KEYS}, **self.flat()}
        d.update(asdict(self))
        d["source"] = self.source
        return clean(d)


@row_kind
@dataclass(kw_only=True)
class KernelCaseRow(ResultRow):
    """A case (op, shape, dtype) through one provider; `layer`/`phase` when it was replayed from a model step."""

    kind: ClassVar[str] = "kernel_case"
    source: ClassVar[str] = "microbench"
    op: str
    shape: str
    dtype: str
    provider: str
    rel_err: float | None = None
    tolerance: float | None = None
    tf32_allowed: bool | None = None  # for fp32 storage: was TF32 math allowed?
    baseline: bool = False
    layer: str | None = None
    phase: str | None = None
    # Replayed from a profiler trace (roofline --from-trace): the trace file, its operators and calls, its kernel
    # time per call and device, and ours beside it (microbench/roofline/trace_cases.py); results.json only, not a
    # results.csv column. Not `source`: that key is every row's kind marker on file (files from before kinds are
    # read by it).
    trace_source: dict | None = None

    @property
    def is_baseline(self) -> bool:
        return self.baseline

    def flat(self) -> dict:
        return {
            "op": self.op,
            "shape": self.shape,
            "dtype": self.dtype,
            "provider": self.provider,
            "layer": self.layer,
            "phase": self.phase,
        }


@row_kind
@dataclass(kw_only=True)
class LayerRow(ResultRow):
    """One (layer, phase) of a model's training step."""

    kind: ClassVar[str] = "layer"
    source: ClassVar[str] = "model"
    model: str
    layer: str
    phase: str
    module: str  # the layer's module type (Conv2d, Linear, loss, -)
    dtype: str
    shape: str = "-"  # its first GEMM/conv case's shape

    def flat(self) -> dict:
        return {
            "op": self.module,
            "shape": self.shape,
            "dtype": self.dtype,
            "provider": f"{self.model} step",
            "layer": self.layer,
            "phase": self.phase,
        }

    @classmethod
    def from_flat(cls, d: dict) -> dict:
        return {"model": str(d.get("provider") or "").removesuffix(" step"), "module": d.get("op") or "-"}


@row_kind
@dataclass(kw_only=True)
class TraceKernelRow(ResultRow):
    """One distinct kernel (name, device) read from a profiler trace, over all its calls."""

    kind: ClassVar[str] = "trace_kernel"
    source: ClassVar[str] = "trace"
    kernel: str
    kernel_class: str  # its class in microbench/data/kernel_rules.toml
    calls: int
    dtype: str = ""  # a trace does not say

    def flat(self) -> dict:
        return {
            "op": self.kernel_class,
            "shape": self.kernel,
            "dtype": self.dtype,
            "provider": "trace",
            "layer": None,
            "phase": None,
        }

    @classmethod
    def from_flat(cls, d: dict) -> dict:
        params = d.get("params") if isinstance(d.get("params"), dict) else {}
        return {"kernel": d.get("shape") or "", "kernel_class": d.get("op") or "", "calls": params.get("calls") or 0}


@row_kind
@dataclass(kw_only=True)
class TimeToAccuracyRow(ResultRow):
    """Time to a target accuracy (microbench.tta): one seed's run, or (seed None) the summary over seeds."""

    kind: ClassVar[str] = "tta"
    source: ClassVar[str] = "tta"
    task: str  # model/dataset/top1>=target
    provider: str
    seed: int | None = None
    dtype: str = "fp32"

    def flat(self) -> dict:
        return {
            "op": "tta",
            "shape": self.task,
            "dtype": self.dtype,
            "provider": self.provider,
            "layer": None if self.seed is None else f"seed {self.seed}",
            "phase": None,
        }

    @classmethod
    def from_flat(cls, d: dict) -> dict:
        layer = str(d.get("layer") or "")
        return {"task": d.get("shape") or "", "seed": int(layer[5:]) if digits(layer[5:]) else None}


@row_kind
@dataclass(kw_only=True)
class CollectiveRow(ResultRow):
    """One collective at one message size over `nranks` ranks (microbench.comm): `bytes` the message bytes as
    nccl-tests counts them, `gbps` its algbw, `busbw_gbps` its bus bandwidth, `flops` 0."""

    kind: ClassVar[str] = "collective"
    source: ClassVar[str] = "collective"
    op: str  # allreduce, allgather, reducescatter, broadcast, alltoall
    message_bytes: int
    nranks: int
    backend: str = ""  # gloo, nccl (RCCL answers to nccl)
    dtype: str = "fp32"

    def flat(self) -> dict:
        return {
            "op": self.op,
            "shape": f"bytes={self.message_bytes} ranks={self.nranks}",
            "dtype": self.dtype,
            "provider": "torch.distributed",
            "layer": None,
            "phase": None,
        }

    @classmethod
    def from_flat(cls, d: dict) -> dict:
        parts = dict(p.split("=", 1) for p in str(d.get("shape") or "").split() if "=" in p)
        num = {k: int(v) for k, v in parts.items() if digits(v)}
        return {"message_bytes": num.get("bytes", 0), "nranks": num.get("ranks", 0)}


@dataclass(kw_only=True)
class OtherRow(ResultRow):
    """A row of a kind this version does not know (a newer file's): kept with its flat subject."""

    read_kind: str
    op: str = ""
    shape: str = ""
    dtype: str = ""
    provider: str = ""
    layer: str | None = None
    phase: str | None = None

    def flat(self) -> dict:
        return {k: getattr(self, k) for k in FLAT_KEYS}

    def as_dict(self) -> dict:
        d = super().as_dict()
        d["kind"] = d.pop("read_kind")
        return d


_KIND_OF_SOURCE = {cls.source: kind for kind, cls in ROW_KINDS.items()}


def row_from_dict(d: dict) -> ResultRow:
    """A row of a results file back as its kind; files from before kinds by their `source`."""
    kind = d.get("kind") or _KIND_OF_SOURCE.get(d.get("source") or "microbench")
    cls = ROW_KINDS.get(kind, OtherRow)
    names = {f.name for f in fields(cls)}
    kw = {**cls.from_flat(d), **{k: v for k, v in d.items() if k in names}}
    if cls is OtherRow:
        kw["read_kind"] = str(d.get("kind") or d.get("source") or "")
    kw["flags"] = list(kw.get("flags") or [])
    kw["params"] = dict(kw.get("params") or {})
    if kw.get("status") not in STATUSES:
        kw["status"] = "failed" if kw.get("status") else "ok"
    return cls(**kw)


def rows_of(rows) -> list[ResultRow]:
    """Rows as typed rows, whether they come typed or as a results file's dicts."""
    return [r if isinstance(r, ResultRow) else row_from_dict(r) for r in rows]


# The columns of results.csv: the flat subject, the timing, the measurement, the legacy keys; `kind` last
# (appended, so that readers of older files by position still line up).
CSV_FIELDS = (
    ["op", "shape", "dtype", "provider", "device", "time_ms_median", "time_ms_p20", "time_ms_p80", "time_cov"]
    + [k for k in MEASUREMENT_FIELDS if k not in ("device", "time_ms", "flags")]
    + list(LEGACY_DEFAULTS)
    + ["source", "layer", "phase", "flags", "kind"]
)


def csv_record(row: ResultRow) -> dict:
    d = row.as_dict()
    t = d.pop("time_ms") or {}
    d["time_ms_median"], d["time_ms_p20"] = t.get("median"), t.get("p20")
    d["time_ms_p80"], d["time_cov"] = t.get("p80"), t.get("cov")
    d["flags"] = ";".join(d["flags"])
    return {k: d.get(k) for k in CSV_FIELDS}


def results_header(
    hardware: dict,
    software: dict,
    config_file: str | Path,
    config: dict,
    started: str,
    ceilings: list | None = None,
    notes: list | None = None,
    **extra,
) -> dict:
    """The header of every results.json (roofline's and decompose's): the machine, the configuration (its file
    and that file's sha256, then what the command ran of it), when, the ceilings and the notes."""
    path = Path(config_file)
    block = {"file": str(path), "sha256": hashlib.sha256(path.read_bytes()).hexdigest(), **config}
    return {
        "hardware": hardware,
        "software": software,
        "config": block,
        "started": started,
        "ceilings": list(ceilings or []),
        "notes": list(notes or []),
        **extra,
    }


class ResultsWriter:
    """results.json (rewritten atomically after every row) and results.csv (appended and flushed), in
    `out_dir`: for a command, the staging folder of a microbench.core.outdir.OutputDir, so an earlier run's
    files in --out stay untouched until the run commits."""

    def __init__(self, out_dir: str | Path, header: dict):
        self.dir = Path(out_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.json_path = self.dir / "results.json"
        self.csv_path = self.dir / "results.csv"
        self.doc = {"schema": SCHEMA, **header, "results": []}
        self.doc.setdefault("ceilings", [])
        self._csv = open(self.csv_path, "w", newline="")
        self._writer = csv.DictWriter(self._csv, fieldnames=CSV_FIELDS)
        self._writer.writeheader()
        self._csv.flush()
        self._dump()

    def set(self, key: str, value) -> None:
        self.doc[key] = value
        self._dump()

    def add(self, row: ResultRow) -> None:
        self.doc["results"].append(row.as_dict())
        self._writer.writerow(csv_record(row))
        self._csv.flush()
        self._dump()

    def add_many(self, rows) -> None:
        """Several rows, one rewrite of results.json (a model decomposition adds hundreds at once)."""
        for row in rows:
            self.doc["results"].append(row.as_dict())
            self._writer.writerow(csv_record(row))
        self._csv.flush()
        self._dump()

    def _dump(self) -> None:
        # A name no other writer uses (two writers in one folder never share a temporary file), replaced
        # atomically: results.json is always a whole document.
        tmp = self.json_path.with_name(f".results.json.{os.getpid()}-{id(self):x}.tmp")
        tmp.write_text(dumps(self.doc))
        os.replace(tmp, self.json_path)

    def close(self) -> None:
        if not self._csv.closed:
            self._csv.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False
