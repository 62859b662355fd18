"""glibc's heap settings for long CPU training runs: return freed blocks to the OS.

PyTorch's CPU allocator is the C library's `malloc`. With glibc's defaults, freed activation
buffers of varying size stay in the heap (its mmap threshold grows with the largest block
freed, up to 32 MiB), so the resident set of a run whose batch shapes vary grows long after
its working set stopped growing: 11.2 GB peak for the copy student's 8-epoch run, against 3.6
GB in a 40-step probe with a fixed 1 MiB threshold (docs/architecture.md). The training
callback `propositionizer.callbacks.HeapLimit` calls these: the same as exporting
`MALLOC_MMAP_THRESHOLD_`/`MALLOC_TRIM_THRESHOLD_`, but from the config. On a C library
without `mallopt` (macOS, musl) they return False.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from functools import lru_cache
from typing import Any

__all__ = ["set_heap_thresholds", "trim_heap"]

M_TRIM_THRESHOLD = -1  # glibc's mallopt parameter numbers (malloc.h)
M_MMAP_THRESHOLD = -3


@lru_cache(maxsize=1)  # looked up once: trim_heap runs every few training steps
def _libc() -> Any | None:
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
    except OSError:
        return None
    return libc if hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim") else None


def set_heap_thresholds(mmap_threshold: int, trim_threshold: int) -> bool:
    """glibc `mallopt`: blocks of `mmap_threshold` bytes or more are mapped (and unmapped when
    freed), and the heap's top is returned to the OS past `trim_threshold` free bytes. False
    when the C library has no `mallopt` or refused a value."""
    libc = _libc()
    if libc is None:
        return False
    ok = libc.mallopt(M_MMAP_THRESHOLD, int(mmap_threshold)) == 1
    return bool(ok and libc.mallopt(M_TRIM_THRESHOLD, int(trim_threshold)) == 1)


def trim_heap() -> bool:
    """glibc `malloc_trim(0)`: free pages inside the heap go back to the OS; False when
    nothing was released or the C library has none."""
    libc = _libc()
    return bool(libc is not None and libc.malloc_trim(0))
