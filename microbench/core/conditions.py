"""The conditions a run was measured under, and whether they were quiet enough to trust its numbers.

Recorded before and during a run (results.json `conditions`):
- the load average (/proc/loadavg) and other processes' CPU time: the machine's busy CPU time (/proc/stat)
  minus this process's own (/proc/self/stat), as a number of cores they kept busy; a virtual machine's
  stolen time (the hypervisor ran someone else) counts as theirs;
- the thread count the CPU ops use and why (torch.get_num_threads against the cores this process may use);
- on a GPU (core.gpumon: NVML on NVIDIA, amdsmi on AMD, where installed): clocks, temperature, power, the
  reasons the driver gives for holding the clocks down and other processes on the GPU, at the start and the
  end, and between them from the driver's cumulative counters (energy, the time each limit held the clocks
  down), so that a slowdown in the middle of the run is seen.

`busy` is the judgement: true when any threshold of [conditions] in bench.toml is exceeded. A busy run's
report starts with a warning line saying what to do.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

from microbench.core import vendor
from microbench.core.gpumon import gpu_state, gpu_window

# /proc/stat cpu line: user nice system idle iowait irq softirq steal (guest time is inside user)
_IDLE_FIELDS = (3, 4)
_STEAL_FIELD = 7


@dataclass(frozen=True)
class ConditionSettings:
    """[conditions] in bench.toml: when a machine counts as busy."""

    max_other_cores: float = 0.25  # cores' worth of CPU time other processes may use during the run
    max_load_per_core: float = 1.0  # 1-minute load average per core before the run (includes our own start-up)
    max_steal_share: float = 0.05  # share of the machine's CPU time stolen by the hypervisor
    sample_s: float = 0.5  # the quiet look at the machine before the run


def usable_cores() -> int:
    """The cores this process may run on (its affinity: a container's or taskset's share, not the machine's)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def _cpu_jiffies() -> tuple[int, int, int] | None:
    """(busy, total, steal) jiffies of all CPUs since boot, or None without /proc/stat."""
    try:
        with open("/proc/stat") as f:
            parts = f.readline().split()
    except OSError:
        return None
    vals = [int(v) for v in parts[1:9]]
    total = sum(vals)
    idle = sum(vals[i] for i in _IDLE_FIELDS)
    return total - idle, total, vals[_STEAL_FIELD]


def _own_jiffies() -> int:
    """This process's user + system time in jiffies (all its threads), with that of the children it has waited
    for: the ranks of `comm` and the probe processes of `decompose` are its own work, not another program's
    (without them a two-rank `comm ddp` called its own ranks "other processes kept 1.88 of 2 cores busy")."""
    try:
        with open("/proc/self/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return sum(int(v) for v in fields[11:15])  # utime, stime, cutime, cstime (fields 14 - 17 of proc(5))
    except (OSError, IndexError, ValueError):
        t = os.times()
        return int((t.user + t.system + t.children_user + t.children_system) * os.sysconf("SC_CLK_TCK"))


def sched_tasks() -> dict[str, tuple[int, int]] | None:
    """Per thread of this process: (running, waiting for a CPU) nanoseconds (/proc/self/task/*/schedstat: time on a
    CPU, time runnable on a run queue). None where the kernel does not provide it."""
    out = {}
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return None
    for t in tasks:
        try:
            with open(f"/proc/self/task/{t}/schedstat") as f:
                a, b = f.read().split()[:2]
        except (OSError, ValueError):
            continue  # a thread that ended meanwhile
        out[t] = (int(a), int(b))
    return out if any(run for run, _ in out.values()) else None


def sched_ns() -> tuple[int, int] | None:
    """(running, waiting for a CPU) nanoseconds summed over this process's threads (sched_tasks)."""
    tasks = sched_tasks()
    return None if tasks is None else (sum(r for r, _ in tasks.values()), sum(w for _, w in tasks.values()))


def threads_that_ran(before: dict, after: dict) -> int:
    """How many of the process's threads were on a CPU between two sched_tasks() reads."""
    return sum(1 for t, (run, _) in after.items() if run > before.get(t, (0, 0))[0])


def loadavg() -> list[float] | None:
    try:
        with open("/proc/loadavg") as f:
            return [float(v) for v in f.read().split()[:3]]
    except (OSError, ValueError):
        return None


class CpuWindow:
    """Other processes' CPU use between start() and stop(): cores' worth of busy time that was not ours."""

    def __init__(self):
        self.t0 = time.monotonic()
        self.sys0 = _cpu_jiffies()
        self.own0 = _own_jiffies()

    def stop(self) -> dict:
        wall = time.monotonic() - self.t0
        sys1, own1 = _cpu_jiffies(), _own_jiffies()
        out = {"wall_s": round(wall, 3)}
        if self.sys0 is None or sys1 is None or wall <= 0:
            return out | {"other_cores": None, "steal_share": None}
        busy, total, steal = (b - a for a, b in zip(self.sys0, sys1))
        ncpu = os.cpu_count() or 1
        seconds_per_jiffy = wall * ncpu / total if total > 0 else 0.0
        other = max(0, busy - (own1 - self.own0)) * seconds_per_jiffy
        return out | {
            "other_cores": round(other / wall, 3),
            "steal_share": round(steal / total, 4) if total else 0.0,
            "own_cores": round((own1 - self.own0) * seconds_per_jiffy / wall, 3),
        }


# Set by Conditions.fit_threads when it lowered the thread count of this process (one process, one choice).
_FITTED: dict | None = None


def fitted_threads() -> dict | None:
    """{"threads", "cores", "why"} when this process runs CPU ops on fewer threads because the machine is busy."""
    return _FITTED


def release_threads() -> None:
    """The thread count fit_threads lowered back to what it was (the run it was lowered for is over)."""
    global _FITTED
    if _FITTED is not None:
        import torch

        torch.set_num_threads(_FITTED["was"])
        _FITTED = None


def threads_block() -> dict:
    """The thread count CPU ops run with and why."""
    import torch

    cores = usable_cores()
    n = torch.get_num_threads()
    env = {k: os.environ[k] for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS") if k in os.environ}
    if _FITTED and _FITTED["threads"] == n:
        why = _FITTED["why"]
    elif env:
        why = "set by " + ", ".join(f"{k}={v}" for k, v in env.items())
    elif n == cores:
        why = "PyTorch's default: one thread per core this process may use"
    else:
        why = f"torch.set_num_threads({n}) or the OpenMP runtime chose it ({cores} cores available)"
    return {"torch_threads": n, "cores": cores, "why": why, **({"env": env} if env else {})}


class Conditions:
    """Look at the machine before a run (start), during it (stop), and judge it."""

    def __init__(self, settings: ConditionSettings | None = None, gpu_index: int | None = None):
        self.st = settings or ConditionSettings()
        self.gpu_index = gpu_index
        self.before: dict = {}
        self.window: CpuWindow | None = None

    def start(self) -> Conditions:
        look = CpuWindow()
        time.sleep(self.st.sample_s)  # idle: whatever runs now is someone else
        self.before = {"loadavg": loadavg(), **look.stop()}
        self.before.pop("own_cores", None)
        if self.gpu_index is not None:
            self.before["gpu"] = gpu_state(self.gpu_index)
        self.window = CpuWindow()  # the GPU sample just taken is also the window's first: the counters at the start
        self.vendor_mark = vendor.mark()  # the vendor-library settings applied from here on are recorded
        return self

    def fit_threads(self) -> dict | None:
        """On a busy machine, run CPU ops on the cores the other work leaves free (at least one). A 2-thread op
        on a loaded 2-core machine waits, at every call, for its second thread to be scheduled: its times sit on
        multiples of the scheduler tick (docs/measurement.md). Not when the user chose the count
        (OMP_NUM_THREADS, MKL_NUM_THREADS). Returns what it did, or None."""
        global _FITTED
        import torch

        if not self.busy_now() or any(k in os.environ for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")):
            return None
        was, cores = torch.get_num_threads(), usable_cores()
        other = self.before.get("other_cores")
        if other is None:
            load = (self.before.get("loadavg") or [cores])[0]
            other = max(0.0, load - 1.0)  # the load average counts our own start-up as one
        n = max(1, min(was, int(cores - other)))
        if n >= was:
            return None
        torch.set_num_threads(n)
        _FITTED = {
            "threads": n,
            "was": was,
            "cores": cores,
            "why": f"machine busy (other processes kept {other:.2f} of {cores} cores busy before the run): "
            f"{n} thread(s) instead of {was}, so that no op waits for a descheduled thread",
        }
        return _FITTED

    def busy_now(self) -> bool:
        """Whether the look before the run (start) already found the machine busy."""
        return bool(judge_conditions({"before": self.before, "cores": usable_cores()}, self.st))

    def stop(self) -> dict:
        during = self.window.stop() if self.window else {}
        during["loadavg"] = loadavg()
        if self.gpu_index is not None:
            during["gpu"] = gpu_window(
                self.before.get("gpu") or {}, gpu_state(self.gpu_index), during.get("wall_s") or 0.0
            )
        doc = {
            "before": self.before,
            "during": during,
            "threads": threads_block(),
            "cores": usable_cores(),
            "thresholds": {
                "max_other_cores": self.st.max_other_cores,
                "max_load_per_core": self.st.max_load_per_core,
                "max_steal_share": self.st.max_steal_share,
            },
        }
        doc["vendor"] = vendor.applied_since(getattr(self, "vendor_mark", (0, ())))  # core/vendor.py, per family
        doc["reasons"] = judge_conditions(doc, self.st)
        doc["busy"] = bool(doc["reasons"])
        release_threads()
        return doc


def judge_conditions(doc: dict, st: ConditionSettings) -> list[str]:
    """Why the machine was busy (empty: quiet), from a conditions block."""
    cores = doc.get("cores") or 1
    out = []
    for when in ("before", "during"):
        w = doc.get(when) or {}
        other = w.get("other_cores")
        if other is not None and other > st.max_other_cores:
            out.append(
                f"{when} the run other processes kept {other:.2f} of {cores} cores busy (> {st.max_other_cores:g})"
            )
        steal = w.get("steal_share")
        if steal is not None and steal > st.max_steal_share:
            out.append(f"{when} the run the hypervisor took {steal:.0%} of the CPU time (steal)")
        gpu = w.get("gpu") or {}
        if gpu.get("throttle"):
            out.append(f"{when} the run the GPU clocks were held down: {', '.join(gpu['throttle'])}")
        if gpu.get("other_processes"):
            out.append(f"{when} the run {gpu['other_processes']} other process(es) used the GPU")
    load = (doc.get("before") or {}).get("loadavg")
    if load and load[0] > st.max_load_per_core * cores:
        out.append(f"load average {load[0]:.2f} before the run on {cores} cores (> {st.max_load_per_core:g} per core)")
    return out


def conditions_line(doc: dict) -> str:
    """One line for a quiet run's report: what the machine was doing, the threads and why."""
    before, during = doc.get("before") or {}, doc.get("during") or {}
    load = before.get("loadavg")
    parts = [
        f"load {load[0]:.2f} before" if load else None,
        f"other processes {during['other_cores']:.2f} cores during" if during.get("other_cores") is not None else None,
    ]
    th = doc.get("threads") or {}
    if th:
        parts.append(f"{th.get('torch_threads')} torch thread(s) on {th.get('cores')} cores ({th.get('why')})")
    return ("conditions: busy: " if doc.get("busy") else "conditions: quiet: ") + ", ".join(p for p in parts if p)


def busy_advice(doc: dict) -> str:
    """The warning line of a busy run's report."""
    return (
        "machine busy: " + "; ".join(doc.get("reasons", [])) + ". Timings and ceilings are unreliable: rerun "
        "when `uptime` shows a load under the core count and `top` shows no other busy process, and compare "
        "two versions within one run, not across runs"
    )
