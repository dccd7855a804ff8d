"""The series index: a stable column per series (metric + normalized identity labels).

Columns are appended as series appear and never reused, so arrays aligned to the index only
grow. Raw wire keys (``name{labels}`` exactly as an exporter wrote them) map to columns with one
dict lookup; a raw key is split and normalized only the first time it is seen (per source
labels). Several raw spellings of one series (``Hostname`` vs ``hostname``, label order,
``exported_pod``) land in the same column.

A GPU series' workload (``workload``: its job or pod, a context label) changes without a new
column, and so does a cohort label that is a context label (``hpc_job``). The index keeps each
column's context as last seen for such a change (``grouping``) and lists the column in
``recontexted`` for the signal stage (GPU peers are the GPUs of one workload; a node follows
its cohort label): a scrape notices it when a key of the new workload first maps to the column
(``columns``); a dump, which holds every spelling from the start, schedules each change at the
sample that brings it (``schedule_context``) and the pipeline applies them tick by tick
(``apply_contexts``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from ..model import IntArray, Labels, SeriesInfo
from .labels import LabelRules, Normalized, grouping, normalize, without

Splitter = Callable[[str], tuple[str, Labels]]

# Raw keys the lookups may cache beyond two per series before they are cleared (see columns)
RAW_KEYS_SLACK = 100_000


@dataclass
class SeriesIndex:
    """Stable columns for series. Only grows; see the module docstring."""

    rules: LabelRules = field(default_factory=LabelRules)
    infos: list[SeriesInfo] = field(default_factory=list)
    capacity: int | None = None  # most series ``columns`` will add (see there)
    refused: int = 0  # keys ``columns`` refused because the index was full
    dropped: int = 0  # new series kept out by ``rules.drop`` (see ``add``)
    # nodes named by a scrape address -> the host's name (``host_names``; dumps set it)
    hosts: dict[str, str] = field(default_factory=dict)
    # nodes named by a dcgm-exporter pod, not resolved to their node (``pod_named_nodes``)
    pod_named: list[str] = field(default_factory=list)
    _by_identity: dict[tuple[str, Labels], int] = field(default_factory=dict)
    _by_raw: dict[Labels, dict[str, int]] = field(default_factory=dict)  # extra -> key -> col
    _cached_keys: int = 0  # entries in all of ``_by_raw``
    # identity without ``rules.relabel`` labels -> column (with such labels configured)
    _by_relabel_key: dict[tuple[str, Labels], int] = field(default_factory=dict)
    # columns a scrape relabelled (``columns``) since the signal stage last took them
    relabelled: list[int] = field(default_factory=list)
    # per target (its labels but ``rules.relabel``), the labels it was last scraped with
    _target_labels: dict[Labels, Labels] = field(default_factory=dict)
    # columns whose grouping changed (``set_context``) since the signal stage last took them
    recontexted: list[int] = field(default_factory=list)
    # a dump's context changes to come: (time, column, context), in time order
    _scheduled: deque[tuple[float, int, Labels]] = field(default_factory=deque)

    def __len__(self) -> int:
        return len(self.infos)

    def add(self, name: str, labels: Labels) -> int:
        """Column of the series ``name{labels}``, appending it if new; -1 for a series
        ``rules.drop`` keeps out (counted in ``dropped``; callers drop its samples)."""
        if self.rules.dropped(name, labels):
            self.dropped += 1
            return -1
        series = normalize(name, labels, self.rules, self.hosts)
        column = self._by_identity.get(series[:2])
        return self._append(series) if column is None else column

    def _append(self, series: Normalized) -> int:
        column = len(self.infos)
        self._register(SeriesInfo(column, *series))
        return column

    def _register(self, info: SeriesInfo) -> None:
        """``info`` as the index's next column, found by its identity and, with relabel
        labels configured, by its identity without them."""
        self.infos.append(info)
        self._by_identity[(info.metric, info.labels)] = info.column
        if self.rules.relabel:
            key = (info.metric, without(info.labels, self.rules.relabel))
            self._by_relabel_key.setdefault(key, info.column)

    def _known(self, series: Normalized) -> int | None:
        """Column of a scraped series the index knows, None for a new one. With
        ``rules.relabel`` labels, a series is known too when its identity differs from a
        known one's current identity only in those labels: the series relabelled (its node's
        targets were rewritten with the next job, or back to a former one, or got their
        first). The column then takes the new labels (noted in ``relabelled``) and keeps its
        place, so a live daemon's index does not grow with each job. Only scrapes relabel
        (``columns``): a dump holds every labelling of a series from the start, so ``add``
        gives each its column and the signal stage follows them in time (signals.py)."""
        metric, identity = series[:2]
        column = self._by_identity.get((metric, identity))
        if not self.rules.relabel:
            return column
        if column is None:
            column = self._by_relabel_key.get((metric, without(identity, self.rules.relabel)))
        if column is not None and self.infos[column].labels != identity:
            before = self.infos[column]
            self.infos[column] = SeriesInfo(column, *series)
            self._by_identity[(metric, identity)] = column
            self.relabelled.append(column)
            if grouping(self.infos[column], self.rules) != grouping(before, self.rules):
                self.recontexted.append(column)
        return column

    def set_context(self, column: int, context: Labels) -> bool:
        """Make ``context`` the column's (its series now carries these context labels); True,
        and noted in ``recontexted``, when its ``grouping`` (workload, cohort labels) changes."""
        info = self.infos[column]
        if info.context == context:
            return False
        new = replace(info, context=context)
        self.infos[column] = new
        if grouping(new, self.rules) == grouping(info, self.rules):
            return False
        self.recontexted.append(column)
        return True

    def schedule_context(self, time: float, column: int, context: Labels) -> None:
        """``set_context`` at ``time`` (a dump's change of workload; times non-decreasing)."""
        self._scheduled.append((time, column, context))

    def apply_contexts(self, until: float) -> None:
        """Apply the scheduled context changes up to ``until`` (a tick's time)."""
        queue = self._scheduled
        while queue and queue[0][0] <= until:
            _, column, context = queue.popleft()
            # noted even when the column's own workload stays: its GPU's team may have been
            # taken from another series' first spelling (a dump's index knows no times)
            if not self.set_context(column, context):
                self.recontexted.append(column)

    def _follow_context(self, column: int, series: Normalized) -> bool:
        """A scraped key of a known GPU column: the column takes its context; True when that
        brings another workload or cohort label value."""
        return bool(self.infos[column].gpu) and self.set_context(column, series[4])

    def _forget_spellings(
        self, lookup: dict[str, int], keys: Sequence[str], moved: set[int]
    ) -> None:
        """Drop the cached keys of ``moved`` columns but this scrape's: a return to a former
        workload's keys (a GPU idle again) must be split again to be noticed. One pass over
        the target's keys, on the rare scrape that brings a workload change."""
        current = set(keys)
        stale = [k for k, c in lookup.items() if c in moved and k not in current]
        for key in stale:
            del lookup[key]
        self._cached_keys -= len(stale)

    def column_of(self, name: str, labels: Labels) -> int | None:
        """Column of an already known series, or None."""
        metric, identity, *_ = normalize(name, labels, self.rules, self.hosts)
        return self._by_identity.get((metric, identity))

    def columns(
        self, keys: Sequence[str], split: Splitter, extra: Labels = (), *, essential: bool = False
    ) -> IntArray:
        """Columns of raw wire keys. ``extra`` labels (e.g. the target's instance/node) are
        added to every key's labels. As Prometheus does without honor_labels, a label the
        target sets wins and the exporter's own value is kept as ``exported_<name>``.

        Once the index holds ``capacity`` series, a key of a series not in it yet gets column
        -1 (the caller drops the sample) and is counted in ``refused``, unless ``essential``
        (scrape health): label churn cannot grow memory without bound. A key of a series
        ``rules.drop`` keeps out gets -1 too (counted in ``dropped``).

        Raw keys are cached, those of dropped series too (a live container's device is in
        every scrape). Keys also change without a new series (a context label such as a GPU's
        pod) or come with a series that is dropped, for as long as the process runs; once the
        cache holds more than two keys a series plus ``RAW_KEYS_SLACK`` it is cleared and
        refills from the next scrapes, each key split once more (a dropped one counted again).
        A GPU key that brings another workload to its column is noted (``_follow_context``)
        and the column's other cached keys are forgotten (``_forget_spellings``)."""
        if self.rules.relabel:
            # the target's labels changed (its node's next job): its keys are looked at again
            target = without(extra, self.rules.relabel)
            if self._target_labels.setdefault(target, extra) != extra:
                self._target_labels[target] = extra
                self._cached_keys -= len(self._by_raw.pop(extra, {}))
        lookup = self._by_raw.get(extra)
        if lookup is None:
            lookup = self._by_raw[extra] = {}
        else:
            try:  # every key seen before, the steady state of a scrape: one pass in C
                return np.fromiter(map(lookup.__getitem__, keys), np.int64, len(keys))
            except KeyError:
                pass
        out = np.empty(len(keys), dtype=np.int64)
        moved: set[int] = set()  # GPU columns whose grouping this scrape changed
        for i, key in enumerate(keys):
            column = lookup.get(key)
            if column is None:
                name, labels = split(key)
                if extra:
                    mine = dict(extra)
                    labels = (
                        tuple((f"exported_{k}", v) if k in mine else (k, v) for k, v in labels)
                        + extra
                    )
                if not essential and self.rules.dropped(name, labels):
                    column = -1  # cached: the key is in every scrape while its device lives
                    self.dropped += 1
                else:
                    series = normalize(name, labels, self.rules, self.hosts)
                    known = self._known(series)
                    full = self.capacity is not None and len(self.infos) >= self.capacity
                    if known is None and full and not essential:
                        self.refused += 1  # not cached: the lookup must not grow either
                        out[i] = -1
                        continue
                    if known is None:
                        column = self._append(series)
                    else:
                        column = known
                        if self._follow_context(column, series):
                            moved.add(column)
                lookup[key] = column
                self._cached_keys += 1
            out[i] = column
        if moved:
            self._forget_spellings(lookup, keys, moved)
        if self._cached_keys > 2 * len(self.infos) + RAW_KEYS_SLACK:
            self._by_raw.clear()
            self._cached_keys = 0
        return out

    def nodes(self) -> list[str]:
        return sorted({info.node for info in self.infos if info.node})

    def extend_from(self, infos: Iterable[SeriesInfo]) -> None:
        """Re-create columns in order (restoring a saved index or a dump cache)."""
        for info in infos:
            if info.column != len(self.infos):
                raise ValueError(f"series column {info.column} out of order")
            self._register(info)
