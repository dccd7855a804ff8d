"""A one-line progress bar for long replays and calibrations, redrawn in place on stderr.

Contract:

- It is drawn only for a person: :meth:`ProgressBar.for_stream` returns ``None`` (callers then
  skip progress entirely) when the stream is not a terminal (a pipe, a file, pytest's capture),
  when ``--quiet`` was given, or when the environment variable ``CI`` is set (CI logs keep
  every carriage-return redraw as a line of noise).
- Progress is measured in *data time*: :meth:`update` takes the time of the tick just replayed.
  The span of the data (first, last sample) may be known up front (the simulated cluster),
  learnt later through :meth:`set_span` (a dump: from its sorted times once the reader has them)
  or never. With a span the line shows a filled bar, percent, days covered, throughput (data
  days per wall-clock minute) and ETA; without one, a moving marker, ticks, days covered and
  throughput, and no percentage it would have to invent.
- Redraws are rate-limited (``min_interval_s``) so a fast replay does not spend its time writing
  to the terminal; :meth:`close` always draws the final state and ends the line with a newline
  (only if something was drawn), so whatever is printed next starts on a line of its own.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Mapping
from typing import Protocol, TextIO

DAY_S = 86400.0
_FALSE = {"", "0", "false", "no", "off"}


class ProgressSink(Protocol):
    """What a replay reports to: the data time of each tick, the span once known, the end."""

    def set_span(self, start: float, end: float) -> None: ...

    def update(self, data_time: float) -> None: ...

    def close(self, *, complete: bool = False) -> None: ...


def running_in_ci(env: Mapping[str, str]) -> bool:
    """True when ``CI`` is set to anything but an explicit no (GitHub, GitLab: ``CI=true``)."""
    return env.get("CI", "").strip().lower() not in _FALSE


class ProgressBar:
    """One replay's progress: ``[####----]  42.0%  1.26 of 3.00 days  4.1 days/min  ETA 0:32``."""

    def __init__(
        self,
        stream: TextIO,
        *,
        span: tuple[float, float] | None = None,
        width: int = 24,
        min_interval_s: float = 0.1,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.stream = stream
        self.span = span
        self.width = width
        self.min_interval_s = min_interval_s
        self.clock = clock
        self.ticks = 0
        self.redraws = 0
        self._first: tuple[float, float] | None = None  # (wall, data time) of the first tick
        self._data_time = float("nan")
        self._last_draw = -float("inf")
        self._shown = 0  # characters on the line now (to blank a shorter redraw)
        self._closed = False
        self._complete = False

    @classmethod
    def for_stream(
        cls,
        stream: TextIO | None = None,
        *,
        quiet: bool = False,
        env: Mapping[str, str] | None = None,
        span: tuple[float, float] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> ProgressBar | None:
        """A bar on ``stream`` (default stderr), or None when nobody would see it (see module)."""
        stream = sys.stderr if stream is None else stream
        env = os.environ if env is None else env
        if quiet or running_in_ci(env) or not _isatty(stream):
            return None
        return cls(stream, span=span, clock=clock)

    def set_span(self, start: float, end: float) -> None:
        """The data's first and last sample time, when they become known."""
        self.span = (start, end)

    def update(self, data_time: float) -> None:
        """One tick at ``data_time`` was replayed; redraw if the last redraw is old enough."""
        now = self.clock()
        self.ticks += 1
        self._data_time = data_time
        if self._first is None:
            self._first = (now, data_time)
        if now - self._last_draw >= self.min_interval_s:
            self._draw(now)

    def close(self, *, complete: bool = False) -> None:
        """Draw the final state and end the line; later calls do nothing. ``complete``: the
        data ran to its end (the bar shows 100% even if the last tick fell short of the span's
        last sample); an interrupted replay closes without it and keeps its true position."""
        if self._closed:
            return
        self._closed = True
        self._complete = complete
        if self._first is not None:
            self._draw(self.clock())
        if self._shown:
            self.stream.write("\n")
            self.stream.flush()

    def render(self, now: float) -> str:
        """The line as it would be drawn at wall time ``now`` (no carriage return)."""
        if self._first is None:
            return ""
        wall0, data0 = self._first
        origin = self.span[0] if self.span is not None else data0
        covered_days = max(0.0, self._data_time - origin) / DAY_S
        elapsed_min = (now - wall0) / 60.0
        rate = (self._data_time - data0) / DAY_S / elapsed_min if elapsed_min > 0 else 0.0
        speed = f"{rate:.1f} days/min" if rate > 0 else "-- days/min"
        if self.span is None:
            pos = self.ticks // 4 % (self.width - 2)
            bar = " " * pos + "<=>" + " " * (self.width - 3 - pos)
            return f"[{bar}]  {self.ticks} ticks  {covered_days:.2f} days  {speed}"
        start, end = self.span
        total_days = max(end - start, 0.0) / DAY_S
        fraction = min(1.0, covered_days / total_days) if total_days > 0 else 1.0
        if self._complete:
            fraction, covered_days = 1.0, total_days
        filled = int(fraction * self.width)
        bar = "#" * filled + "-" * (self.width - filled)
        left_days = max(0.0, total_days - covered_days)
        eta = "--:--" if rate <= 0 else _clock(left_days / rate * 60.0)
        return (
            f"[{bar}] {100 * fraction:5.1f}%  {covered_days:.2f} of {total_days:.2f} days  "
            f"{speed}  ETA {eta}"
        )

    def _draw(self, now: float) -> None:
        line = self.render(now)
        pad = max(0, self._shown - len(line))
        self.stream.write("\r" + line + " " * pad)
        self.stream.flush()
        self._shown = len(line)
        self._last_draw = now
        self.redraws += 1


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a closed or foreign stream is no terminal
        return False


def _clock(seconds: float) -> str:
    """``M:SS`` or ``H:MM:SS``."""
    s = round(seconds)
    h, rest = divmod(s, 3600)
    m, sec = divmod(rest, 60)
    return f"{h}:{m:02d}:{sec:02d}" if h else f"{m}:{sec:02d}"
