"""Per-node alert episodes from per-node alert scores, with failure XIDs forcing alerts.

``NodeAlerts.update`` runs once per tick, in the tick loop, for every driver (``run``,
``replay``) and, over recorded scores, for calibration: one piece of code decides when an alert
starts and ends, whatever the clock.

- The episodes are ``Episodes`` (ok -> pending -> firing -> resolved, vectorized over nodes).
- A failure XID on a node (judged by ``pipeline.is_failure``, whatever its source: the DCGM
  gauge, the kernel log, an events file) holds that node's alert for ``xid_hold_s``: the alert
  is forced whatever the threshold (calibration tunes the statistical threshold only) and
  names ``xid_<code>``.
- Definitive structural evidence on a node (``TickResult.definitive``: one of its GPUs gone from
  the page its exporter still serves with the other GPUs) forces its alert the same way, for
  ``xid_hold_s`` from the tick that shows it: no minimum duration, whatever the threshold. Its
  evidence is the pipeline's (the presence signals, the vanished GPU) and the alert is marked
  ``definitive`` (the policy pages it). Statistical evidence keeps its minimum duration.
- At each new peak of an episode its evidence is taken from ``evidence(node)`` (the pipeline's
  leading signals and GPU at this tick, or what calibration recorded); during an XID hold the
  precursor evidence the episode already had is kept and the XID is added behind it.
- The GPU an alert names (its ``gpu`` label) is the one that leads the node: the GPU whose own
  fused score is the node's highest and at or above the alert threshold (``leading_gpu``: the
  GPU Prometheus' ``GPUFailureScoreHigh`` names), else the GPU of the strongest column, if
  that column is a GPU's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..config import AlertsConfig
from ..model import Alert, BoolArray, FloatArray, XidEvent
from ..pipeline import TickResult
from .episodes import EpisodeParams, Episodes

# (signals strongest first, GPU label or None) that give a node its score at this tick
Evidence = tuple[tuple[str, ...], str | None]
EvidenceFn = Callable[[int], Evidence]


def leading_gpu(tick: TickResult, node: int, threshold: float) -> str | None:
    """The label of ``node``'s GPU with the highest fused score at ``tick`` when that score is
    at or above ``threshold`` (the GPU alone would alert), else None. GPUs that sent nothing
    this tick (NaN) do not lead."""
    mine = np.flatnonzero(tick.gpu_node == node)
    if mine.size == 0:
        return None
    scores = tick.gpu_score[mine]
    if np.all(np.isnan(scores)):
        return None
    best = int(np.nanargmax(scores))
    return tick.gpu_label[int(mine[best])] if scores[best] >= threshold else None


@dataclass(frozen=True, slots=True)
class AlertChanges:
    """Alert episodes that began firing and that resolved this tick."""

    started: tuple[Alert, ...]
    ended: tuple[Alert, ...]


class NodeAlerts:
    """See the module docstring. Node ids are the pipeline's (stable, only appended)."""

    def __init__(
        self,
        params: EpisodeParams,
        *,
        xid_hold_s: float = AlertsConfig().xid_hold_s,
        alert_on_xid: bool = True,
    ) -> None:
        self.params = params
        self.xid_hold_s = xid_hold_s
        self.alert_on_xid = alert_on_xid
        self.episodes = Episodes(params)
        self._names: tuple[str, ...] = ()
        self._xid_until = np.zeros(0)
        self._definitive_until = np.zeros(0)  # per node: definitive evidence forces until
        self._definitive: set[int] = set()  # nodes whose current episode it forced
        self._definitive_gpu: dict[int, str | None] = {}  # the GPU it named last
        self._xid_signal: dict[int, str] = {}
        self._xid_gpu: dict[int, str | None] = {}
        self._peak_signals: dict[int, tuple[str, ...]] = {}
        self._peak_gpu: dict[int, str | None] = {}
        self._open: dict[int, Alert] = {}

    def update(
        self,
        t: float,
        node_names: tuple[str, ...],
        score: FloatArray,
        failures: Sequence[XidEvent],
        evidence: EvidenceFn,
        definitive: Sequence[tuple[str, str | None]] = (),
    ) -> AlertChanges:
        """Advance every node's episode to ``t``. ``score`` is per node of ``node_names``
        (NaN: no data this tick); ``failures`` are this tick's failure XIDs (already judged);
        ``definitive`` the (node, GPU) with definitive structural evidence this tick."""
        self._names = node_names
        n_nodes = len(node_names)
        grow = n_nodes - self._xid_until.shape[0]
        if grow > 0:
            self._xid_until = np.concatenate((self._xid_until, np.full(grow, -np.inf)))
        grow = n_nodes - self._definitive_until.shape[0]
        if grow > 0:
            self._definitive_until = np.concatenate(
                (self._definitive_until, np.full(grow, -np.inf))
            )
        ids = {name: i for i, name in enumerate(node_names)} if failures or definitive else {}
        for name, gpu in definitive:
            if (node := ids.get(name)) is not None:
                self._definitive_until[node] = t + self.xid_hold_s
                self._definitive_gpu[node] = gpu
        forced = self._definitive_until[:n_nodes] >= t
        held: BoolArray = np.zeros(0, dtype=bool)
        if self.alert_on_xid:
            for ev in failures:
                node = ids.get(ev.node)
                if node is not None:
                    self._xid_until[node] = t + self.xid_hold_s
                    self._xid_signal[node] = f"xid_{ev.xid}"
                    self._xid_gpu[node] = ev.gpu
            held = self._xid_until[:n_nodes] >= t
        changes = self.episodes.update(t, score, forced | held if held.size else forced)
        ended = tuple(
            self._end(n, t, start, peak)
            for n, start, peak in zip(
                changes.ended.tolist(),
                changes.ended_start.tolist(),
                changes.ended_peak.tolist(),
                strict=True,
            )
        )
        for node in changes.opened.tolist():  # a new episode: no evidence yet
            self._peak_signals.pop(node, None)
            self._peak_gpu.pop(node, None)
            self._definitive.discard(node)
        self._definitive.update(np.flatnonzero(forced).tolist())
        for node in changes.new_peak.tolist():
            self._record_peak(node, t, evidence)
        started = tuple(self._start(n) for n in changes.started.tolist())
        return AlertChanges(started, ended)

    def held(self, t: float, n_nodes: int) -> BoolArray:
        """Per node: a failure XID forces its alert at ``t``."""
        held = np.zeros(n_nodes, dtype=bool)
        m = min(n_nodes, self._xid_until.shape[0])
        held[:m] = self._xid_until[:m] >= t
        return held

    def _record_peak(self, node: int, t: float, evidence: EvidenceFn) -> None:
        """Remember the evidence at a new peak. An XID hold (score 1) keeps the precursor
        evidence the episode already had and adds the XID behind it."""
        if self._xid_until[node] >= t and node in self._xid_signal:
            xid = self._xid_signal[node]
            before = tuple(s for s in self._peak_signals.get(node, ()) if not s.startswith("xid_"))
            self._peak_signals[node] = (*before, xid)
            if not before:
                self._peak_gpu[node] = self._xid_gpu.get(node)
            return
        self._peak_signals[node], self._peak_gpu[node] = evidence(node)
        if self._definitive_until[node] >= t:  # the GPU that vanished, whatever its score
            self._peak_gpu[node] = self._definitive_gpu.get(node, self._peak_gpu[node])

    def _alert(
        self, node: int, end: float | None, start: float | None = None, peak: float | None = None
    ) -> Alert:
        return Alert(
            node=self._names[node],
            gpu=self._peak_gpu.get(node),
            start=float(self.episodes.start[node]) if start is None else start,
            end=end,
            peak_score=float(self.episodes.peak[node]) if peak is None else peak,
            signals=self._peak_signals.get(node, ()),
            definitive=node in self._definitive,
        )

    def _start(self, node: int) -> Alert:
        alert = self._alert(node, None)
        self._open[node] = alert
        return alert

    def _end(self, node: int, t: float, start: float, peak: float) -> Alert:
        self._open.pop(node, None)
        return self._alert(node, t, start, peak)

    def open_alerts(self) -> list[Alert]:
        """Alerts still firing, with their current peak evidence."""
        return [self._alert(node, None) for node in sorted(self._open)]

    # -- state ------------------------------------------------------------------------------
    def state_dict(self) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """(arrays, JSON-able metadata) that ``load_state_dict`` restores."""
        arrays = {f"episodes/{k}": v for k, v in self.episodes.state_dict().items()}
        arrays["xid_until"] = self._xid_until.copy()
        arrays["definitive_until"] = self._definitive_until.copy()
        meta: dict[str, Any] = {
            "node_names": list(self._names),
            "open": sorted(self._open),
            "peak_signals": {str(n): list(v) for n, v in self._peak_signals.items()},
            "peak_gpu": {str(n): v for n, v in self._peak_gpu.items()},
            "xid_signal": {str(n): v for n, v in self._xid_signal.items()},
            "xid_gpu": {str(n): v for n, v in self._xid_gpu.items()},
            "definitive": sorted(self._definitive),
            "definitive_gpu": {str(n): v for n, v in self._definitive_gpu.items()},
        }
        return arrays, meta

    def load_state_dict(self, arrays: Mapping[str, np.ndarray], meta: Mapping[str, Any]) -> None:
        """Restore ``state_dict`` output; KeyError/TypeError/ValueError when malformed."""
        episodes = {k.split("/", 1)[1]: v for k, v in arrays.items() if k.startswith("episodes/")}
        self.episodes.load_state_dict(episodes)
        self._xid_until = np.asarray(arrays["xid_until"], dtype=np.float64).copy()
        self._names = tuple(str(n) for n in meta["node_names"])
        self._peak_signals = {int(n): tuple(v) for n, v in meta["peak_signals"].items()}
        self._peak_gpu = {int(n): v for n, v in meta["peak_gpu"].items()}
        self._xid_signal = {int(n): str(v) for n, v in meta["xid_signal"].items()}
        self._xid_gpu = {int(n): v for n, v in meta["xid_gpu"].items()}
        # states saved before definitive evidence existed have none
        until = arrays.get("definitive_until", np.zeros(0))
        self._definitive_until = np.asarray(until, dtype=np.float64).copy()
        self._definitive = {int(n) for n in meta.get("definitive", ())}
        self._definitive_gpu = {int(n): v for n, v in meta.get("definitive_gpu", {}).items()}
        self._open = {int(n): self._alert(int(n), None) for n in meta["open"]}
