"""The NFS figures of the open cluster incident and its bottleneck (diagnosis.storm_bottleneck).

``StormMeter.observe`` sees every tick's raw frame and its common-mode incidents (the tick loop
feeds it before the policy decides); the policy (incidents.py) calls ``begin`` when it opens a
cluster incident and ``diagnose`` when it notifies or closes one. The incident's nodes' NFS
figures are set against those before it:

- during: the counters' increases over the incident's ticks on which an NFS signal moved
  cluster-wide (an incident may also span quiet ticks and other signals' moves, which would
  dilute the storm);
- before: their increases over the quiet ticks (no NFS signal moving cluster-wide) of the
  ``before_s`` before the incident, so an earlier storm does not raise the baseline.

Figures cover every node with an NFS mount (a storm is common-mode: most nodes take part).
Memory: one small array (quantities x nodes) per tick of the last ``before_s``. Not kept across
a restart: an incident open when the daemon restarts is diagnosed from the ticks after it.
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
from ..model import FloatArray, Incident, SeriesInfo


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


class StormMeter:
    """See the module docstring."""

    def __init__(self, before_s: float = 3600.0) -> None:
        self.before_s = before_s
        self.meter = NfsMeter()
        self._latest: NfsSnapshot | None = None
        self._quiet: deque[tuple[float, FloatArray, float]] = deque()  # (time, step, seconds)
        self._step: tuple[FloatArray, float] = (np.zeros((0, 0)), 0.0)
        self._nfs = False  # an NFS signal moved cluster-wide this tick
        self._before = _Sum()
        self._during = _Sum()

    def observe(
        self,
        time: float,
        values: FloatArray,
        infos: Sequence[SeriesInfo],
        incidents: Sequence[Incident],
    ) -> None:
        """One tick: its raw ``values`` (aligned to ``infos``) and common-mode ``incidents``."""
        self.meter.observe(time, values, infos)
        now, previous = self.meter.snapshot(), self._latest
        self._latest = now
        step = np.zeros((now.sums.shape[0], 0))
        seconds = 0.0
        if previous is not None:
            n = previous.sums.shape[1]
            step = now.sums.copy()
            step[:, :n] -= previous.sums
            step[:, n:] = 0.0  # nodes first seen now: no increase known yet
            step[~(step >= 0)] = 0.0  # unknown or reset: nothing added for that node
            seconds = time - previous.time
        self._step = (step, seconds)
        self._nfs = any(i.signal.startswith(NFS_SIGNAL_PREFIX) for i in incidents)
        if self._nfs:
            self._during.add(step, seconds)
        else:
            self._quiet.append((time, step, seconds))
        while self._quiet and self._quiet[0][0] < time - self.before_s:
            self._quiet.popleft()

    def begin(self) -> None:
        """A cluster incident opens this tick: the quiet ticks before it are its baseline,
        and its NFS ticks count from this one."""
        self._before = _Sum()
        for _, step, seconds in self._quiet:
            self._before.add(step, seconds)
        self._during = _Sum()
        if self._nfs:
            self._during.add(*self._step)

    def diagnose(self, signals: Sequence[str]) -> StormDiagnosis:
        """The bottleneck of the incident begun last, whose common-mode ``signals`` are given,
        from the ticks seen so far."""
        latest = self._latest
        link = self.meter.link(latest) if latest is not None else np.zeros(0)
        during = nfs_figures(
            self._during.delta, self._during.span, link[: self._during.delta.shape[1]]
        )
        before = nfs_figures(
            self._before.delta, self._before.span, link[: self._before.delta.shape[1]]
        )
        return storm_bottleneck(signals, during, before)
