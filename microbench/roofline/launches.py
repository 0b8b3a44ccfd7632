"""Which kernel ran: one record that every provider reports its launches into (Triton, CUDA C++ through
CuPy, whatever comes next) and that Tensor Core evidence reads, so that the evidence is the machine code of
the kernel that actually ran (an autotuner's choice, a tile picked from the operands' strides), not of a
configuration we think it chose.

    with launch_record() as launches:
        call()                       # a provider's wrapper calls report_launch(...) for each launch
    last = launches[-1]

The record lives in a context variable: each thread (and each asyncio task) sees only the records opened in
its own context, so two threads measuring at once never read each other's launches, and nested records
each get every launch made inside them. A launch made from a worker thread the provider starts itself is
in that thread's context, not the caller's: report from the calling thread.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from dataclasses import dataclass


@dataclass(frozen=True)
class KernelLaunch:
    kernel: str  # our kernel's name: triton_gemm, cuda_gemm_mma
    config: str  # its configuration's label: tile sizes, stages, layout
    detail: object = None  # the provider's own handle on what ran: Triton's CompiledKernel, a CUDA C++ build key


_OPEN: contextvars.ContextVar[tuple[list[KernelLaunch], ...]] = contextvars.ContextVar(
    "dawnscope_launch_records", default=()
)


@contextlib.contextmanager
def launch_record() -> Iterator[list[KernelLaunch]]:
    """Collect every launch reported inside the block, in this thread / task, in order."""
    launches: list[KernelLaunch] = []
    token = _OPEN.set(_OPEN.get() + (launches,))
    try:
        yield launches
    finally:
        _OPEN.reset(token)


def report_launch(kernel: str, config: str, detail: object = None) -> None:
    """A provider's wrapper says what it launched; free when no record is open."""
    records = _OPEN.get()
    if records:
        launch = KernelLaunch(kernel, config, detail)
        for launches in records:
            launches.append(launch)
