"""The folder `torch.profiler.tensorboard_trace_handler(dir)` writes: one file per process and profiling cycle,
named `{worker}.{milliseconds}.pt.trace.json[.gz]` (worker: `{hostname}_{pid}` unless the caller names it). Told
apart by those names: one process's cycles are one run read newest first, several processes are a job's ranks."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

# PyTorch's torch/profiler/profiler.py, tensorboard_trace_handler: f"{worker_name}.{time.time_ns() // 1e6}.pt.trace.json"
HANDLER_NAME = re.compile(r"^(?P<worker>.+)\.(?P<ms>\d+)\.pt\.trace\.json(?:\.gz)?$")


@dataclass
class Cycles:
    """A folder's traces by the process that wrote them (`workers`: worker -> its files, oldest first) and the
    trace files whose names are not the handler's (`others`)."""

    workers: dict[str, list[Path]]
    others: list[Path]

    @property
    def one_process(self) -> bool:
        return len(self.workers) == 1 and not self.others


def cycles(paths: list[Path]) -> Cycles:
    workers: dict[str, list[tuple[int, Path]]] = {}
    others = []
    for p in paths:
        m = HANDLER_NAME.match(p.name)
        if m:
            workers.setdefault(m["worker"], []).append((int(m["ms"]), p))
        else:
            others.append(p)
    return Cycles({w: [p for _, p in sorted(v)] for w, v in workers.items()}, others)
