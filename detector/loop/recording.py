"""A replay's ticks as the decisions see them, to decide again at other thresholds.

``Recording.add`` keeps, per tick, every node's alert score, the tick's XIDs, definitive
evidence and cluster incidents, and each node's leading signal and GPU (the evidence an alert
names at its peak).
``Recording.decide`` drives a fresh ``Decisions`` (other episode parameters, the same policy)
over them: calibration tries thresholds this way without re-scoring, through the very code
that ``run`` and ``replay`` decide with. What it cannot replay exactly: an alert's evidence is
its leading signal alone (``run`` names up to ``top_k``), which matters only to
``alerts.suppress_signals`` when a suppressed signal leads with others behind it; and its GPU
is the leading column's (``run`` names the GPU whose own score crossed the threshold,
``leading_gpu``), which no count depends on (matching is per node).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from ..model import Alert, FloatArray, Incident, IntArray, XidEvent
from ..pipeline import Pipeline, TickResult
from .alerts import Evidence
from .tickloop import Decisions, LoopTick

_EMPTY = np.zeros(0)
_EMPTY_INT = np.zeros(0, dtype=np.int64)


@dataclass(frozen=True, slots=True)
class Decided:
    """What a decision run produced: the alerts that were notified (ended and still open at
    the end) and the decisions' final state (accounting, incidents)."""

    alerts: list[Alert]
    decisions: Decisions


class Recording:
    """See the module docstring."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self._rows: list[FloatArray] = []
        self._held: list[np.ndarray] = []
        self._leads: list[IntArray] = []
        self._lead_gpus: list[IntArray] = []
        self._xids: dict[int, tuple[XidEvent, ...]] = {}
        self._incidents: dict[int, tuple[Incident, ...]] = {}
        self._definitive: dict[int, tuple[tuple[str, str | None], ...]] = {}  # tick -> its own
        self.node_names: tuple[str, ...] = ()
        self.signal_names: list[str] = []
        self.gpu_labels: list[str] = []
        self._signal_ids: dict[str, int] = {}
        self._gpu_ids: dict[str, int] = {}
        self._signal_map: tuple[tuple[str, ...], IntArray] = ((), _EMPTY_INT)
        self._gpu_map: tuple[tuple[str, ...], IntArray] = ((), _EMPTY_INT)

    @classmethod
    def from_arrays(
        cls,
        times: FloatArray,
        scores: FloatArray,
        leads: np.ndarray,
        signal_names: Sequence[str],
        node_names: Sequence[str],
        xids: Mapping[int, tuple[XidEvent, ...]] | None = None,
    ) -> Recording:
        """A recording of ticks x nodes arrays (``leads``: signal id in ``signal_names`` or
        -1; ``xids``: tick index -> that tick's XIDs), as ``add`` would have kept them."""
        rec = cls()
        rec.times = [float(t) for t in times]
        rec._rows = [row.astype(np.float32) for row in scores]
        rec._held = [np.zeros(scores.shape[1], dtype=bool) for _ in rec.times]
        rec._leads = [row.astype(np.int64) for row in leads]
        rec._lead_gpus = [np.full(scores.shape[1], -1, dtype=np.int64) for _ in rec.times]
        rec._xids = dict(xids or {})
        rec.node_names = tuple(node_names)
        rec.signal_names = list(signal_names)
        rec._signal_ids = {name: i for i, name in enumerate(rec.signal_names)}
        return rec

    def add(self, tick: LoopTick, pipeline: Pipeline, held: np.ndarray) -> None:
        """Keep ``tick`` (``held``: per node, a failure XID forced its alert)."""
        scores = tick.scores
        i = len(self.times)
        self.times.append(scores.time)
        self._rows.append(scores.node_score.astype(np.float32))
        self._held.append(held)
        if len(scores.node_names) > len(self.node_names):
            self.node_names = scores.node_names
        if tick.xids:
            self._xids[i] = tick.xids
        if scores.incidents:
            self._incidents[i] = scores.incidents
        if scores.definitive:
            self._definitive[i] = scores.definitive
        lead, lead_gpu = pipeline.lead_signals(scores)
        signals = self._ids(pipeline.signal_names, "signal")
        gpus = self._ids(scores.gpu_label, "gpu")
        self._leads.append(np.where(lead >= 0, signals[np.maximum(lead, 0)], -1).astype(np.int32))
        self._lead_gpus.append(
            np.where(lead_gpu >= 0, gpus[np.maximum(lead_gpu, 0)] if gpus.size else -1, -1).astype(
                np.int32
            )
        )

    def _ids(self, names: tuple[str, ...], kind: str) -> IntArray:
        """Recording-wide ids of a layout's ``names`` (cached while the layout holds)."""
        cached = self._signal_map if kind == "signal" else self._gpu_map
        if cached[0] is names:
            return cached[1]
        table, ids = (
            (self.signal_names, self._signal_ids)
            if kind == "signal"
            else (self.gpu_labels, self._gpu_ids)
        )
        out = np.empty(len(names), dtype=np.int64)
        for j, name in enumerate(names):
            if name not in ids:
                ids[name] = len(table)
                table.append(name)
            out[j] = ids[name]
        if kind == "signal":
            self._signal_map = (names, out)
        else:
            self._gpu_map = (names, out)
        return out

    def __len__(self) -> int:
        return len(self.times)

    def matrices(self) -> tuple[FloatArray, FloatArray, np.ndarray, np.ndarray]:
        """(times, scores, xid-held mask, leading signal id or -1), ticks x nodes."""
        n = len(self.node_names)
        scores = np.full((len(self._rows), n), np.nan, dtype=np.float32)
        held = np.zeros((len(self._rows), n), dtype=bool)
        leads = np.full((len(self._rows), n), -1, dtype=np.int32)
        for i, (row, h, lead) in enumerate(zip(self._rows, self._held, self._leads, strict=True)):
            scores[i, : row.shape[0]] = row
            held[i, : h.shape[0]] = h
            leads[i, : lead.shape[0]] = lead
        times: FloatArray = np.asarray(self.times, dtype=np.float64)
        return times, scores.astype(np.float64), held, leads

    def decide(self, decisions: Decisions) -> Decided:
        """Drive ``decisions`` (fresh) over every recorded tick; see the module docstring."""
        alerts: list[Alert] = []
        names = self.node_names
        for i, t in enumerate(self.times):
            row = self._rows[i].astype(np.float64)
            tick = TickResult(
                time=t,
                node_names=names[: row.shape[0]],
                node_score=row,
                gpu_node=_EMPTY_INT,
                gpu_label=(),
                gpu_score=_EMPTY,
                xids=(),
                incidents=self._incidents.get(i, ()),
                column_z=_EMPTY,
                definitive=self._definitive.get(i, ()),
            )
            lead, lead_gpu = self._leads[i], self._lead_gpus[i]

            def evidence(
                node: int, lead: IntArray = lead, lead_gpu: IntArray = lead_gpu
            ) -> Evidence:
                signal = int(lead[node]) if node < lead.shape[0] else -1
                gpu = int(lead_gpu[node]) if node < lead_gpu.shape[0] else -1
                return (
                    (self.signal_names[signal],) if signal >= 0 else (),
                    self.gpu_labels[gpu] if gpu >= 0 else None,
                )

            decided = decisions.decide(tick, self._xids.get(i, ()), evidence)
            alerts.extend(decided.ended_sent)
        alerts.extend(decisions.open_sent_alerts())
        alerts.sort(key=lambda a: (a.start, a.node))
        return Decided(alerts, decisions)
