"""The scaling model: data-parallel step time, communication share and speed-up per worker count.

Weak scaling (a fixed batch per worker), as the DAWNBench entries ran. Per step each worker computes for
the single-worker step time T1, of which the backward pass is `backward_fraction`; the gradients
(`gradient_bytes`) are all-reduced in DDP's buckets (a 1 MiB first bucket, then `bucket_bytes`), one after
another. A bucket is ready when the backward pass has produced its bytes (gradients assumed to appear at an
even rate over the backward pass). With overlap "buckets" a bucket's all-reduce starts when it is ready
and the previous one is done; with "none" all of them run after the backward pass.

All-reduce of S bytes over p = N nodes x g GPUs (hierarchical: within the node, then between nodes):
  ring: 2(g-1)/g S / B_intra + 2(g-1) a_intra  +  2(N-1)/N S / B_inter + 2(N-1) a_inter
  tree: the same bandwidth terms with 2 S / B in place of 2(k-1)/k S / B and 2 log2(k) a latency terms
with B = nominal bandwidth x efficiency. Step time = T1 + exposed communication; comm_share = exposed /
step time; speed-up = p T1 / step time (time-to-accuracy speed-up if the epochs to accuracy do not change
with the global batch, which large batches can break: not modelled).
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass, replace
from pathlib import Path

import tomllib

from microbench import models
from microbench.core.errors import ConfigError
from microbench.core.files import exists
from microbench.core.jsonio import load_json, number, of_type
from microbench.core.resources import data_file

from .ddp import grad_bytes

FABRICS_PATH = data_file("fabrics.toml")
FIRST_BUCKET_BYTES = 2**20  # torch.distributed._DEFAULT_FIRST_BUCKET_BYTES
ALGORITHMS = ("ring", "tree")
OVERLAPS = ("buckets", "none")
MAX_WORKERS = 10**6  # more GPUs than any machine has had: a typo


@dataclass(frozen=True)
class Link:
    name: str
    bandwidth_gbps: float  # GB/s, one direction
    latency_us: float
    efficiency: float = 1.0

    @property
    def bytes_per_s(self) -> float:
        return self.bandwidth_gbps * 1e9 * self.efficiency


@dataclass(frozen=True)
class Fabric:
    name: str
    title: str
    gpus_per_node: int
    intra: Link
    inter: Link


def _table(path: Path = FABRICS_PATH) -> dict:
    try:
        return tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise ConfigError(path, f"cannot read fabric presets: {e}") from None


def _link(t: dict, name: str, path: Path) -> Link:
    e = t.get("link", {}).get(name)
    if not isinstance(e, dict):
        raise ConfigError(path, f"no such link (known: {', '.join(t.get('link', {}))})", key="link", value=name)
    try:
        return Link(name, float(e["bandwidth_gbps"]), float(e["latency_us"]), float(e.get("efficiency", 1.0)))
    except (KeyError, TypeError, ValueError) as err:
        raise ConfigError(path, f"bad or missing value: {err}", key=f"link.{name}") from None


def fabric_names(path: Path = FABRICS_PATH) -> list[str]:
    return list(_table(path).get("fabric", {}))


def load_fabric(name: str, path: Path = FABRICS_PATH) -> Fabric:
    t = _table(path)
    e = t.get("fabric", {}).get(name)
    if not isinstance(e, dict):
        raise ConfigError(
            path,
            f"unknown fabric (known: {', '.join(fabric_names(path))}; or a results.json of `comm collectives`)",
            key="--fabric",
            value=name,
        )
    try:
        return Fabric(
            name, str(e["title"]), int(e["gpus_per_node"]), _link(t, e["intra"], path), _link(t, e["inter"], path)
        )
    except KeyError as err:
        raise ConfigError(path, f"missing key {err}", key=f"fabric.{name}") from None


def _phase_s(nbytes: float, k: int, link: Link, algorithm: str) -> float:
    """One all-reduce phase among k participants over `link`."""
    if k <= 1:
        return 0.0
    alpha = link.latency_us * 1e-6
    if algorithm == "ring":
        return 2 * (k - 1) / k * nbytes / link.bytes_per_s + 2 * (k - 1) * alpha
    if algorithm == "tree":
        return 2 * nbytes / link.bytes_per_s + 2 * math.ceil(math.log2(k)) * alpha
    raise ValueError(f"unknown algorithm {algorithm!r} (use {', '.join(ALGORITHMS)})")


def allreduce_s(nbytes: float, workers: int, fabric: Fabric, algorithm: str = "ring") -> float:
    """Time of one all-reduce of `nbytes` over `workers` GPUs of `fabric`."""
    g = min(workers, fabric.gpus_per_node)
    nodes = math.ceil(workers / fabric.gpus_per_node)
    return _phase_s(nbytes, g, fabric.intra, algorithm) + _phase_s(nbytes, nodes, fabric.inter, algorithm)


def buckets(gradient_bytes: int, bucket_bytes: int) -> list[int]:
    """DDP's bucket sizes, to byte granularity (DDP cuts at parameter boundaries: close enough here)."""
    out, left = [], gradient_bytes
    for cap in [FIRST_BUCKET_BYTES] + [bucket_bytes] * (gradient_bytes // max(bucket_bytes, 1) + 2):
        if left <= 0:
            break
        out.append(min(cap, left))
        left -= out[-1]
    return out


@dataclass(frozen=True)
class Workload:
    step_ms: float  # one worker, compute only
    gradient_bytes: int
    bucket_bytes: int = 25 * 2**20
    backward_fraction: float = 2 / 3
    overlap: str = "buckets"
    algorithm: str = "ring"


def predict(w: Workload, workers: int, fabric: Fabric) -> dict:
    """Step time, communication and speed-up at `workers` GPUs."""
    if w.overlap not in OVERLAPS:
        raise ValueError(f"unknown overlap {w.overlap!r} (use {', '.join(OVERLAPS)})")
    t1 = w.step_ms / 1e3
    backward = t1 * w.backward_fraction
    ready = done = produced = 0.0
    comm = 0.0
    for b in buckets(w.gradient_bytes, w.bucket_bytes):
        produced += b
        ready = backward * produced / w.gradient_bytes if w.overlap == "buckets" else backward
        t = allreduce_s(b, workers, fabric, w.algorithm) if workers > 1 else 0.0
        comm += t
        done = max(ready, done) + t
    exposed = max(0.0, done - backward) if workers > 1 else 0.0
    step = t1 + exposed
    return {
        "workers": workers,
        "nodes": math.ceil(workers / fabric.gpus_per_node),
        "step_ms": step * 1e3,
        "comm_ms": comm * 1e3,
        "exposed_comm_ms": exposed * 1e3,
        "comm_share": exposed / step,
        "comm_busy_share": comm / step,
        "speedup": workers * t1 / step,
        "scaling_efficiency": t1 / step,
    }


def sweep(w: Workload, workers: list[int], fabric: Fabric) -> list[dict]:
    return [predict(w, p, fabric) for p in workers]


def scenario(name: str, path: Path = FABRICS_PATH) -> tuple[dict, dict]:
    """(the scenario's table, the model's prediction for it): the paper's figures from stated assumptions."""
    t = _table(path)
    s = t.get("scenario", {}).get(name)
    if not isinstance(s, dict):
        raise ConfigError(
            path, f"unknown scenario (known: {', '.join(t.get('scenario', {}))})", key="scenario", value=name
        )
    fab = load_fabric(s["fabric"], path)
    fab = replace(
        fab,
        intra=replace(fab.intra, efficiency=s["intra_efficiency"]),
        inter=replace(fab.inter, efficiency=s["inter_efficiency"]),
    )
    step_ms = s["batch_per_gpu"] * s["step_flop_per_image"] / (s["achieved_tflops"] * 1e12) * 1e3
    w = Workload(
        step_ms,
        int(s["gradient_bytes"]),
        int(s["bucket_mb"] * 2**20),
        s["backward_fraction"],
        s["overlap"],
        s["algorithm"],
    )
    return s, predict(w, int(s["workers"]), fab)


def fabric_from_results(path: Path) -> Fabric:
    """A one-node fabric from measured all-reduce rows of `comm collectives`: bandwidth = the best busbw,
    latency = the smallest message's time / 2(n-1) (the ring's latency term)."""
    doc = of_type(load_json(path), dict, path, "(top level)")
    rows = []
    for i, r in enumerate(of_type(doc.get("results"), list, path, "results", default=[])):
        if not isinstance(r, dict) or r.get("op") != "allreduce" or r.get("busbw_gbps") is None:
            continue
        key = f"results[{i}]"  # every field the model reads, checked: a wrong one is one line naming it
        rows.append(
            {
                "bytes": _count(r.get("bytes"), path, f"{key}.bytes"),
                "nranks": _count(r.get("nranks", 2), path, f"{key}.nranks", MAX_WORKERS),
                "median_ms": _positive(
                    number(
                        of_type(r.get("time_ms"), dict, path, f"{key}.time_ms").get("median"),
                        path,
                        f"{key}.time_ms.median",
                    ),
                    path,
                    f"{key}.time_ms.median",
                ),
                "busbw_gbps": _positive(number(r["busbw_gbps"], path, f"{key}.busbw_gbps"), path, f"{key}.busbw_gbps"),
            }
        )
    if not rows:
        raise ConfigError(
            path, "no correct all-reduce rows with busbw_gbps (run `comm collectives` first)", key="results"
        )
    n = rows[0]["nranks"]
    small = min(rows, key=lambda r: r["bytes"])
    alpha_us = small["median_ms"] * 1e3 / max(2 * (n - 1), 1)
    link = Link(f"measured {path.name}", max(r["busbw_gbps"] for r in rows), alpha_us)
    # One node of any size: a measured fabric says nothing about a network between nodes.
    return Fabric(f"measured:{path}", f"measured all-reduce, {n} ranks ({path})", 10**9, link, link)


def _count(v, path: Path, key: str, maximum: int = 2**53) -> int:
    """A positive integer field of a results file (not a bool, a string or a float)."""
    if type(v) is not int or not 1 <= v <= maximum:
        raise ConfigError(path, f"expected an integer from 1 to {maximum:,}", key=key, value=v)
    return v


def _positive(v, path: Path, key: str) -> float:
    """A number that must be there and above zero (a time, a bandwidth)."""
    if v is None or v <= 0:
        raise ConfigError(path, "expected a number above 0", key=key, value=v)
    return v


def parse_workers(text: str) -> list[int]:
    try:
        out = [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        out = []
    if not out or min(out) < 1 or max(out) > MAX_WORKERS:
        raise ConfigError(
            None, f"expected worker counts from 1 to {MAX_WORKERS:,} like 1,2,4,8", key="--workers", value=text
        )
    return sorted(set(out))


def measured_step_ms(model_name: str, steps: int = 3) -> tuple[float, int]:
    """(median CPU step time of the model at its CPU batch, that batch): the single-worker compute."""
    from microbench.models.step import TrainingStep

    w = models.load(model_name)
    batch = w.facts.cpu_batch if w.facts else 8
    step = TrainingStep(w, batch, "cpu")
    step()  # warm-up
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times), batch


def _fabric(spec: str) -> Fabric:
    p = Path(spec)

    return fabric_from_results(p) if p.suffix == ".json" or exists(p, "--fabric") else load_fabric(spec)


def scale_command(args) -> dict:
    """`comm scale`: the workload from --model / --step-ms / --gradient-bytes, predictions per worker count."""
    fabric = _fabric(args.fabric)
    workers = parse_workers(args.workers)
    notes = []
    grad, step_ms = args.gradient_bytes, args.step_ms
    if args.model is None and (grad is None or step_ms is None):
        raise ConfigError(None, "give --model, or both --step-ms and --gradient-bytes", key="--model")
    if args.model is not None and grad is None:
        grad = grad_bytes(models.load(args.model).model)
    if step_ms is None and not fabric.name.startswith("measured:"):
        # A preset is another machine's fabric: this CPU's step time over a V100's links is no machine at all.
        raise ConfigError(
            None,
            f"--fabric {fabric.name} describes another machine's GPUs: give --step-ms (the "
            "single-worker step time on that machine, e.g. from its trace), or a results.json "
            "of `comm collectives` measured here as --fabric",
            key="--step-ms",
        )
    if step_ms is None:
        step_ms, batch = measured_step_ms(args.model)
        source = f"measured here on the CPU ({args.model}, batch {batch})"
    else:
        source = "--step-ms"
    notes.append(f"step time: {source}")
    w = Workload(step_ms, int(grad), int(args.bucket_mb * 2**20), args.backward_fraction, args.overlap, args.algorithm)
    doc = {
        "schema": "dawnscope.comm.scale/1",
        "model": args.model,
        "workload": w.__dict__,
        "step_source": source,
        "fabric": {
            "name": fabric.name,
            "title": fabric.title,
            "gpus_per_node": fabric.gpus_per_node,
            "intra": fabric.intra.__dict__,
            "inter": fabric.inter.__dict__,
        },
        "predictions": sweep(w, workers, fabric),
        "notes": notes,
    }
    if args.paper:
        doc["paper"] = paper_figures()
    return doc


def paper_figures() -> list[dict]:
    out = []
    for name in ("paper_8v100", "paper_16x8v100"):
        s, p = scenario(name)
        out.append({"scenario": name, "title": s["title"], "target_comm_share": s["target_comm_share"], **p})
    return out
