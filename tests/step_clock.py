"""A clock that moves only when the test moves it, for the live daemon tests.

The in-process live tests run the simulator's exporters (``serve(clock=...)``) and the daemon
(``run_daemon(clock=...)``) on one ``StepClock``, and advance it by one scrape interval after
each daemon tick (``on_tick``). The simulated cluster is then exactly one step further at every
tick, however slowly a loaded machine runs the ticks: what the daemon sees, when a planted
failure shows and when an episode resolves are counted in ticks, not in wall seconds. The
daemon still sleeps its interval in wall time between ticks; only the clocks it reads stand
still while it works.

``SharedStepClock`` is the same clock for tests whose daemon and cluster run in subprocesses
(tests/test_crash_restart.py): the daemon's process advances it after each of its ticks.
"""

from __future__ import annotations

import mmap
import struct
import threading
from collections.abc import Callable
from pathlib import Path


class StepClock:
    """Seconds as the exporters' clock (``serve(clock=StepClock())``): starts at 0 and moves
    only by ``advance``. Thread-safe: the exporters read it from their server threads."""

    def __init__(self) -> None:
        self._now = 0.0
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._now += seconds

    def scaled(self, start: float, speed: float) -> Callable[[], float]:
        """The simulated cluster's time on this clock: ``start + now * speed`` (what
        ``serve(scenario, speed=speed, clock=self)`` serves, started at ``now == 0``)."""
        return lambda: start + self() * speed


class SharedStepClock(StepClock):
    """A ``StepClock`` that several processes share through a file (an 8-byte float mapped
    into each of them): the crash tests' daemon subprocess advances it after each tick, the
    simulated cluster's process serves on it, and the test reads it. One writer at a time:
    the daemon while it runs, the test only while the daemon is down."""

    def __init__(self, path: Path) -> None:
        if not path.exists():
            path.write_bytes(struct.pack("<d", 0.0))
        self.path = path
        with path.open("r+b") as fh:
            self._map = mmap.mmap(fh.fileno(), 8)
        self._lock = threading.Lock()  # within this process

    def __call__(self) -> float:
        return float(struct.unpack_from("<d", self._map)[0])

    def advance(self, seconds: float) -> None:
        with self._lock:
            struct.pack_into("<d", self._map, 0, self() + seconds)
