"""What the memory benchmarks share: a function run in a fresh interpreter (its imports,
compiled kernels and heap its own, so one variant's memory does not count in another's), and
the resident memory of the process now."""

from __future__ import annotations

import gc
import multiprocessing
import resource
from collections.abc import Callable
from pathlib import Path
from typing import Any


def in_fresh_process(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` in a spawned interpreter; its (picklable) result."""
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return pool.apply(fn, args)


def resident_mb() -> float:
    """Resident memory now (Linux /proc), after a full garbage collection."""
    gc.collect()
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * resource.getpagesize() / 2**20
