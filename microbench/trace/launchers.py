"""The launching operator or range as classification evidence (kernel_rules.toml [[launcher]]): a kernel whose name
no rule knows, launched inside `nccl:all_to_all` or `c10d::allreduce_`, is communication; a GEMM kernel whose name
does not tell its unit, launched by an fp16 / bf16 / fp8 matrix operator on a chip whose Tensor Cores take that type,
ran on them (an inference, basis "operator (inferred)"). The decisions are classify.classify_by_launcher's; this
module finds each candidate kernel's innermost launcher and returns the timeline with those kernels reclassified
(every consumer of read_trace sees the same classes: communication time, exposed communication, the job view)."""

from __future__ import annotations

import numpy as np

from microbench.trace import eligibility
from microbench.trace.classify import (
    Classification,
    classify_by_launcher,
    is_launcher,
)
from microbench.trace.opmetrics import _innermost_owner, first_float_dtype
from microbench.trace.timeline import CPU_RANGE, KERNEL, TC_VALUES, Timeline


def _candidates(tl: Timeline) -> np.ndarray:
    """Kernel rows whose name leaves them unsettled: class `other`, or a GEMM with Tensor Core use unknown."""
    k = tl.activities
    open_cls = [
        i for i, c in enumerate(tl.classes) if c.cls == "other" or (c.cls == "gemm" and c.tensor_cores == "unknown")
    ]
    return np.flatnonzero((k.category == KERNEL) & np.isin(k.cls, open_cls))


def _range_owner(tl: Timeline, kernels: np.ndarray) -> np.ndarray:
    """Per kernel: the latest-starting CPU range (record_function) with a launcher name around its launch on the
    launching thread, -1 for none. Such ranges are few (nccl:*), so each is a mask over the kernels' launches."""
    r = tl.ranges
    cpu = np.flatnonzero(r.kind == CPU_RANGE)
    rows = cpu[_launcher_rows(tl.names, r.name[cpu])]
    owner = np.full(len(kernels), -1, dtype=np.int64)
    has, ts, thread, _ = tl.launch_of(kernels)
    for i in sorted(rows, key=lambda i: r.ts_us[i]):  # later starts overwrite: the innermost wins
        inside = has & (thread == r.thread[i]) & (ts >= r.ts_us[i]) & (ts <= r.ts_us[i] + r.dur_us[i])
        owner[inside] = i
    return owner


def _launcher_rows(names, name_ids: np.ndarray) -> np.ndarray:
    """Indices into `name_ids` whose name a [[launcher]] rule reads; each distinct name tested once."""
    distinct = np.unique(name_ids)
    hits = [n for n in distinct if is_launcher(str(names[n]))]
    return np.flatnonzero(np.isin(name_ids, hits))


def _device(tl: Timeline) -> eligibility.Device:
    props = next(iter(tl.device_properties.values()), {}) if tl.device_properties else {}
    cc = f"{props['computeMajor']}.{props['computeMinor']}" if "computeMajor" in props else None
    return eligibility.device_of(props.get("name") or None, cc)


def by_launcher(tl: Timeline) -> Timeline:
    """`tl` with its unsettled kernels reclassified by their launchers (the same timeline where none applies)."""
    kernels = _candidates(tl)
    if not len(kernels) or not (len(tl.cpu_ops) or len(tl.ranges)):
        return tl
    ops = _launcher_rows(tl.names, tl.cpu_ops.name)
    op_owner = _innermost_owner(tl, ops, kernels) if len(ops) else np.full(len(kernels), -1)
    range_owner = _range_owner(tl, kernels)
    dev = _device(tl)
    classes, index = list(tl.classes), {c: i for i, c in enumerate(tl.classes)}
    cls, tc = tl.activities.cls.copy(), tl.activities.tensor_cores.copy()
    for j, row in enumerate(kernels):
        for table, owner in (("cpu_ops", op_owner[j]), ("ranges", range_owner[j])):
            if owner < 0:
                continue
            name = str(tl.names[getattr(tl, table).name[owner]])
            new = classify_by_launcher(
                tl.classes[cls[row]], name, first_float_dtype(tl, int(owner), table), dev.vendor, dev.cc
            )
            if new is not None:
                cls[row], tc[row] = _intern(new, classes, index), TC_VALUES.index(new.tensor_cores)
                break
    if (cls == tl.activities.cls).all():
        return tl
    return tl.with_classes(tuple(classes), cls, tc)


def _intern(c: Classification, classes: list, index: dict) -> int:
    if c not in index:
        index[c] = len(classes)
        classes.append(c)
    return index[c]
