"""Cluster incidents with their diagnosis: which layer held each checkpoint storm back.

``StormLog.observe`` sees every tick (its common-mode incidents and its raw frame); ticks with a
common-mode signal belong to one incident until none has moved for ``gap_s`` (run.py's
``STORM_GAP_S``; the policy counts its incident alerts per signal instead). When an incident closes,
its nodes' NFS figures are set against those before it and ``diagnosis.storm_bottleneck``
names the bottleneck:

- during: the counters' increases over the incident's ticks on which an NFS signal moved
  cluster-wide (an incident may also span quiet ticks and other signals' moves, which would
  dilute the storm);
- before: their increases over the quiet ticks (no NFS signal moving cluster-wide) of the
  ``before_s`` before the incident, so an earlier storm does not raise the baseline.

Figures cover every node with an NFS mount (a storm is common-mode: most nodes take part).
Memory: one small array (quantities x nodes) per tick of the last ``before_s``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ..diagnosis import (
    NFS_SIGNAL_PREFIX,
    NfsMeter,
    NfsSnapshot,
    StormDiagnosis,
    nfs_figures,
    storm_bottleneck,
)
from ..model import FloatArray, SeriesInfo
from ..pipeline import TickResult


@dataclass(frozen=True, slots=True)
class Storm:
    """One cluster incident: when, which signals moved cluster-wide, and its bottleneck."""

    start: float
    end: float
    signals: tuple[str, ...]
    diagnosis: StormDiagnosis


@dataclass
class _Sum:
    """Counter increases summed over some ticks (quantities x nodes) and the seconds covered."""

    delta: FloatArray = field(default_factory=lambda: np.zeros((0, 0)))
    span: float = 0.0

    def add(self, step: FloatArray, seconds: float) -> None:
        if self.delta.shape[1] > step.shape[1]:  # never: nodes are only appended
            step = np.pad(step, ((0, 0), (0, self.delta.shape[1] - step.shape[1])))
        grown = step.copy()
        if self.delta.shape[1]:
            grown[:, : self.delta.shape[1]] += self.delta
        self.delta, self.span = grown, self.span + seconds


@dataclass
class _Open:
    start: float
    last: float
    before: _Sum
    latest: NfsSnapshot
    during: _Sum = field(default_factory=_Sum)
    signals: set[str] = field(default_factory=set)


# A checkpoint storm ends after this long without a signal moving cluster-wide.
STORM_GAP_S = 900.0


class StormLog:
    """See the module docstring."""

    def __init__(self, gap_s: float, before_s: float = 3600.0) -> None:
        self.gap_s, self.before_s = gap_s, before_s
        self.meter = NfsMeter()
        self.storms: list[Storm] = []
        self._previous: NfsSnapshot | None = None
        self._quiet: deque[tuple[float, FloatArray, float]] = deque()  # (time, step, seconds)
        self._open: _Open | None = None

    def observe(self, tick: TickResult, values: FloatArray, infos: Sequence[SeriesInfo]) -> None:
        self.meter.observe(tick.time, values, infos)
        now, previous = self.meter.snapshot(), self._previous
        self._previous = now
        step = np.zeros((now.sums.shape[0], 0))
        seconds = 0.0
        if previous is not None:
            n = previous.sums.shape[1]
            step = now.sums.copy()
            step[:, :n] -= previous.sums
            step[:, n:] = 0.0  # nodes first seen now: no increase known yet
            step[~(step >= 0)] = 0.0  # unknown or reset: nothing added for that node
            seconds = tick.time - previous.time
        current = self._open
        if current is not None and tick.time - current.last > self.gap_s:
            self._close(current)
            current = self._open = None
        nfs = any(i.signal.startswith(NFS_SIGNAL_PREFIX) for i in tick.incidents)
        if not nfs:
            self._quiet.append((tick.time, step, seconds))
        while self._quiet and self._quiet[0][0] < tick.time - self.before_s:
            self._quiet.popleft()
        if not tick.incidents:
            return
        if current is None:
            before = _Sum()
            for _, quiet_step, quiet_seconds in self._quiet:
                before.add(quiet_step, quiet_seconds)
            current = self._open = _Open(tick.time, tick.time, before, now)
        current.last, current.latest = tick.time, now
        current.signals.update(incident.signal for incident in tick.incidents)
        if nfs:
            current.during.add(step, seconds)

    def finish(self) -> list[Storm]:
        """Every incident, the one still open closed at its last tick."""
        if self._open is not None:
            self._close(self._open)
            self._open = None
        return self.storms

    def _close(self, incident: _Open) -> None:
        link = self.meter.link(incident.latest)
        during = nfs_figures(
            incident.during.delta, incident.during.span, link[: incident.during.delta.shape[1]]
        )
        before = nfs_figures(
            incident.before.delta, incident.before.span, link[: incident.before.delta.shape[1]]
        )
        signals = tuple(sorted(incident.signals))
        diagnosis = storm_bottleneck(signals, during, before)
        self.storms.append(Storm(incident.start, incident.last, signals, diagnosis))
