"""The one result row type and the files it goes to (results.json, results.csv), written row by row so
that an interrupted run keeps everything it measured."""
from __future__ import annotations

import csv
import os
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from microbench.core.jsonio import clean, dumps

STATUSES = ("ok", "wrong", "skipped", "failed")
SCHEMA = "dawnscope.results/1"


@dataclass
class ResultRow:
    """A measured (or analysed) piece of work on one device.

    A kernel microbenchmark, a model layer and a kernel read from a trace all become rows like this.
    Throughput fields stay None unless the work was both correct and timed.
    """

    op: str
    shape: str
    dtype: str
    provider: str
    device: str
    status: str = "ok"  # ok, wrong, skipped, failed
    reason: str = ""
    time_ms: dict | None = None  # {median, p20, p80, cov, reps}
    flops: int | None = None
    bytes: int | None = None
    tflops: float | None = None
    gbps: float | None = None
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
    rel_err: float | None = None
    tolerance: float | None = None
    tf32_allowed: bool | None = None  # for fp32 storage: was TF32 math allowed?
    baseline: bool = False
    flags: list[str] = field(default_factory=list)  # e.g. "above measured ceiling"
    source: str = "microbench"  # microbench, model, trace
    layer: str | None = None
    phase: str | None = None
    params: dict = field(default_factory=dict)  # the shape's parameters, for machines

    def __post_init__(self):
        if self.status not in STATUSES:
            raise ValueError(f"status {self.status!r} not in {STATUSES}")

    def key(self) -> tuple:
        """What identifies the same case across machines and files."""
        return (self.op, self.shape, self.dtype, self.provider, self.layer, self.phase)

    def as_dict(self) -> dict:
        return _clean(asdict(self))


_clean = clean  # older name, still imported by callers


CSV_FIELDS = [f.name for f in fields(ResultRow) if f.name not in ("time_ms", "params", "flags")]
CSV_FIELDS[5:5] = ["time_ms_median", "time_ms_p20", "time_ms_p80", "time_cov"]
CSV_FIELDS.append("flags")


def csv_record(row: ResultRow) -> dict:
    d = row.as_dict()
    t = d.pop("time_ms") or {}
    d.pop("params")
    d["time_ms_median"], d["time_ms_p20"] = t.get("median"), t.get("p20")
    d["time_ms_p80"], d["time_cov"] = t.get("p80"), t.get("cov")
    d["flags"] = ";".join(d["flags"])
    return d


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
