"""XID truth from scraped data, episode de-duplication, and the failure verdict.

Sources (``XidCatalog.sources``):
- the sticky gauge ``DCGM_FI_DEV_XID_ERRORS``: it holds the LAST code seen and never resets, so
  a change of value to a nonzero code is a new XID on that GPU, and the same value again is not.
  Newer dcgm-exporter builds add ``err_code``/``err_msg`` labels: each code becomes its own
  series, so a series that *appears* with a nonzero value is a new XID. The code is the
  ``err_code`` label when present, else the value.
- the windowed count ``DCGM_EXP_XID_ERRORS_COUNT{xid=...}``: an increase is a new XID.
Pre-existing values: the first observation of a series when its node is first seen holds
whatever happened before we started watching (possibly weeks ago), so it is a baseline, not an
event. A series that appears *later* on an already watched node is new: an event if nonzero.
Values that vanish and return are compared with the last observed value (no re-fire).

When: an event is stamped with the tick that saw it, unless that tick ends a gap (the series,
or for a new series its node, unobserved for more than ``GAP_INTERVALS`` of its usual
interval: an exporter restart, a partition, the daemon down). The XID then happened somewhere
in the gap: the event is stamped at the gap's start with ``end`` at the tick that saw it
(``source`` ``GAP_SOURCE``, which ``dedupe_episodes`` lets an exact time replace), so an alert
raised during the gap matches it but is not counted as before it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from ..config import XidCatalog
from ..model import DCGM_BLANK_THRESHOLD, FloatArray, SeriesInfo, XidEvent
from ..series import SeriesIndex

_GAUGE, _COUNT = 0, 1
GAP_INTERVALS = 2.5  # a gap: unobserved this many usual intervals (one lost scrape is 2)
GAP_SOURCE = "dcgm-after-gap"  # the gauge's XID seen after a gap: its time only a bound


class XidExtractor:
    """Turns frames into XidEvents. ``update`` is vectorized over the XID series only."""

    def __init__(self, index: SeriesIndex, catalog: XidCatalog) -> None:
        self.index = index
        self.catalog = catalog
        self._synced = 0
        self._columns: list[int] = []
        self._kind: list[int] = []
        self._label_code: list[int] = []  # code from err_code/xid label, -1 if none
        self._infos: list[SeriesInfo] = []
        self._prev: FloatArray = np.empty(0)
        self._prev_t: FloatArray = np.empty(0)  # when each series was last observed
        self._interval: FloatArray = np.empty(0)  # its last interval between observations
        self._nodes_seen: set[str] = set()
        # per node (ids in _node_ids): when any of its XID series was last observed, and the
        # interval before that; per XID series its node's id
        self._node_ids: dict[str, int] = {}
        self._node_t: FloatArray = np.empty(0)
        self._node_interval: FloatArray = np.empty(0)
        self._node_of = np.zeros(0, dtype=np.int64)
        # Array forms of the lists above, rebuilt when series are added (not every tick), and
        # per XID series whether its node is already watched (so a tick only names new nodes).
        self._columns_arr = np.zeros(0, dtype=np.int64)
        self._gauge = np.zeros(0, dtype=bool)
        self._node_watched = np.zeros(0, dtype=bool)

    def _label_code_of(self, info: SeriesInfo) -> int:
        labels = dict(info.labels + info.context)
        for name in self.catalog.sources.code_labels:
            text = labels.get(name, "").strip()
            if text.isdigit():
                return int(text)
        return -1

    def _sync(self) -> None:
        infos = self.index.infos
        for info in infos[self._synced :]:
            kind = self.catalog.source_kind(info.metric)  # either spelling of a counter
            if kind is not None:
                self._columns.append(info.column)
                self._kind.append(_GAUGE if kind == "gauge" else _COUNT)
                self._label_code.append(self._label_code_of(info))
                self._infos.append(info)
        self._synced = len(infos)
        if self._prev.shape[0] < len(self._columns):
            grow = np.full(len(self._columns) - self._prev.shape[0], np.nan)
            self._prev = np.concatenate([self._prev, grow])
            self._prev_t = np.concatenate([self._prev_t, grow])
            self._interval = np.concatenate([self._interval, grow])
        self._columns_arr = np.asarray(self._columns, dtype=np.int64)
        self._gauge = np.asarray(self._kind, dtype=np.int64) == _GAUGE
        ids = [self._node_ids.setdefault(i.node, len(self._node_ids)) for i in self._infos]
        self._node_of = np.asarray(ids, dtype=np.int64)
        grown = len(self._node_ids) - self._node_t.shape[0]
        if grown > 0:
            self._node_t = np.concatenate([self._node_t, np.full(grown, np.nan)])
            self._node_interval = np.concatenate([self._node_interval, np.full(grown, np.nan)])
        self._refresh_watched()

    def _refresh_watched(self) -> None:
        self._node_watched = np.array([i.node in self._nodes_seen for i in self._infos], bool)

    def update(self, t: float, frame_values: FloatArray) -> list[XidEvent]:
        """New XID events in this tick's frame (see the module docstring for the semantics)."""
        if self._synced < len(self.index):
            self._sync()
        if not self._columns:
            return []
        columns = self._columns_arr
        values = np.full(columns.shape[0], np.nan)
        inside = columns < frame_values.shape[0]
        values[inside] = frame_values[columns[inside]]
        values[np.abs(values) >= DCGM_BLANK_THRESHOLD] = np.nan
        observed = ~np.isnan(values)
        prev = self._prev
        fresh = observed & np.isnan(prev)
        changed = observed & ~fresh & (values != prev)
        fired = np.where(self._gauge, changed & (values != 0), changed & (values > prev))
        # A series first seen on a node we were already watching is a new XID, if nonzero.
        candidates = np.flatnonzero(fresh & (values > 0))
        watched = self._nodes_seen
        new_series = [i for i in candidates.tolist() if self._infos[i].node in watched]
        events = []
        for i in sorted(set(np.flatnonzero(fired).tolist()) | set(new_series)):
            event = self._event(i, t, float(values[i]), self._gap_start(i, t))
            if event is not None:
                events.append(event)
        prev[observed] = values[observed]
        self._interval[observed] = t - self._prev_t[observed]  # NaN on a first observation
        self._prev_t[observed] = t
        nodes = np.unique(self._node_of[observed])
        last = self._node_t[nodes]
        later = t > last  # False where never observed (NaN)
        self._node_interval[nodes[later]] = t - last[later]
        self._node_t[nodes] = t
        newly = np.flatnonzero(observed & ~self._node_watched)
        if newly.size:  # a node seen for the first time (rare after the first tick)
            watched.update(self._infos[i].node for i in newly.tolist())
            self._refresh_watched()
        return events

    def _gap_start(self, i: int, t: float) -> float | None:
        """When the gap that tick ``t`` ends began, for series ``i`` (a series seen before:
        its own last observation; a new one: its node's), or None for no gap."""
        if np.isfinite(self._prev_t[i]):
            last, interval = float(self._prev_t[i]), float(self._interval[i])
        else:
            node = self._node_of[i]
            last, interval = float(self._node_t[node]), float(self._node_interval[node])
        gap = interval > 0.0 and t - last > GAP_INTERVALS * interval  # False with NaNs
        return last if gap else None

    def _event(self, i: int, t: float, value: float, gap_start: float | None) -> XidEvent | None:
        info = self._infos[i]
        code = self._label_code[i]
        if code < 0:
            if self._kind[i] == _COUNT or value != int(value) or value <= 0:
                return None  # a count without an xid label names no code
            code = int(value)
        gpu = info.gpu or None
        message = dict(info.context).get("err_msg", "")
        if gap_start is None:
            return XidEvent(t, info.node, gpu, code, source="dcgm", message=message)
        return XidEvent(gap_start, info.node, gpu, code, end=t, source=GAP_SOURCE, message=message)

    def state_dict(self) -> dict[str, np.ndarray]:
        """Last observed values by series column and the watched nodes."""
        nodes = sorted(self._node_ids)
        ids = [self._node_ids[n] for n in nodes]
        return {
            "columns": np.asarray(self._columns, dtype=np.int64),
            "prev": self._prev.copy(),
            "prev_t": self._prev_t.copy(),
            "interval": self._interval.copy(),
            "nodes": np.asarray(sorted(self._nodes_seen), dtype=np.str_),
            "node_names": np.asarray(nodes, dtype=np.str_),
            "node_t": self._node_t[ids],
            "node_interval": self._node_interval[ids],
        }

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        self._sync()
        where = {c: i for i, c in enumerate(self._columns)}
        n = state["columns"].shape[0]
        times = state.get("prev_t", np.full(n, np.nan))  # states from before session 11
        intervals = state.get("interval", np.full(n, np.nan))
        for column, value, at, interval in zip(
            state["columns"].tolist(), state["prev"].tolist(), times.tolist(),
            intervals.tolist(), strict=True,
        ):  # fmt: skip
            i = where.get(int(column))
            if i is not None:
                self._prev[i], self._prev_t[i], self._interval[i] = value, at, interval
        self._nodes_seen.update(str(n) for n in state["nodes"].tolist())
        names = state.get("node_names", np.zeros(0, dtype=np.str_)).tolist()
        at_node = state.get("node_t", np.zeros(0)).tolist()
        iv_node = state.get("node_interval", np.zeros(0)).tolist()
        for name, at, interval in zip(names, at_node, iv_node, strict=True):
            node = self._node_ids.get(str(name))
            if node is not None:
                self._node_t[node], self._node_interval[node] = at, interval
        self._refresh_watched()


def is_failure(event: XidEvent, catalog: XidCatalog) -> bool:
    """Whether the event counts as a GPU failure: the one rule for XIDs of every source (the
    DCGM gauge, the kernel log, an events file). An XID 154's recovery action, named in its
    ``message``, decides."""
    rule = catalog.get(event.xid)
    if rule is None:
        return catalog.unknown.failure
    action = rule.action_in(event.message)
    return rule.failure if action is None else action.failure


def dedupe_episodes(
    events: Iterable[XidEvent], catalog: XidCatalog, window_s: float | None = None
) -> list[XidEvent]:
    """Merge events into episodes, sorted by time.

    Per (node, gpu, xid), an event within ``window_s`` (default: the catalog's
    ``episode_window_s``) of the episode's last event extends it (``end`` = last event time).
    A code with ``follows_within_s`` (45) arriving that soon after an event of another code on
    the same (node, gpu) joins that episode instead of starting one. A ``recovery`` code closes
    the open episodes of its (node, gpu) and is kept as its own (non-failure) episode.
    An XID the gauge showed after a gap (``XidExtractor``: stamped at the gap's start, ``end``
    when seen) gives way to an event of the same (node, gpu, code) timed within that span (a
    kernel log's, an events file's): the exact time heads the episode, not the gap's start.
    """
    window = catalog.episode_window_s if window_s is None else window_s
    events = list(events)
    exact: dict[tuple[str, str | None, int], list[float]] = {}
    for ev in events:
        if ev.source != GAP_SOURCE:
            exact.setdefault((ev.node, ev.gpu, ev.xid), []).append(ev.time)
    events = [
        ev
        for ev in events
        if ev.source != GAP_SOURCE
        or not any(
            ev.time <= t <= (ev.end or ev.time) for t in exact.get((ev.node, ev.gpu, ev.xid), ())
        )
    ]
    episodes: list[_Episode] = []
    open_by_key: dict[tuple[str, str | None, int], _Episode] = {}
    latest: dict[tuple[str, str | None], _Episode] = {}  # (node, gpu) -> its latest episode
    for event in sorted(events, key=lambda e: (e.time, e.node, e.gpu or "", e.xid)):
        entity = (event.node, event.gpu)
        rule = catalog.get(event.xid)
        if rule is not None and rule.recovery:
            for key in [k for k in open_by_key if k[:2] == entity]:
                del open_by_key[key]
            latest.pop(entity, None)
            episodes.append(_Episode(event, event.time))
            continue
        if rule is not None and rule.follows_within_s is not None:
            before = latest.get(entity)
            if (
                before is not None
                and before.head.xid != event.xid
                and event.time - before.last <= rule.follows_within_s
            ):
                before.last = event.time
                continue
        key = (event.node, event.gpu, event.xid)
        episode = open_by_key.get(key)
        if episode is not None and event.time - episode.last <= window:
            episode.last = event.time
            continue
        episode = _Episode(event, event.time)
        episodes.append(episode)
        open_by_key[key] = latest[entity] = episode
    return [episode.event() for episode in episodes]


@dataclass(slots=True)
class _Episode:
    head: XidEvent
    last: float

    def event(self) -> XidEvent:
        head = self.head
        end = head.end if self.last == head.time else max(self.last, head.end or self.last)
        return XidEvent(
            head.time,
            head.node,
            head.gpu,
            head.xid,
            end=end,
            source=head.source,
            message=head.message,
        )
