"""Run the providers no GPU has run yet (faults.isolated_providers) once per case in a process of their own,
before the measuring process touches them: a kernel that faults there ends that process's context, not the
measuring one's, and is named with the case it faulted on. The child calls each (case, provider) once on
seed-0 inputs and synchronizes (no reference, no timing); it reports each pair before and after on a pipe, so a
child that dies outright (ROCm's "Memory access fault" aborts the process) still tells which call killed it.
After a fault a fresh child continues with the next pair, so one faulting case costs only its own row."""

from __future__ import annotations

import importlib
import multiprocessing
import signal
from collections.abc import Sequence
from dataclasses import dataclass

from microbench.core.shapes import Case
from microbench.roofline import registry
from microbench.roofline.faults import call_timeout_s, lost_context


@dataclass(frozen=True)
class Pair:
    case: Case
    provider: str
    module: str  # the provider's module, imported in the child so that it registers


def _check_pairs(pairs: Sequence[Pair], device_kind: str, conn) -> None:
    """The child: each pair once, reported as ("start", i) and ("done", i); a lost context ends the child
    with ("lost", i, reason)."""
    from microbench.core import device as devmod
    from microbench.core.cases import make_inputs

    for mod in sorted({p.module for p in pairs}):
        importlib.import_module(mod)
    device = devmod.detect(device_kind)
    for i, pair in enumerate(pairs):
        conn.send(("start", i))
        p = next(q for q in registry.for_op(pair.case.family) if q.name == pair.provider)
        try:
            if p.unavailable_reason(device) is None:
                registry.bind(p, pair.case, *make_inputs(pair.case, device.torch_device, seed=0))()
                device.synchronize()
        except Exception as e:  # noqa: BLE001 - only a lost context matters here; the rest is the runner's
            if why := lost_context(e):
                conn.send(("lost", i, f"{why}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"))
                return
        conn.send(("done", i))


def _run_child(pairs: Sequence[Pair], device_kind: str, timeout_s: float) -> tuple[int, str | None]:
    """One child over `pairs`: (index of the first pair not known good, why it failed), or (len, None)."""
    ctx = multiprocessing.get_context("spawn")  # never fork a process that holds a CUDA context
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_check_pairs, args=(list(pairs), device_kind, child), daemon=True)
    proc.start()
    child.close()
    last_started, done, hung = None, -1, False
    while True:
        if not parent.poll(timeout_s):
            hung = True  # silent for longer than one call may take
            break
        try:
            msg = parent.recv()
        except EOFError:  # the child ended: done, or died
            break
        if msg[0] == "lost":
            proc.join(timeout_s)
            return msg[1], msg[2]
        last_started, done = (msg[1], done) if msg[0] == "start" else (last_started, msg[1])
    _end(proc, now=hung)
    if done == len(pairs) - 1:
        return len(pairs), None
    culprit = last_started if last_started is not None else done + 1
    return culprit, f"the pre-flight process {_how(None if hung else proc.exitcode)} in this call"


def _end(proc, now: bool) -> None:
    if not now:
        proc.join(5)
    if proc.is_alive():
        proc.kill()
        proc.join()


def _how(exitcode: int | None) -> str:
    if exitcode is None:
        return "hung (ended after its timeout)"
    if exitcode < 0:
        return f"was ended by {signal.Signals(-exitcode).name}"
    return f"ended with exit status {exitcode}"


def faults(pairs: Sequence[Pair], device_kind: str, timeout_s: float | None = None) -> dict[tuple, str]:
    """(case, provider) -> why it lost the device context in its pre-flight process; pairs not named ran.
    `timeout_s`: the longest one call may take (default: call_timeout_s of data/gpu_faults.toml)."""
    timeout_s = call_timeout_s() if timeout_s is None else timeout_s
    out: dict[tuple, str] = {}
    start = 0
    while start < len(pairs):
        bad, why = _run_child(pairs[start:], device_kind, timeout_s)
        if why is None:
            break
        pair = pairs[start + bad]
        out[(pair.case, pair.provider)] = why
        start += bad + 1
    return out
