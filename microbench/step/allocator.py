"""The allocator probe of a CPU decomposition: a step that spends its time in the operating system re-faulting the
memory it freed, timed again with glibc malloc's thresholds fixed, so that the allocator finding's saving is
measured, not modelled (prediction/findings.py rule_allocator; findings.toml [rules.allocator]).

glibc serves large allocations with mmap and returns them to the OS when they are freed; its mmap threshold adapts
upwards only as far as what it has freed. A training step that allocates the same large activations and gradients
every step then maps, zeroes and faults in those pages again each time: 6,000 - 10,000 minor faults and 9 - 22 ms of
system time in a 58 - 85 ms step of the spectrogram CNN (tests/findings_models.py). Fixed thresholds
(MALLOC_MMAP_THRESHOLD_ / MALLOC_TRIM_THRESHOLD_ / MALLOC_TOP_PAD_, or the same through mallopt) keep the freed memory
in the process for the next step; jemalloc and tcmalloc do so by design.

The probe sets them with mallopt in this process, after every other measurement of the decomposition: mallopt
cannot be undone (the adaptive threshold does not come back), so the calling process keeps them; the document's
notes say so."""
from __future__ import annotations

import ctypes
import ctypes.util
import tomllib
from functools import lru_cache

from microbench.core.resources import data_file


@lru_cache(maxsize=1)
def settings() -> tuple[dict, ...]:
    """The thresholds (data/allocator.toml): each with its mallopt name and parameter, environment variable, value."""
    return tuple(tomllib.loads(data_file("allocator.toml").read_text())["glibc"])


def env_assignments() -> str:
    """The fix as environment variables: `MALLOC_MMAP_THRESHOLD_=33554432 ...`."""
    return " ".join(f"{s['env']}={s['value']}" for s in settings())


def _libc():
    """glibc, where mallopt is glibc's (musl and macOS have no such thresholds): else None."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        libc.gnu_get_libc_version.restype = ctypes.c_char_p
        libc.gnu_get_libc_version()
    except (OSError, AttributeError, TypeError):
        return None
    return libc


def fix_thresholds() -> bool:
    """mallopt(param, value) for each threshold; False where this is not glibc or a call was refused."""
    libc = _libc()
    if libc is None:
        return False
    return all(libc.mallopt(s["param"], int(s["value"])) == 1 for s in settings())


def probe(step, device, timing_settings, noise):
    """The step timed again with the thresholds fixed, after a few untimed steps that fill the heap it keeps
    (harness.timing's first call is untimed too); None where they could not be set."""
    from microbench.harness.timing import time_calls

    if not fix_thresholds():
        return None
    for _ in range(WARM_STEPS):
        step()
    return time_calls(step, device, timing_settings, noise)


# Steps run before the timed ones once the thresholds are fixed: the first frees the mapped buffers of the old
# regime and grows the heap to the step's peak; by the second the step reuses it (0 - 60 faults a step after)
WARM_STEPS = 2
