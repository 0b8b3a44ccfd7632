"""The PyTorch profiler (Kineto) JSON reader: a trace file -> one Timeline (microbench/trace/timeline.py).

Kineto writes a Chrome trace: an object with a `traceEvents` array and a few header keys (`deviceProperties`,
`distributedInfo`, ...), plain or gzip (decided by the file's first bytes), from any machine, NVIDIA (CUPTI)
or AMD (ROCm). It is parsed with msgspec (docs/traces.md has the measurements against the standard library,
orjson and ijson), piece by piece: the decompressed text is read CHUNK_BYTES at a time, the events up to the last
complete one are decoded into typed structs that keep only the fields the timeline needs, appended to its
columns and dropped. Memory stays a few chunks plus the columns whatever the file's size (no dict per event, no
whole text). A file the piecewise reading cannot cut, and every broken file, is read whole instead
(`_read_whole`), which words the one-line errors.

Which event goes where (docs/traces.md, "One timeline"). Categories are compared in lower case: every
schema torch.profiler has written since 1.8 is read (the 2021 schema of PyTorch 1.8/1.9 writes `Operator`,
`Runtime`, `Kernel`, `Memcpy`, `Memset` and a kernel's `external id` in lower case: the TensorBoard plugin's
ResNet-50 sample, pytorch/kineto tb_plugin/samples/resnet50_num_workers_4; later schemas `cpu_op`,
`cuda_runtime` / `cuda_driver` / `hip_runtime`, `kernel`, `gpu_memcpy`, `gpu_memset`, `External id`):
- complete events (`ph: X`) only; their extent makes the traced span, except the profiler's own `Trace`
  envelope, which also covers its warm-up;
- `kernel`, `gpu_memcpy` / `memcpy`, `gpu_memset` / `memset` -> kernels (category kernel / memcpy / memset);
- `runtime`, `driver` or a category ending in `_runtime` or `_driver` (cuda_runtime, cuda_driver, hip_runtime)
  with an integer `correlation` -> launches;
- `ProfilerStep#N` in any host category (`user_annotation`, `cpu_op`, the 2021 `Operator`) -> a CPU range,
  never an operator, once per (process, start) where a profiler wrote it twice;
- `user_annotation` -> CPU ranges; `gpu_user_annotation` -> GPU ranges; `cpu_op` / `operator` -> CPU operators
  (with `Input Dims`, `Input type`, `Concrete Inputs`, `Input Strides` where recorded);
- `cuda_profiler_range` (CUPTI range-profiler mode) -> a kernel with the hardware counters of its `args`;
- counter events (`ph: C`) of category `hardware_counters` on a `GPU N Counters` track (CUPTI PM sampling) ->
  `Timeline.pm_samples`, a value per metric per sample;
- flow events (`ph` s / f; `cat` `ac2g` since 2022, `async` named `launch` before): their id is the correlation
  id; they are counted (`meta["flow_events"]`) and link a launch and a kernel only where an event's `args`
  has no `correlation` (the flow's start binds the runtime call at its ts and thread, its end the kernel at
  its ts and stream; `meta["linked_by_flows"]`).
Everything else (python_function, cuda_sync, other counters) is left out; the device categories no rule knows are
counted by name (`meta["unread_device_categories"]`).
"""

from __future__ import annotations

import re
from decimal import Decimal
from functools import lru_cache
from pathlib import Path
from typing import Any

import msgspec
import tomllib

from microbench.core.errors import InputError
from microbench.core.jsonio import read_byte_chunks, read_bytes
from microbench.core.resources import data_file
from microbench.trace.timeline import (
    CPU_RANGE,
    GPU_RANGE,
    KERNEL,
    MEMCPY,
    MEMSET,
    NO_ID,
    STEP_RE,
    Timeline,
    TimelineBuilder,
)

# Decompressed bytes read at a time: events are decoded a chunk at a time, so this bounds the memory.
CHUNK_BYTES = 256 << 10
# A buffer this long without a cut between events, or a header this long: leave it to the whole-file reading.
MAX_PIECE_BYTES = 64 << 20
CUT_TRIES = 16
# Events decoded per batch when the whole file is read at once.
BATCH_EVENTS = 1_000
HOST_KEY = "dawnscope_host"  # _Meta.dawnscope_host: the host facts a dawnscope run writes into its traces
HEADER_KEYS = (
    "schemaVersion",
    "traceName",
    "displayTimeUnit",
    "baseTimeNanoseconds",
    "cuda_runtime_version",
    "cuda_driver_version",
    "cupti_version",
    "roctracer_version",
    "hip_runtime_version",
)
COPY_CATEGORIES = {"gpu_memcpy": MEMCPY, "memcpy": MEMCPY, "gpu_memset": MEMSET, "memset": MEMSET}
# Host operators: `cpu_op` since PyTorch 1.10, `Operator` in the 2021 schema (lower-cased here).
OPERATOR_CATEGORIES = ("cpu_op", "operator")
# Runtime / driver calls: `cuda_runtime`, `cuda_driver`, `hip_runtime`, ...; the 2021 schema's `Runtime`.
RUNTIME_CATEGORIES = ("runtime", "driver")
# Flow events: `ac2g` (async CPU to GPU) since Kineto 2022; `async` (name `launch`) in the 2021 schema.
FLOW_CATEGORIES = ("ac2g", "async")
# Host-side categories a profiler step can be filed under; every other category's ProfilerStep#N is GPU work.
HOST_CATEGORIES = ("user_annotation", "cpu_op", "operator", "python_function", "cpu_instant_event", "")
# Complete events left out on purpose (host-side, or the profiler's own); any other category is counted by name,
# so that device work in a category no reader knows (an MTIA trace's `mtia_ccp_events`, a future profiler's)
# is named in the report, not silently missing (libkineto ActivityType.cpp lists the names).
LEFT_OUT_CATEGORIES = (
    "python_function",
    "cuda_sync",
    "overhead",
    "cpu_instant_event",
    "trace",
    "python",
    "memory",
    "fwdbwd",
    "external_correlation",
    "",
)
# Events whose times the report cannot do without: a non-numeric ts/dur there is an error, elsewhere a skip.
NEEDS_TIMES = ("kernel", "gpu_memcpy", "gpu_memset", "user_annotation", "gpu_user_annotation")
_NUM = (int, float)
_EXACT = (int, float, Decimal)
# CUPTI range-profiler mode (torch.profiler with experimental_config profiler_metrics): one range per kernel.
PROFILER_RANGE = "cuda_profiler_range"
# The domain of an event's numbers: beyond these a value is corrupt, not a long run, and would overflow later
# arithmetic (a ts + dur of 1e308 is inf; an id of 1e20 fits no int64 column). Times are checked in
# _add_events; ids where a column refuses one (_id_error), which costs nothing while they fit.
MAX_TS_US = 1e17  # about 3,000 years from the clock's epoch
MAX_DUR_US = 1e12  # 11.6 days for one event
# CUPTI PM sampling (libkineto CuptiPMSamplingProfiler, August 2026): output_json.cpp handleCounterEvent writes
# each sample's value of each metric as a counter event {"ph": "C", "cat": "hardware_counters", "name": METRIC,
# "pid": "GPU <device> Counters", "ts": the sample's start, "args": {"": VALUE}}
PM_SAMPLING_CATEGORY = "hardware_counters"
PM_SAMPLING_TRACK = re.compile(r"^GPU (\d+) Counters$")
MAX_COUNTER = 1e18  # a hardware counter of one kernel (1e18 FLOPs: over 15 minutes at 1 PFLOP/s)
ID_BOUNDS = {
    "pid": 2**63,
    "tid": 2**63,
    "args.device": 2**31,
    "args.stream": 2**63,
    "args.correlation": 2**63,
    "args.External id": 2**63,
    "args.Sequence number": 2**63,
}


class Args(msgspec.Struct):
    """The `args` keys the timeline keeps; msgspec skips all others without building them."""

    correlation: Any = None
    kernel: Any = None  # a launch's kernel name (launches captured into a graph)
    device: Any = None
    stream: Any = None
    external_id: Any = msgspec.field(default=None, name="External id")
    external_id_2021: Any = msgspec.field(default=None, name="external id")  # kernels and runtime, 2021 schema
    seq: Any = msgspec.field(default=None, name="Sequence number")
    input_dims: msgspec.Raw = msgspec.field(default=msgspec.Raw(), name="Input Dims")
    input_types: msgspec.Raw = msgspec.field(default=msgspec.Raw(), name="Input type")
    concrete: msgspec.Raw = msgspec.field(default=msgspec.Raw(), name="Concrete Inputs")
    input_strides: msgspec.Raw = msgspec.field(default=msgspec.Raw(), name="Input Strides")
    group_size: Any = msgspec.field(default=None, name="Group size")  # a collective's record_param_comms
    sample: Any = msgspec.field(default=None, name="")  # a PM-sampling counter event's value


class Event(msgspec.Struct):
    ph: Any = None
    cat: Any = None
    name: Any = None
    ts: Any = None
    dur: Any = None
    pid: Any = None
    tid: Any = None
    id: Any = None  # a flow event's id: the correlation id
    args: Args | None | list | str | float | int | bool = None


class _Meta(msgspec.Struct):
    """The top-level keys worth keeping (HEADER_KEYS plus devices and distributed info); others are skipped."""

    deviceProperties: Any = None  # noqa: N815 - Kineto's keys
    distributedInfo: Any = None  # noqa: N815
    schemaVersion: Any = None  # noqa: N815
    traceName: Any = None  # noqa: N815
    displayTimeUnit: Any = None  # noqa: N815
    baseTimeNanoseconds: Any = None  # noqa: N815
    cuda_runtime_version: Any = None
    cuda_driver_version: Any = None
    cupti_version: Any = None
    roctracer_version: Any = None
    hip_runtime_version: Any = None
    # what a dawnscope run (comm ddp) adds with prof.add_metadata_json: the host the rank ran on, its cores, the
    # ranks on it and each rank's intra-op threads (findings/engine.py CpuCommFacts)
    dawnscope_host: Any = None
    # libkineto's own log, written as top-level lists by severity (output_json.cpp finalizeTrace): its CUPTI
    # layer logs "Dropped N activity records" and "Exceeded max GPU buffer count (...) - terminating tracing"
    WARNING: Any = None
    ERROR: Any = None


class _Header(_Meta):
    traceEvents: list[msgspec.Raw] | None = None  # noqa: N815 - the events as raw byte ranges


class _Tail(_Meta):
    traceEvents: list[Event] = []  # noqa: N815, RUF012 - the last events, decoded


class _TailEvents(msgspec.Struct):
    traceEvents: list[Event] = []  # noqa: N815, RUF012 - the last events alone, for their exact decoding


class _TailRaw(msgspec.Struct):
    traceEvents: list[msgspec.Raw] = []  # noqa: N815, RUF012 - the same, as raw byte ranges


_NO_ARGS = Args()
_EVENTS = msgspec.json.Decoder(list[Event])
# Timestamps counted from the Unix epoch (1.7e15 us) keep only 0.25 us in a float64, and Kineto since 2024 writes
# them with nanoseconds in the decimals: a busy-time union of 1 us kernels would be 4 % off. A trace whose ts are
# that large with a fraction is decoded with its long numbers exact (Decimal) and every ts is kept relative to
# an origin, a whole second before its first event (`meta["ts_origin_us"]`: what to add back for the clock).
_EPOCH_TS = re.compile(rb'"ts"[ \t\r\n]*:[ \t\r\n]*(-?\d{14,})\.\d')
EXACT_DIGITS = 17  # a decimal number this long or longer may hold more than a float64 keeps


def _exact_float(text: str) -> float | Decimal:
    return float(text) if len(text) < EXACT_DIGITS else Decimal(text)


_EXACT_EVENTS = msgspec.json.Decoder(list[Event], float_hook=_exact_float)


def _events_decoder(b: TimelineBuilder, sample) -> msgspec.json.Decoder:
    """The decoder of this trace's events, chosen once, from the first events (`sample`): where they have
    epoch-scale timestamps with fractions, the exact one, and the builder's ts origin is set."""
    if "ts_origin_us" not in b.meta:
        m = _EPOCH_TS.search(sample)
        b.meta["ts_origin_us"] = int(m.group(1)) // 1_000_000 * 1_000_000 if m else 0
    return _EXACT_EVENTS if b.meta["ts_origin_us"] else _EVENTS


_LEADING_WS = re.compile(rb"[ \t\r\n]*")
_EVENTS_KEY = re.compile(rb'"traceEvents"[ \t\r\n]*:[ \t\r\n]*\[')
_AT_BYTE = re.compile(r"^(.*) \(byte (\d+)\)$")
_AT_PATH = re.compile(r"^Expected `(\w+)`, got `(\w+)` - at `\$(?:\.traceEvents)?\[(\d+)\](.*)`$")
_AT_ANY = re.compile(r"^(.*) - at `\$(?:\.traceEvents)?\[(\d+)\](.*)`$")
_JSON_TYPES = {
    "object": "an object",
    "array": "an array",
    "str": "a string",
    "int": "a number",
    "float": "a number",
    "bool": "a boolean",
    "null": "null",
}


def read(path: str | Path) -> Timeline:
    """The timeline of a Kineto trace; every way the file can be wrong is one InputError naming it."""
    path = Path(path)
    try:
        return _read_pieces(path)
    except (_Unsplit, OverflowError, RecursionError, msgspec.DecodeError):
        # an id too large for its column, an argument beyond float range, a file not cut: read whole, which
        # names the event and the problem
        return _read_whole(path)


EMPTY_EVENTS = (
    "traceEvents is empty: the profiler recorded nothing (was the trace exported before its schedule's active "
    "steps, or before prof.step() was called?)"
)


class _Unsplit(Exception):
    """The piecewise reading met a file it does not cut (or a broken one): the whole-file reading handles any
    valid trace and words every error (line numbers, truncation, the top-level keys)."""


def _read_pieces(path: Path) -> Timeline:
    """Decompressed chunks of CHUNK_BYTES; the text before `"traceEvents": [` is the header, then each time
    the buffer holds a chunk, the events up to the last complete one are decoded, added and dropped; at the
    end of the file, the rest (the last events and any header keys after the array) is decoded in one go.
    Memory: a chunk or two and the columns, whatever the size of the file."""
    chunks = read_byte_chunks(path, CHUNK_BYTES)
    buf = bytearray()
    for chunk in chunks:
        buf += chunk
        if m := _EVENTS_KEY.search(buf):
            break
        if len(buf) > MAX_PIECE_BYTES:
            raise _Unsplit
    else:
        raise _Unsplit
    head = _decode(bytes(buf[: m.start()]) + b'"traceEvents":[]}', _Header)
    del buf[: m.end()]
    b = TimelineBuilder(str(path), "kineto")
    base = 0
    for chunk in chunks:
        buf += chunk
        if len(buf) >= CHUNK_BYTES:
            base = _add_complete_events(path, b, buf, base)
    text = b'{"traceEvents":[' + bytes(buf)
    tail = _decode(text, _Tail)
    if _events_decoder(b, text) is _EXACT_EVENTS:  # the events exact; the header keys after them plain (no Decimal)
        tail.traceEvents = _decode(text, _TailEvents, exact=True).traceEvents
    if not base and not tail.traceEvents:
        raise InputError(path, EMPTY_EVENTS)
    _add_events(path, b, tail.traceEvents, base, _raw_events(text, _TailRaw))
    for k in _Meta.__struct_fields__:  # keys after the array complete those before it
        if getattr(tail, k) is not None:
            setattr(head, k, getattr(tail, k))
    _keep_header(b, head)
    b.flush()
    return b.build(decode_arg=msgspec.json.decode)


def _decode(data: bytes, kind, exact: bool = False):
    try:
        if exact:
            return msgspec.json.Decoder(kind, float_hook=_exact_float).decode(data)
        return msgspec.json.decode(data, type=kind)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        raise _Unsplit from None


def _raw_events(text: bytes, kind) -> list[msgspec.Raw] | None:
    """The events of `text` as raw byte ranges, only where a CUPTI range-profiler event needs its whole `args`
    (the counter names vary with what was asked for)."""
    if PROFILER_RANGE.encode() not in text:
        return None
    raws = _decode(text, kind)
    return raws if isinstance(raws, list) else raws.traceEvents


def _add_complete_events(path: Path, b: TimelineBuilder, buf: bytearray, base: int) -> int:
    """Decode and add the events of `buf` up to the last complete one, drop them from `buf`; the number of
    events added so far. A cut is tried after a `}` followed by a comma: it is an event boundary exactly
    when `[` + text + `]` decodes (the text starts at an event, so a complete array ends at one); a `}` that
    closes a nested object fails to decode, and the previous candidate is tried."""
    end = len(buf)
    for _ in range(CUT_TRIES):
        p = buf.rfind(b"}", 0, end)
        if p < 0:
            break
        q = _LEADING_WS.match(buf, p + 1).end()
        if q < len(buf) and buf[q] == 0x2C:  # ","
            with memoryview(buf) as view:
                text = b"".join((b"[", view[: p + 1], b"]"))
            try:
                events = _events_decoder(b, text).decode(text)
            except msgspec.ValidationError as e:  # an element that is not an event: a real error
                raise _event_error(path, e, base) from None
            except (msgspec.DecodeError, RecursionError):  # not an event boundary (or broken: see read)
                end = p
                continue
            _add_events(path, b, events, base, _raw_events(text, list[msgspec.Raw]))
            del text
            b.flush()
            del buf[: q + 1]
            return base + len(events)
        end = p
    if len(buf) > MAX_PIECE_BYTES:
        raise _Unsplit
    return base


def _read_whole(path: Path) -> Timeline:
    """The whole decompressed text at once: the events as raw byte ranges, decoded BATCH_EVENTS at a time."""
    data = read_bytes(path)
    if data[:3] == b"\xef\xbb\xbf":  # a UTF-8 byte-order mark (an editor's or Windows tool's save): not JSON's
        del data[:3]
    head = _header(path, data)
    b = TimelineBuilder(str(path), "kineto")
    _keep_header(b, head)
    raws = head.traceEvents
    head.traceEvents = None
    for base in range(0, len(raws), BATCH_EVENTS):
        batch = raws[base : base + BATCH_EVENTS]
        try:
            text = b"[" + b",".join(batch) + b"]"
            events = _events_decoder(b, text).decode(text)
        except msgspec.ValidationError as e:
            raise _event_error(path, e, base) from None
        except msgspec.DecodeError as e:  # the first pass did not look inside the events (invalid UTF-8)
            raise InputError(path, f"traceEvents[{base}..{base + len(batch) - 1}]: {e}") from None
        _add_events(path, b, events, base, batch)
        try:
            b.flush()
        except OverflowError:  # an id too large for its column: find the event (only now, at no cost before)
            raise _id_error(path, events, base) from None
    try:
        return b.build(decode_arg=msgspec.json.decode)
    except msgspec.DecodeError as e:  # an interned cpu_op argument, decoded only now (a number beyond 1e308)
        raise InputError(path, f"traceEvents: a cpu_op's `Input Dims` or `Input type`: {e}") from None


def _header(path: Path, data: bytes) -> _Header:
    """The top-level object, with `traceEvents` as raw byte ranges; the checks that make the one-line
    errors specific (empty, not JSON, an array, no traceEvents)."""
    first = _LEADING_WS.match(data).end()  # not data.lstrip(): that copies a bytearray
    start = data[first : first + 1]
    if not start:
        raise InputError(path, "empty file (only whitespace)")
    if start == b"[":
        raise InputError(
            path,
            "a JSON array at the top level: not a PyTorch profiler (Kineto) trace, which is an "
            "object with a traceEvents array",
        )
    if start != b"{":
        if (known := known_file(data, path)) is not None:
            raise InputError(path, f"{known['what']}, not a trace this reads: {known['do']}")
        try:
            shown = bytes(data[first : first + 4]).decode("utf-8")[:1]
        except UnicodeDecodeError:
            raise InputError(path, "not UTF-8 text: not a JSON file") from None
        raise InputError(path, f"not JSON: starts with {shown!r}, expected a Kineto trace object")
    try:
        head = msgspec.json.decode(data, type=_Header)
    except msgspec.ValidationError as e:
        what = str(e)
        if what.endswith("at `$.traceEvents`"):
            found = _JSON_TYPES.get(what.split("got `")[1].split("`")[0], "something else")
            raise InputError(path, f"traceEvents is not an array of events (found {found})") from None
        raise InputError(path, f"not a PyTorch profiler (Kineto) trace: {what}") from None
    except msgspec.DecodeError as e:
        raise _syntax_error(path, data, e) from None
    except RecursionError:
        raise InputError(path, "JSON nested too deeply") from None
    if head.traceEvents is None:
        try:
            keys = list(msgspec.json.decode(data, type=dict[str, msgspec.Raw]))
        except msgspec.DecodeError as e:  # the header pass skipped what this one reads (invalid UTF-8)
            raise _syntax_error(path, data, e) from None
        shown = ", ".join(keys[:8]) + (", ..." if len(keys) > 8 else "")
        raise InputError(
            path, f"not a PyTorch profiler (Kineto) trace: no traceEvents array (top-level keys: {shown or 'none'})"
        )
    if not head.traceEvents:  # a report of zeros would read as measured
        raise InputError(path, EMPTY_EVENTS)
    return head


@lru_cache(maxsize=1)
def _signatures() -> tuple[dict, ...]:
    return tuple(tomllib.loads(data_file("file_signatures.toml").read_text())["signature"])


def known_file(data, path: Path | None = None) -> dict | None:
    """The data/file_signatures.toml entry whose bytes, first line or file-name ending `data` has, else None."""
    line = bytes(data[:4096]).split(b"\n", 1)[0].decode("utf-8", errors="replace")
    for sig in _signatures():
        if "suffix" in sig:
            if path is not None and str(path).lower().endswith(tuple(sig["suffix"])):
                return sig
        elif "magic" in sig:
            at, magic = int(sig.get("offset", 0)), bytes.fromhex(sig["magic"])
            if bytes(data[at : at + len(magic)]) == magic:
                return sig
        elif re.search(sig["text"], line):
            return sig
    return None


def _syntax_error(path: Path, data: bytes, e: msgspec.DecodeError) -> InputError:
    msg = str(e)
    if msg.startswith("Input data was truncated"):
        return InputError(path, "truncated JSON: the file ends before the trace does")
    m = _AT_BYTE.match(msg)
    if not m:
        return InputError(path, f"not valid JSON: {msg}")
    at = int(m.group(2))
    what, line = m.group(1).removeprefix("JSON is malformed: "), data.count(b"\n", 0, at) + 1
    where = f"line {line}" if line > 1 else f"byte {at:,}"  # a one-line file: its line says nothing
    if what.startswith("trailing characters"):
        return InputError(path, f"not valid JSON: extra data after the top-level object at {where}")
    word = bytes(data[at : at + 9])
    if word.startswith((b"NaN", b"Infinity", b"-Infinity")):
        return InputError(
            path,
            f"not valid JSON: {word.split(b',')[0].split(b'}')[0].decode()} at {where} (Python's "
            "json.dump writes NaN / Infinity unless allow_nan=False; JSON has no such number)",
        )
    return InputError(path, f"not valid JSON: {what} at {where}")


def _event_error(path: Path, e: msgspec.ValidationError, base: int) -> InputError:
    m = _AT_PATH.match(str(e))
    if not m:
        other = _AT_ANY.match(str(e))  # e.g. a number beyond float range (1e999): the index within the file
        if other:
            what, i, where = other.groups()
            return InputError(path, f"traceEvents[{base + int(i)}]{where}: {what}")
        return InputError(path, f"traceEvents: {e}")
    want, got, i, where = m.groups()
    if not where and want == "object":
        return InputError(
            path, f"traceEvents[{base + int(i)}] is not an event object (found {_JSON_TYPES.get(got, got)})"
        )
    return InputError(path, f"traceEvents[{base + int(i)}]{where}: expected {want}, found {got}")


def _keep_header(b: TimelineBuilder, head: _Header) -> None:
    if isinstance(head.deviceProperties, list):
        for d in head.deviceProperties:
            if isinstance(d, dict) and type(d.get("id")) is int:
                b.device_properties[d["id"]] = d
    if isinstance(head.distributedInfo, dict):
        b.distributed = head.distributedInfo
    b.meta.update({k: getattr(head, k) for k in HEADER_KEYS if getattr(head, k) is not None})
    if isinstance(head.dawnscope_host, dict):
        b.meta[HOST_KEY] = head.dawnscope_host
    log = [
        (level, m)
        for level in ("ERROR", "WARNING")
        if isinstance(getattr(head, level), list)
        for m in getattr(head, level)
        if isinstance(m, str)
    ]
    if log:
        b.meta["profiler_log"] = log


def _add_counter_range(
    b: TimelineBuilder, name: str, ts: float, dur: float, ev: Event, raw: msgspec.Raw, path: Path, index: int
) -> None:
    """A CUPTI range-profiler range: one kernel, replayed alone, with hardware counters in its `args` (decoded
    here in full: the counter names vary with what was asked for). The range's duration is the profiler's,
    not the kernel's run time (a note in the report says so)."""
    try:
        full = msgspec.json.decode(raw)
    except msgspec.DecodeError as e:  # what the typed pass skipped (a counter beyond float range)
        raise InputError(path, f"traceEvents[{index}]: {e}") from None
    args = full.get("args") if isinstance(full.get("args"), dict) else {}
    counters = {k: v for k, v in args.items() if type(v) in _NUM}
    for k, v in counters.items():
        if not 0 <= v <= MAX_COUNTER:  # a count, finite: sums of 1e308 would be inf
            raise InputError(
                path,
                f"traceEvents[{index}]: {PROFILER_RANGE} {name[:60]!r} has args.{k}={v!r}: "
                f"expected a count from 0 to {MAX_COUNTER:g}",
            )
    b.add_activity(name, ts, dur, _int(args.get("device"), 0), _int(ev.tid, 0), NO_ID, NO_ID, KERNEL)
    b.add_counters(counters)
    b.meta["counter_ranges"] = b.meta.get("counter_ranges", 0) + 1


def _add_pm_sample(path: Path, b: TimelineBuilder, ev: Event, index: int) -> None:
    """One PM-sampling counter event (PM_SAMPLING_TRACK): its metric's value over the sample starting at ts."""
    track = PM_SAMPLING_TRACK.match(ev.pid) if type(ev.pid) is str else None
    value = ev.args.sample if type(ev.args) is Args else None
    if track is None or type(ev.name) is not str or type(ev.ts) not in _NUM:
        b.skip("hardware_counters events not on a 'GPU N Counters' track with a metric name and ts")
        return
    if type(value) not in _NUM or not 0 <= value <= MAX_COUNTER:
        raise InputError(
            path,
            f'traceEvents[{index}]: PM-sampling counter {ev.name[:60]!r} has args.""={value!r}: expected a '
            f"value from 0 to {MAX_COUNTER:g}",
        )
    b.add_pm_sample(int(track[1]), ev.name, float(ev.ts), float(value))


class _FloatId(Exception):
    """An id written as a float (1e30, 7.5): refused as an integer beyond ID_BOUNDS is, never read as absent."""


def _int(v, default: int = NO_ID) -> int:
    if type(v) is float:
        raise _FloatId(v)
    return v if type(v) is int else default


def _float_id_error(path: Path, ev: Event, index: int) -> InputError:
    args = ev.args if type(ev.args) is Args else _NO_ARGS
    for key, v in (
        ("pid", ev.pid),
        ("tid", ev.tid),
        ("args.device", args.device),
        ("args.stream", args.stream),
        ("args.correlation", args.correlation),
        ("args.External id", args.external_id),
        ("args.Sequence number", args.seq),
    ):
        if type(v) is float:
            return InputError(
                path,
                f"traceEvents[{index}]: {_cat(ev) or 'event'} {str(ev.name)[:60]!r} has "
                f"{key}={v!r}: expected an integer id",
            )
    return InputError(path, f"traceEvents[{index}]: an id written as a number that is not an integer")


def _arg(b: TimelineBuilder, raw: msgspec.Raw) -> int:
    return b.arg_value(bytes(raw)) if len(raw) else NO_ID


def _id_error(path: Path, events: list[Event], base: int) -> InputError:
    """The first event of a batch with an integer id too large for its column (ID_BOUNDS)."""
    for i, ev in enumerate(events):
        args = ev.args if type(ev.args) is Args else _NO_ARGS
        for key, v in (
            ("pid", ev.pid),
            ("tid", ev.tid),
            ("args.device", args.device),
            ("args.stream", args.stream),
            ("args.correlation", args.correlation),
            ("args.External id", args.external_id),
            ("args.Sequence number", args.seq),
        ):
            if ev.ph == "X" and type(v) is int and not -ID_BOUNDS[key] <= v < ID_BOUNDS[key]:
                return InputError(
                    path,
                    f"traceEvents[{base + i}]: {_cat(ev) or 'event'} {str(ev.name)[:60]!r} has "
                    f"{key}={v!r}: too large for an id",
                )
    return InputError(path, f"traceEvents[{base}..{base + len(events) - 1}]: an id too large for an integer")


def _cat(ev: Event) -> str:
    return ev.cat.lower() if type(ev.cat) is str else ""


def _add_events(path: Path, b: TimelineBuilder, events: list[Event], base: int, raws=None) -> None:
    """One batch of decoded events into the builder's columns (the rules of the module docstring)."""
    i = 0
    origin = b.meta.get("ts_origin_us", 0)
    try:
        for i, ev in enumerate(events):
            if origin:  # exact (int or Decimal) minus a whole number, then a float: a rounding of ns, not 0.25 us
                if type(ev.ts) in _EXACT:
                    ev.ts = float(ev.ts - origin)
                if type(ev.dur) is Decimal:
                    ev.dur = float(ev.dur)
            if ev.ph != "X":
                if ev.ph in ("s", "f") and type(ev.cat) is str and ev.cat.lower() in FLOW_CATEGORIES:
                    b.meta["flow_events"] = b.meta.get("flow_events", 0) + 1
                    if type(ev.id) is int and type(ev.ts) in _NUM:
                        b.add_flow(ev.ph == "s", ev.pid, ev.tid, ev.ts, ev.id)
                elif ev.ph == "C" and _cat(ev) == PM_SAMPLING_CATEGORY:
                    _add_pm_sample(path, b, ev, base + i)
                elif ev.ph in ("B", "E"):  # another writer's durations: said, so that what is missing is known
                    b.skip(
                        "begin / end ('B' / 'E') events: only complete ('X') events are read, as the PyTorch "
                        "profiler writes them"
                    )
                continue
            cat = ev.cat.lower() if type(ev.cat) is str else ""
            ts, dur = ev.ts, ev.dur
            if type(ts) not in _NUM or type(dur) not in _NUM:
                if cat in NEEDS_TIMES:
                    raise InputError(
                        path,
                        f"traceEvents[{base + i}]: {cat} event {str(ev.name)[:60]!r} has ts={ts!r}, "
                        f"dur={dur!r}: expected numbers (microseconds)",
                    )
                b.skip("complete events without numeric ts/dur")
                continue
            if dur < 0:
                b.skip("events with negative dur")
                continue
            if not (dur <= MAX_DUR_US and -MAX_TS_US <= ts <= MAX_TS_US):  # also false for nan
                raise InputError(
                    path,
                    f"traceEvents[{base + i}]: {cat or 'event'} {str(ev.name)[:60]!r} has ts={ts!r}, "
                    f"dur={dur!r}: expected finite microseconds, ts within +-{MAX_TS_US:g} and dur "
                    f"at most {MAX_DUR_US:g}",
                )
            if type(ev.tid) in (dict, list):  # threads are keyed by (pid, tid): an object or array becomes a name
                ev.tid = str(ev.tid)
            elif type(ev.tid) is float or type(ev.pid) is float:
                raise _FloatId(ev.pid)
            if cat != "trace":
                b.cover(ts, ts + dur)
            _add_one(path, b, ev, cat, raws[i] if cat == PROFILER_RANGE and raws is not None else None, base + i)
    except _FloatId:
        raise _float_id_error(path, events[i], base + i) from None


def _add_one(path: Path, b: TimelineBuilder, ev: Event, cat: str, raw, index: int) -> None:
    """One complete event with valid times into its table, by category (module docstring)."""
    ts, dur = ev.ts, ev.dur
    name = ev.name if type(ev.name) is str else str(ev.name)
    args = ev.args if type(ev.args) is Args else _NO_ARGS
    if raw is not None:
        _add_counter_range(b, name, ts, dur, ev, raw, path, index)
    elif cat == "kernel" or cat in COPY_CATEGORIES:
        device = _int(args.device, _int(ev.pid, 0))
        corr = _int(args.correlation)
        b.add_activity(
            name,
            ts,
            dur,
            device,
            _int(args.stream, _int(ev.tid)),
            corr,
            _int(args.external_id, _int(args.external_id_2021)),
            COPY_CATEGORIES.get(cat, KERNEL),
            b.process(ev.pid),
        )
        if corr == NO_ID:
            b.add_unlinked_activity(ev.pid, ev.tid, ts)
    elif cat in RUNTIME_CATEGORIES or cat.endswith(("_runtime", "_driver")):
        if type(args.correlation) is float:
            raise _FloatId(args.correlation)
        pid = b.process(ev.pid)
        kernel = args.kernel if type(args.kernel) is str else None
        if type(args.correlation) is int:
            b.add_launch(name, ts, dur, pid, b.thread(pid, ev.tid), args.correlation, kernel)
        else:
            b.add_unlinked_launch(ev.pid, ev.tid, name, ts, dur, pid, b.thread(pid, ev.tid), kernel)
    elif cat == "user_annotation" or (cat in HOST_CATEGORIES and STEP_RE.match(name)):
        pid = b.process(ev.pid)
        if STEP_RE.match(name) and not b.first_step(name, pid, ts):
            return
        b.add_range(
            name, ts, dur, pid, b.thread(pid, ev.tid), CPU_RANGE, _arg(b, args.input_dims), _arg(b, args.input_types)
        )
    elif cat == "gpu_user_annotation":
        pid = b.process(ev.pid)
        b.add_range(name, ts, dur, pid, b.thread(pid, ev.tid), GPU_RANGE)
    elif cat in OPERATOR_CATEGORIES:
        pid = b.process(ev.pid)
        b.add_cpu_op(
            name,
            ts,
            dur,
            pid,
            b.thread(pid, ev.tid),
            _int(args.external_id),
            _int(args.seq),
            _arg(b, args.input_dims),
            _arg(b, args.input_types),
            _arg(b, args.concrete),
            _arg(b, args.input_strides),
            args.group_size if type(args.group_size) is int and args.group_size > 0 else 0,
        )
    elif cat == "" and ev.cat is None:
        # no category at all: not the PyTorch profiler's (a Chrome trace of another tool: rocprof v1/v2's
        # results.json has none), said, so that a report of "0 kernels" is not taken for the GPU's
        b.skip(
            "complete events without a category (cat): a Chrome trace of another tool? this reads the PyTorch "
            "profiler's categories (kernel, cpu_op, cuda_runtime, ...), rocprofv3 JSON and Nsight exports"
        )
    elif cat not in LEFT_OUT_CATEGORIES:
        b.unread_category(str(ev.cat))
