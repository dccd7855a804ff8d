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
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from .model import DCGM_BLANK_THRESHOLD, FloatArray, SeriesInfo, XidEvent
from .rules import XidCatalog
from .series import SeriesIndex

_GAUGE, _COUNT = 0, 1


class XidExtractor:
    """Turns frames into XidEvents. ``update`` is vectorized over the XID series only."""

    def __init__(self, index: SeriesIndex, catalog: XidCatalog) -> None:
        self.index = index
        self.catalog = catalog
        self._gauges = set(catalog.sources.gauge_metrics)
        self._counts = set(catalog.sources.count_metrics)
        self._synced = 0
        self._columns: list[int] = []
        self._kind: list[int] = []
        self._label_code: list[int] = []  # code from err_code/xid label, -1 if none
        self._infos: list[SeriesInfo] = []
        self._prev: FloatArray = np.empty(0)
        self._nodes_seen: set[str] = set()
        # Array forms of the lists above, rebuilt when series are added (not every tick), and
        # per XID series whether its node is already watched (so a tick only names new nodes).
        self._columns_arr = np.zeros(0, dtype=np.int64)
        self._gauge = np.zeros(0, dtype=bool)
        self._node_watched = np.zeros(0, dtype=bool)
        self.messages: dict[XidEvent, str] = {}  # err_msg of events that carried one

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
            if info.metric in self._gauges or info.metric in self._counts:
                self._columns.append(info.column)
                self._kind.append(_GAUGE if info.metric in self._gauges else _COUNT)
                self._label_code.append(self._label_code_of(info))
                self._infos.append(info)
        self._synced = len(infos)
        if self._prev.shape[0] < len(self._columns):
            grow = np.full(len(self._columns) - self._prev.shape[0], np.nan)
            self._prev = np.concatenate([self._prev, grow])
        self._columns_arr = np.asarray(self._columns, dtype=np.int64)
        self._gauge = np.asarray(self._kind, dtype=np.int64) == _GAUGE
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
            event = self._event(i, t, float(values[i]))
            if event is not None:
                events.append(event)
        prev[observed] = values[observed]
        newly = np.flatnonzero(observed & ~self._node_watched)
        if newly.size:  # a node seen for the first time (rare after the first tick)
            watched.update(self._infos[i].node for i in newly.tolist())
            self._refresh_watched()
        return events

    def _event(self, i: int, t: float, value: float) -> XidEvent | None:
        info = self._infos[i]
        code = self._label_code[i]
        if code < 0:
            if self._kind[i] == _COUNT or value != int(value) or value <= 0:
                return None  # a count without an xid label names no code
            code = int(value)
        event = XidEvent(t, info.node, info.gpu or None, code, source="dcgm")
        message = dict(info.context).get("err_msg", "")
        if message:
            self.messages[event] = message
        return event

    def state_dict(self) -> dict[str, np.ndarray]:
        """Last observed values by series column and the watched nodes."""
        return {
            "columns": np.asarray(self._columns, dtype=np.int64),
            "prev": self._prev.copy(),
            "nodes": np.asarray(sorted(self._nodes_seen), dtype=np.str_),
        }

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        self._sync()
        where = {c: i for i, c in enumerate(self._columns)}
        for column, value in zip(state["columns"].tolist(), state["prev"].tolist(), strict=True):
            i = where.get(int(column))
            if i is not None:
                self._prev[i] = value
        self._nodes_seen.update(str(n) for n in state["nodes"].tolist())
        self._refresh_watched()


def is_failure(event: XidEvent, catalog: XidCatalog, message: str = "") -> bool:
    """Whether the event counts as a GPU failure; a 154 message's recovery action decides."""
    rule = catalog.get(event.xid)
    if rule is None:
        return catalog.unknown.failure
    action = rule.action_in(message)
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
    """
    window = catalog.episode_window_s if window_s is None else window_s
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
        return XidEvent(head.time, head.node, head.gpu, head.xid, end=end, source=head.source)
