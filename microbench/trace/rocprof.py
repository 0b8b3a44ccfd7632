"""AMD's rocprofv3 JSON (`rocprofv3 --output-format json`, written by `rocprofiler-sdk-tool`) -> one Timeline
(microbench/trace/timeline.py), like the Kineto and Nsight readers.

The file is one object, `{"rocprofiler-sdk-tool": [ {per process: metadata, agents, strings, kernel_symbols,
buffer_records, ...} ]}` (ROCm/rocprofiler-sdk, source/lib/rocprofiler-sdk-tool; the MI350X capture of AMD-AGI/
TraceLens tests/rocprof/908_results.json.gz is the real one read in the tests). What goes where:
- `buffer_records.kernel_dispatch` -> kernels: name from `kernel_symbols[kernel_id]` (`formatted_kernel_name`,
  else the demangled name without `.kd`), device from `dispatch_info.agent_id` (the agent's GPU index), stream
  from `stream_id` (else the HSA queue), correlation `correlation_id.internal`;
- `buffer_records.memory_copy` -> copies (category memcpy), named by their direction (`MEMORY_COPY_HOST_TO_DEVICE`
  -> "Memcpy HtoD"), on the GPU end's device;
- `buffer_records.hip_api` -> launches (every HIP call carries the correlation id its dispatches carry), named
  from `strings.buffer_records` (kind HIP_RUNTIME_API's `operations`);
- `agents` of type 2 (GPU) -> device properties under Kineto's names (`name`: the product name, AMD Instinct
  MI350X; `gcnArchName`; `computeMajor` / `computeMinor` from `gfx_target_version`; `numSms`: CUs);
- the other buffer kinds (HSA API, markers, scratch memory, page migration) are counted in `meta["unread_records"]`.
Timestamps are nanoseconds on one clock; the timeline's are microseconds.
"""

from __future__ import annotations

from pathlib import Path

import msgspec

from microbench.core.errors import InputError
from microbench.core.jsonio import read_bytes
from microbench.trace.timeline import KERNEL, MEMCPY, NO_ID, Timeline, TimelineBuilder

TOOL_KEY = "rocprofiler-sdk-tool"
GPU_AGENT = 2  # rocprofiler_agent_type_t: ROCPROFILER_AGENT_TYPE_GPU
COPY_NAMES = {
    "MEMORY_COPY_HOST_TO_HOST": "Memcpy HtoH",
    "MEMORY_COPY_HOST_TO_DEVICE": "Memcpy HtoD",
    "MEMORY_COPY_DEVICE_TO_HOST": "Memcpy DtoH",
    "MEMORY_COPY_DEVICE_TO_DEVICE": "Memcpy DtoD",
}
READ_BUFFERS = ("kernel_dispatch", "memory_copy", "hip_api")
NS_PER_US = 1000.0


class _Handle(msgspec.Struct, frozen=True):
    handle: int = 0


class _Corr(msgspec.Struct, frozen=True):
    internal: int = NO_ID


class _Dispatch(msgspec.Struct, frozen=True):
    agent_id: _Handle = _Handle()
    queue_id: _Handle = _Handle()
    kernel_id: int = NO_ID


class _Record(msgspec.Struct):
    """One buffer record: a kernel dispatch, a memory copy or an API call (the fields each kind has)."""

    start_timestamp: int
    end_timestamp: int
    operation: int = 0
    thread_id: int = 0
    correlation_id: _Corr = _Corr()
    dispatch_info: _Dispatch | None = None
    stream_id: _Handle = _Handle()
    dst_agent_id: _Handle = _Handle()
    src_agent_id: _Handle = _Handle()


class _Agent(msgspec.Struct):
    id: _Handle
    type: int = 0
    name: str = ""
    product_name: str = ""
    cu_count: int = 0
    gfx_target_version: int = 0
    gpu_index: int = -1


class _Symbol(msgspec.Struct):
    kernel_id: int
    kernel_name: str = ""
    formatted_kernel_name: str = ""


class _Kind(msgspec.Struct):
    kind: str
    operations: list[str] = []


class _Strings(msgspec.Struct, frozen=True):
    buffer_records: list[_Kind] = []


class _Meta(msgspec.Struct, frozen=True):
    pid: int = 0


class _Process(msgspec.Struct):
    metadata: _Meta = _Meta()
    agents: list[_Agent] = []
    strings: _Strings = _Strings()
    kernel_symbols: list[_Symbol] = []
    buffer_records: dict[str, list[msgspec.Raw]] = {}


class _File(msgspec.Struct):
    tool: list[_Process] = msgspec.field(name=TOOL_KEY)


def looks_like_rocprof(head: bytes) -> bool:
    """Whether the first decompressed bytes are a rocprofv3 JSON file: an object whose first key is the tool's."""
    return head.lstrip()[:1] == b"{" and head.lstrip()[1:].lstrip().startswith(f'"{TOOL_KEY}"'.encode())


def read(path: str | Path) -> Timeline:
    """The timeline of a rocprofv3 JSON file; anything malformed is one InputError naming the key."""
    path = Path(path)
    try:
        doc = msgspec.json.decode(bytes(read_bytes(path)), type=_File)
    except (msgspec.ValidationError, msgspec.DecodeError) as e:
        raise InputError(path, f"not a rocprofv3 JSON file ({TOOL_KEY}): {e}") from None
    b = TimelineBuilder(str(path), "rocprofv3")
    for proc in doc.tool:
        _add_process(path, b, proc)
    return b.build()


def _devices(b: TimelineBuilder, proc: _Process) -> dict[int, int]:
    """GPU agents as devices (their GPU index), with Kineto's property names; agent handle -> device."""
    out = {}
    for a in proc.agents:
        if a.type != GPU_AGENT:
            continue
        dev = a.gpu_index if a.gpu_index >= 0 else len(out)
        out[a.id.handle] = dev
        major, minor = divmod(a.gfx_target_version // 100, 100)
        b.device_properties[dev] = {
            "id": dev,
            "name": a.product_name or a.name,
            "gcnArchName": a.name,
            "computeMajor": major,
            "computeMinor": minor,
            "numSms": a.cu_count,
        }
    return out


def _records(path: Path, proc: _Process, kind: str) -> list[_Record]:
    raws = proc.buffer_records.get(kind, [])
    try:
        return msgspec.json.decode(b"[" + b",".join(raws) + b"]", type=list[_Record])
    except msgspec.ValidationError as e:
        raise InputError(path, f"{TOOL_KEY}.buffer_records.{kind}: {e}") from None


def _dur_us(b: TimelineBuilder, r, kind: str) -> float:
    """A record's duration; one that ends before it starts (a clock or buffer fault) is kept at 0 us and counted in
    the reader's skip notes, so that its time is known to be missing."""
    if r.end_timestamp < r.start_timestamp:
        b.skip(f"durations of rocprofv3 {kind} records that end before they start (each record kept, at 0 us)")
        return 0.0
    return (r.end_timestamp - r.start_timestamp) / NS_PER_US


def _add_process(path: Path, b: TimelineBuilder, proc: _Process) -> None:
    devices = _devices(b, proc)
    names = {s.kernel_id: s.formatted_kernel_name or s.kernel_name.removesuffix(".kd") for s in proc.kernel_symbols}
    ops = {k.kind: k.operations for k in proc.strings.buffer_records}
    for r in _records(path, proc, "kernel_dispatch"):
        d = r.dispatch_info or _Dispatch()
        ts, dur = r.start_timestamp / NS_PER_US, _dur_us(b, r, "kernel_dispatch")
        b.cover(ts, ts + dur)
        b.add_activity(
            names.get(d.kernel_id, f"kernel {d.kernel_id}"),
            ts,
            dur,
            devices.get(d.agent_id.handle, 0),
            r.stream_id.handle or d.queue_id.handle,
            r.correlation_id.internal,
            NO_ID,
            KERNEL,
        )
    copies = ops.get("MEMORY_COPY", [])
    for r in _records(path, proc, "memory_copy"):
        ts, dur = r.start_timestamp / NS_PER_US, _dur_us(b, r, "memory_copy")
        b.cover(ts, ts + dur)
        op = copies[r.operation] if 0 <= r.operation < len(copies) else str(r.operation)
        dev = devices.get(r.dst_agent_id.handle, devices.get(r.src_agent_id.handle, 0))
        b.add_activity(
            COPY_NAMES.get(op, op), ts, dur, dev, r.stream_id.handle, r.correlation_id.internal, NO_ID, MEMCPY
        )
    hip = ops.get("HIP_RUNTIME_API", [])
    pid = b.process(proc.metadata.pid)
    for r in _records(path, proc, "hip_api"):
        ts, dur = r.start_timestamp / NS_PER_US, _dur_us(b, r, "hip_api")
        b.cover(ts, ts + dur)
        name = hip[r.operation] if 0 <= r.operation < len(hip) else f"hip {r.operation}"
        b.add_launch(name, ts, dur, pid, b.thread(pid, r.thread_id), r.correlation_id.internal)
    unread = {k: len(v) for k, v in proc.buffer_records.items() if v and k not in READ_BUFFERS}
    if unread:
        b.meta.setdefault("unread_records", {}).update(unread)
    b.flush()
