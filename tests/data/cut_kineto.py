"""Cut a small slice of a real Kineto trace for the tests: per ProfilerStep# range named, the first N device
activities (kernels, copies) whose runtime call starts in it, with those calls, their flow events, the operators
and annotations around the calls (same thread), the GPU annotations holding the activities, the step ranges, the
`Trace` envelope and the metadata events; events are kept unchanged.

    python tests/data/cut_kineto.py SRC OUT N STEP...
"""

from __future__ import annotations

import gzip
import json
import sys

DEVICE = {"kernel", "memcpy", "memset", "gpu_memcpy", "gpu_memset"}
HOST = {"operator", "cpu_op", "user_annotation"}


def _cat(e: dict) -> str:
    return str(e.get("cat") or "").lower()


def _runtime_by_correlation(ev: list[dict]) -> dict:
    out = {}
    for e in ev:
        c = _cat(e)
        if e.get("ph") == "X" and (c in ("runtime", "driver") or c.endswith(("_runtime", "_driver"))):
            corr = (e.get("args") or {}).get("correlation")
            if corr is not None:
                out.setdefault(corr, e)
    return out


def _activities(ev: list[dict], rt: dict, step: dict, n: int) -> list[dict]:
    lo, hi = step["ts"], step["ts"] + step["dur"]
    picked = [
        e
        for e in ev
        if e.get("ph") == "X"
        and _cat(e) in DEVICE
        and (r := rt.get((e.get("args") or {}).get("correlation"))) is not None
        and lo <= r["ts"] <= hi
    ]
    return sorted(picked, key=lambda e: e["ts"])[:n]


def _around(e: dict, launches: list[dict], device: list[dict]) -> bool:
    end = e["ts"] + e["dur"]
    if _cat(e) == "gpu_user_annotation":
        return any(e["ts"] <= k["ts"] <= end for k in device)
    return any(str(r.get("tid")) == str(e.get("tid")) and e["ts"] <= r["ts"] <= end for r in launches)


def cut(doc: dict, n: int, steps_wanted: list[str]) -> dict:
    ev = doc["traceEvents"]
    rt = _runtime_by_correlation(ev)
    steps = [e for e in ev if e.get("ph") == "X" and e.get("name") in steps_wanted and "gpu" not in _cat(e)]
    device = [a for s in steps for a in _activities(ev, rt, s, n)]
    corrs = {a["args"]["correlation"] for a in device}
    launches = [rt[c] for c in corrs]
    keep = {id(e) for e in steps + device + launches}
    for e in ev:
        flow = e.get("ph") in ("s", "f") and e.get("id") in corrs and _cat(e) in ("ac2g", "async")
        host = e.get("ph") == "X" and _cat(e) in HOST | {"gpu_user_annotation"} and _around(e, launches, device)
        if flow or host or e.get("ph") == "M" or _cat(e) == "trace":
            keep.add(id(e))
    out = {k: v for k, v in doc.items() if k != "traceEvents"}
    if "deviceProperties" in out:
        used = {a["args"].get("device") for a in device}
        out["deviceProperties"] = [p for p in out["deviceProperties"] if p.get("id") in used] or out[
            "deviceProperties"
        ][:1]
    out["traceEvents"] = [e for e in ev if id(e) in keep]
    return out


def main(argv: list[str]) -> None:
    src, dst, n, steps = argv[0], argv[1], int(argv[2]), argv[3:]
    with gzip.open(src) if src.endswith(".gz") else open(src, "rb") as f:
        doc = json.load(f)
    out = cut(doc, n, steps)
    with open(dst, "w") as f:
        json.dump(out, f, separators=(",", ":"))
    print(dst, len(out["traceEvents"]), "events")


if __name__ == "__main__":
    main(sys.argv[1:])
