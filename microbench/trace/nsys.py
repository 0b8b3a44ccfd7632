"""Nsight Systems SQLite export (`nsys export --type sqlite`) -> kernels, runtime launches, memory copies, NVTX
ranges and GPUs, read with SQL over its tables (the file is opened read-only and never modified).

Tables used (Nsight Systems export schema 3.x; missing tables read as empty):
- CUPTI_ACTIVITY_KIND_KERNEL: start/end (ns), deviceId, streamId, correlationId, demangledName/shortName (ids into
  StringIds), grid and block sizes;
- CUPTI_ACTIVITY_KIND_RUNTIME: CUDA runtime/driver calls with the correlationId that ties a launch to its kernel,
  the calling thread (globalTid) and the function name (nameId);
- CUPTI_ACTIVITY_KIND_MEMCPY / _MEMSET: copies (bytes, copyKind labelled by ENUM_CUDA_MEMCPY_OPER) and memsets;
- NVTX_EVENTS: push/pop and start/end ranges (text, or textId into StringIds), on a thread (globalTid);
- TARGET_INFO_GPU: device id, name, SM count, memory, clock, compute capability;
- META_DATA_EXPORT: the exporter's version and schema.
A globalTid packs the process id in bits 24-47 (Nsight Systems' serialized GlobalId); ranges and launches of one
process are matched by it. Times are converted to microseconds, the unit of Kineto traces.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

from microbench.core.errors import InputError
from microbench.core.files import open_input
from microbench.trace.timeline import CPU_RANGE, KERNEL, MEMCPY, MEMSET, NO_ID, TimelineBuilder

SQLITE_MAGIC = b"SQLite format 3\x00"
# The domain of every number read (checked in SQL before the rows are, _check_fields): a type other than an
# integer, or a value beyond these, is a corrupt export, one line naming the table, row, column and value.
MAX_NS = 2**62  # a timestamp in ns (146 years): times must also survive the conversion to microseconds
MAX_DUR_NS = 10**15  # one event: 11.6 days, as the Kineto reader's MAX_DUR_US
MAX_ID = 2**63 - 1
MAX_DEVICE = 2**31 - 1
MAX_COUNT = 2**53  # bytes of a copy, memory of a GPU, grid and block sizes: exact in a float
# Times may be negative: events recorded before the session's start (NVTX ranges opened earlier) are.
TIME, ID, DEVICE, COUNT = (-MAX_NS, MAX_NS, False), (0, MAX_ID, True), (0, MAX_DEVICE, False), (0, MAX_COUNT, True)
FIELDS = {  # table -> column -> (lowest, highest, NULL allowed); absent columns are not read either
    "CUPTI_ACTIVITY_KIND_KERNEL": {
        "start": TIME,
        "end": TIME,
        "deviceId": DEVICE,
        "streamId": ID,
        "correlationId": ID,
        "demangledName": ID,
        "shortName": ID,
        "gridX": COUNT,
        "gridY": COUNT,
        "gridZ": COUNT,
        "blockX": COUNT,
        "blockY": COUNT,
        "blockZ": COUNT,
    },
    "CUPTI_ACTIVITY_KIND_RUNTIME": {"start": TIME, "end": TIME, "correlationId": ID, "nameId": ID, "globalTid": ID},
    "CUPTI_ACTIVITY_KIND_MEMCPY": {
        "start": TIME,
        "end": TIME,
        "deviceId": DEVICE,
        "streamId": ID,
        "correlationId": ID,
        "bytes": COUNT,
        "copyKind": ID,
    },
    "CUPTI_ACTIVITY_KIND_MEMSET": {
        "start": TIME,
        "end": TIME,
        "deviceId": DEVICE,
        "streamId": ID,
        "correlationId": ID,
        "bytes": COUNT,
    },
    "NVTX_EVENTS": {
        "start": TIME,
        "end": (-MAX_NS, MAX_NS, True),
        "globalTid": ID,
        "textId": ID,
        "domainId": ID,
        "eventType": ID,
    },
    "TARGET_INFO_GPU": {
        "id": DEVICE,
        "smCount": COUNT,
        "totalMemory": COUNT,
        "memoryBandwidth": COUNT,
        "clockRate": COUNT,
        "computeMajor": COUNT,
        "computeMinor": COUNT,
    },
}
NVTX_RANGE_TYPES = ("NvtxPushPopRange", "NvtxStartEndRange")
US_PER_NS = 1e-3


def is_sqlite(head: bytes) -> bool:
    return head.startswith(SQLITE_MAGIC)


def process_of(global_tid: int | None) -> int | None:
    """Nsight Systems' serialized GlobalId -> the process id it carries."""
    return None if global_tid is None else (int(global_tid) >> 24) & 0xFFFFFF


@dataclass
class NsysExport:
    path: Path
    gpus: list[dict] = field(default_factory=list)
    kernels: list[dict] = field(
        default_factory=list
    )  # ts_us, dur_us, device, stream, correlation, name, short_name, grid, block
    launches: list[dict] = field(default_factory=list)  # ts_us, dur_us, correlation, name, tid, pid
    copies: list[dict] = field(default_factory=list)  # ts_us, dur_us, device, stream, correlation, kind, bytes
    ranges: list[dict] = field(default_factory=list)  # name, ts_us, dur_us, tid, pid, domain
    meta: dict = field(default_factory=dict)


def _connect(path: Path) -> sqlite3.Connection:
    with open_input(path) as f:
        head = f.read(16)
    if not is_sqlite(head):
        raise InputError(path, "not an SQLite database (an Nsight Systems export is `nsys export --type sqlite`)")
    return sqlite3.connect(f"file:{path}?mode=ro", uri=True)


def _tables(con) -> set[str]:
    return {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def _columns(con, table: str) -> set[str]:
    return {r[1] for r in con.execute(f'PRAGMA table_info("{table}")')}


def _check_fields(con, path: Path, table: str) -> None:
    """Every number of `table` the reader uses is an integer in its FIELDS range (NULL only where allowed), and
    an event's end is not before its start nor further than MAX_DUR_NS after it: one query finds the first
    row that breaks a rule, so a good export costs one scan."""
    cols = _columns(con, table)
    fields = {c: rule for c, rule in FIELDS[table].items() if c in cols}
    bad = []
    for c, (lo, hi, null) in fields.items():
        types = "'integer', 'null'" if null else "'integer'"
        bad.append(f'(typeof("{c}") NOT IN ({types}) OR "{c}" < {lo} OR "{c}" > {hi})')
    if "start" in fields and "end" in fields:
        bad.append(f'(typeof("end") = \'integer\' AND ("end" < "start" OR "end" - "start" > {MAX_DUR_NS}))')
    names = list(fields)
    if not names:
        return
    quoted = ", ".join(f'"{c}"' for c in names)
    row = con.execute(f'SELECT rowid, {quoted} FROM "{table}" WHERE {" OR ".join(bad)} LIMIT 1').fetchone()
    if row is None:
        return
    values = dict(zip(names, row[1:]))
    for c, (lo, hi, null) in fields.items():
        v = values[c]
        if not ((v is None and null) or (type(v) is int and lo <= v <= hi)):
            raise InputError(
                path,
                f"{table} row {row[0]}: {c} = {v!r}: expected an integer from {lo:,} to {hi:,}"
                + (" or NULL" if null else ""),
            )
    raise InputError(
        path,
        f"{table} row {row[0]}: start = {values['start']}, end = {values['end']}: the event "
        f"ends before it starts or lasts longer than {MAX_DUR_NS:g} ns",
    )


def _kernels(con, tables) -> list[dict]:
    if "CUPTI_ACTIVITY_KIND_KERNEL" not in tables:
        return []
    cols = _columns(con, "CUPTI_ACTIVITY_KIND_KERNEL")
    name_col = "demangledName" if "demangledName" in cols else "shortName"
    sql = (
        f"SELECT k.start, k.end, k.deviceId, k.streamId, k.correlationId, n.value, s.value, "
        f"k.gridX, k.gridY, k.gridZ, k.blockX, k.blockY, k.blockZ "
        f"FROM CUPTI_ACTIVITY_KIND_KERNEL k LEFT JOIN StringIds n ON n.id = k.{name_col} "
        f"LEFT JOIN StringIds s ON s.id = k.shortName ORDER BY k.start"
    )
    return [
        {
            "ts_us": a * US_PER_NS,
            "dur_us": (b - a) * US_PER_NS,
            "device": dev,
            "stream": stream,
            "correlation": corr,
            "name": _text(name) or _text(short) or "?",
            "short_name": _text(short),
            "grid": [gx, gy, gz],
            "block": [bx, by, bz],
        }
        for a, b, dev, stream, corr, name, short, gx, gy, gz, bx, by, bz in con.execute(sql)
    ]


def _text(v) -> str | None:
    """A string of StringIds or a text column: SQLite may hold any type there."""
    return v if v is None or isinstance(v, str) else str(v)


def _launches(con, tables) -> list[dict]:
    if "CUPTI_ACTIVITY_KIND_RUNTIME" not in tables:
        return []
    sql = (
        "SELECT r.start, r.end, r.correlationId, s.value, r.globalTid FROM CUPTI_ACTIVITY_KIND_RUNTIME r "
        "LEFT JOIN StringIds s ON s.id = r.nameId ORDER BY r.start"
    )
    return [
        {
            "ts_us": a * US_PER_NS,
            "dur_us": (b - a) * US_PER_NS,
            "correlation": corr,
            "name": _text(name),
            "tid": tid,
            "pid": process_of(tid),
        }
        for a, b, corr, name, tid in con.execute(sql)
    ]


def _copies(con, tables) -> list[dict]:
    out = []
    if "CUPTI_ACTIVITY_KIND_MEMCPY" in tables:
        labels = (
            {i: lab for i, lab in con.execute("SELECT id, label FROM ENUM_CUDA_MEMCPY_OPER")}
            if "ENUM_CUDA_MEMCPY_OPER" in tables
            else {}
        )
        for a, b, dev, stream, corr, nbytes, kind in con.execute(
            "SELECT start, end, deviceId, streamId, correlationId, bytes, copyKind "
            "FROM CUPTI_ACTIVITY_KIND_MEMCPY ORDER BY start"
        ):
            out.append(
                {
                    "ts_us": a * US_PER_NS,
                    "dur_us": (b - a) * US_PER_NS,
                    "device": dev,
                    "stream": stream,
                    "correlation": corr,
                    "kind": f"Memcpy {labels.get(kind, kind)}",
                    "bytes": nbytes,
                }
            )
    if "CUPTI_ACTIVITY_KIND_MEMSET" in tables:
        for a, b, dev, stream, corr, nbytes in con.execute(
            "SELECT start, end, deviceId, streamId, correlationId, bytes FROM CUPTI_ACTIVITY_KIND_MEMSET"
        ):
            out.append(
                {
                    "ts_us": a * US_PER_NS,
                    "dur_us": (b - a) * US_PER_NS,
                    "device": dev,
                    "stream": stream,
                    "correlation": corr,
                    "kind": "Memset",
                    "bytes": nbytes,
                }
            )
    return sorted(out, key=lambda c: c["ts_us"])


def _ranges(con, tables) -> list[dict]:
    if "NVTX_EVENTS" not in tables:
        return []
    types = (
        [i for (i,) in con.execute("SELECT id FROM ENUM_NSYS_EVENT_TYPE WHERE name IN (?, ?)", NVTX_RANGE_TYPES)]
        if "ENUM_NSYS_EVENT_TYPE" in tables
        else [59, 60]
    )  # the ids of schema 3.x, when the enum is absent
    marks = ",".join("?" * len(types))
    sql = (
        f"SELECT COALESCE(e.text, s.value), e.start, e.end, e.globalTid, e.domainId FROM NVTX_EVENTS e "
        f"LEFT JOIN StringIds s ON s.id = e.textId WHERE e.eventType IN ({marks}) AND e.end IS NOT NULL "
        f"ORDER BY e.start"
    )
    return [
        {
            "name": _text(name) or "?",
            "ts_us": a * US_PER_NS,
            "dur_us": (b - a) * US_PER_NS,
            "tid": tid,
            "pid": process_of(tid),
            "domain": dom,
        }
        for name, a, b, tid, dom in con.execute(sql, types)
    ]


def _gpus(con, tables) -> list[dict]:
    if "TARGET_INFO_GPU" not in tables:
        return []
    cols = _columns(con, "TARGET_INFO_GPU")
    want = [
        c
        for c in (
            "id",
            "name",
            "smCount",
            "totalMemory",
            "memoryBandwidth",
            "clockRate",
            "computeMajor",
            "computeMinor",
            "chipName",
            "busLocation",
        )
        if c in cols
    ]
    rows = [dict(zip(want, row)) for row in con.execute(f"SELECT {', '.join(want)} FROM TARGET_INFO_GPU ORDER BY id")]
    for g in rows:
        for k in ("name", "chipName", "busLocation"):
            if k in g:
                g[k] = _text(g[k])
    return rows


def read_nsys_sqlite(path: str | Path) -> NsysExport:
    path = Path(path)
    con = _connect(path)
    try:
        tables = _tables(con)
        if "StringIds" not in tables:
            raise InputError(path, "an SQLite file without the StringIds table: not an Nsight Systems export")
        for table in FIELDS:
            if table in tables:
                _check_fields(con, path, table)
        meta = dict(con.execute("SELECT name, value FROM META_DATA_EXPORT")) if "META_DATA_EXPORT" in tables else {}
        return NsysExport(
            path,
            _gpus(con, tables),
            _kernels(con, tables),
            _launches(con, tables),
            _copies(con, tables),
            _ranges(con, tables),
            {k: meta[k] for k in ("EXPORT_PRODUCT_VERSION", "EXPORT_SCHEMA_VERSION") if k in meta},
        )
    except sqlite3.DatabaseError as e:
        raise InputError(path, f"SQLite error: {e}") from None
    finally:
        con.close()


def read(path: str | Path):
    """The export as a Timeline (microbench/trace/timeline.py): kernels, copies, launches, NVTX ranges (CPU
    side) and the GPUs' properties under the names Kineto uses (name, computeMajor/Minor, numSms,
    totalGlobalMem), so the metrics and the report need no case for this format."""
    ex = read_nsys_sqlite(path)
    b = TimelineBuilder(str(path), "nsys")
    for g in ex.gpus:
        b.device_properties[int(g["id"])] = {
            "id": g["id"],
            "name": g.get("name"),
            "computeMajor": g.get("computeMajor"),
            "computeMinor": g.get("computeMinor"),
            "numSms": g.get("smCount"),
            "totalGlobalMem": g.get("totalMemory"),
        }
    b.meta.update(ex.meta)
    for k in ex.kernels:
        b.add_activity(
            k["name"], k["ts_us"], k["dur_us"], k["device"], k["stream"], _id(k["correlation"]), NO_ID, KERNEL
        )
        b.cover(k["ts_us"], k["ts_us"] + k["dur_us"])
    for c in ex.copies:
        b.add_activity(
            c["kind"],
            c["ts_us"],
            c["dur_us"],
            c["device"],
            c["stream"],
            _id(c["correlation"]),
            NO_ID,
            MEMSET if c["kind"] == "Memset" else MEMCPY,
        )
        b.cover(c["ts_us"], c["ts_us"] + c["dur_us"])
    for launch in ex.launches:
        pid = launch["pid"] if launch["pid"] is not None else 0
        b.add_launch(
            launch["name"] or "?",
            launch["ts_us"],
            launch["dur_us"],
            pid,
            b.thread(pid, launch["tid"]),
            _id(launch["correlation"]),
        )
        b.cover(launch["ts_us"], launch["ts_us"] + launch["dur_us"])
    for r in ex.ranges:
        pid = r["pid"] if r["pid"] is not None else 0
        b.add_range(r["name"], r["ts_us"], r["dur_us"], pid, b.thread(pid, r["tid"]), CPU_RANGE)
        b.cover(r["ts_us"], r["ts_us"] + r["dur_us"])
    return b.build()


def _id(v) -> int:
    return int(v) if v is not None else -1
