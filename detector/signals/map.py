"""The signal stage: frame values (one per series) -> signal values (one per signal column).

Every series the catalog scores becomes one signal column (first matching rule wins, see
``rules.SignalCatalog.classify``); presence signals add computed columns per entity. An agent's
summary series (``config.SUMMARY_SIGNAL_METRIC``) is the column of the rule it names. Columns are
only appended, in index order, so a restored index rebuilds the same columns. One exception: a
series whose identity differs from a mapped one's only in its cohort labels (the scheduler
relabelled the node's targets for its next job) gets no column of its own; it feeds
the mapped series' column once it is observed while that one is not (``_follow_relabels``), so
the column keeps its history across jobs. (That is a dump's case, which holds every labelling
from the start; a live scrape's relabelled series keeps its index column, series.py.)

Each GPU column carries its GPU's team (``ColumnLayout.team``): the GPU's workload, its job or
pod (``series.workload``), so that GPU peers are the GPUs of one node running one job. A GPU
moves when the index reports a new workload on one of its series (``recontexted``), in the
``sync`` of that tick; so does its node when the change is in a cohort label (``hpc_job``).
Where no label names a GPU's workload, its power's co-movement with the node's other GPUs
and its utilization may (team_inference.py: gpu_comovement.py and gpu_activity.py, fed each
tick by ``compute``; their moves are applied at the next sync).

DCGM's blank sentinel (values near 2**63) reads as not observed. NaN means not observed. So
does a target's scrape that repeats its previous one byte for byte (dcgm-exporter serving its
cached collection, see repeats.py), for up to ``repeat_hold_s`` (None: every scrape observed).

This module decides which columns exist and what each reads (the column table:
signal_columns.py; GPU teams: gpu_teams.py; node cohorts: node_cohorts.py); the per-tick
arithmetic, and what each transform computes (level, rate, edge, ratio, presence, frozen
targets), is signal_values.py's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Protocol

import numpy as np

from ..config import SUMMARY_SIGNAL_METRIC, SignalCatalog, counter_family, other_spelling
from ..model import DCGM_BLANK_THRESHOLD, BoolArray, ColumnLayout, FloatArray, IntArray, SeriesInfo
from ..series import SeriesIndex, without
from .columns import FROZEN, GPU_COUNT, LEVEL, MISSING, RATE, RATIO, TRANSFORM, SignalColumns
from .gpu_teams import GpuTeams
from .node_cohorts import NodeCohorts
from .repeats import RepeatedScrapes, target_key
from .team_inference import TeamInference
from .values import frozen_values, known_per_gpu, presence_values, retire_replaced, transformed

# Ticks with GPU data in a row a GPU must be gone for before it counts as vanished
# (``SignalMap._note_vanished``): definitive evidence within two scrape intervals.
CONFIRM_TICKS = 2


class SignalMap:
    """Maps the series of ``index`` onto signal columns and computes their values per tick."""

    def __init__(
        self,
        catalog: SignalCatalog,
        index: SeriesIndex,
        *,
        metric_types: Mapping[str, str] | None = None,
        repeat_hold_s: float | None = 60.0,
    ) -> None:
        self.catalog = catalog
        self.repeats = None if repeat_hold_s is None else RepeatedScrapes(repeat_hold_s)
        self.index = index
        self.metric_types = metric_types if metric_types is not None else {}
        self.cohorts = NodeCohorts(index.rules)
        self._cohorts_moved = False  # since the last sync
        self._synced = 0
        self._presence = {rule.name: rule for rule in catalog.presence_rules()}
        # Per signal column (grown in sync, frozen to arrays lazily).
        self.columns = SignalColumns()
        self._unresolved: dict[int, tuple[str, tuple[tuple[str, str], ...]]] = {}
        self._gpu_entities: dict[tuple[str, str], int] = {}  # (node, gpu label) -> entity id
        self._gpu_entity_node: list[int] = []  # entity id -> node id
        self.teams = GpuTeams(index.rules)  # GPU peers are the GPUs of one node and one team
        gpu_signals = [r.name for r in catalog.signals if r.entity == "gpu"]
        self.inference = TeamInference(index.rules, gpu_signals, self.teams)
        self.comoving, self.activity = self.inference.comoving, self.inference.activity
        self._entity_columns: dict[int, list[int]] = {}  # entity id -> its signal columns
        self._series_gpu_entity: list[int] = []  # per index series: entity id or -1
        # per index series on a GPU: its (entity, metric) slot id, else -1 (_retire_replaced)
        self._series_slot: list[int] = []
        self._slot_ids: dict[tuple[int, str], int] = {}
        self._count_nodes: set[int] = set()
        self._frozen_nodes: set[str] = set()
        # With cohort labels: series identities without them -> the signal column of the first
        # such series; and the (series, column) pairs of the series that came after it, under
        # another value of a cohort label (see _is_relabel, _follow_relabels).
        self._relabel_keys: dict[tuple[str, tuple[tuple[str, str], ...]], int] = {}
        self._aliases: list[tuple[int, int]] = []
        self._denom_metric: dict[int, str] = {}  # RATIO columns: their denominator's metric
        # Node-level series no rule names, while default_rule.node_level is off: held back per
        # node until the node has too few peers (map_unnamed), then mapped like the others.
        self._held: dict[str, list[SeriesInfo]] = {}
        self._unnamed_nodes: set[str] = set()
        self._new_held_node = False  # since the last sync
        # Tick state.
        self._prev_value: FloatArray = np.empty(0)
        self._prev_time: FloatArray = np.empty(0)
        self._prev_den: FloatArray = np.empty(0)  # RATIO: the denominator's previous value
        self._seen: BoolArray = np.zeros(0, dtype=bool)  # per index series: ever observed
        self._known: FloatArray | None = None  # per GPU entity: its series in _seen (cache)
        # Definitive structural evidence, with the health_gpu_count rule: per GPU entity
        # for how many of its node's ticks with GPU data in a row it has been gone; the GPUs
        # confirmed gone this tick (CONFIRM_TICKS in a row).
        self._gone_ticks: FloatArray = np.zeros(0)
        self.vanished: IntArray = np.zeros(0, dtype=np.int64)
        # restored state for columns not mapped yet
        self._pending: dict[int, tuple[float, float, float]] = {}
        self._arrays: dict[str, np.ndarray] | None = None
        self._layout: ColumnLayout | None = None

    # ------------------------------------------------------------------ building columns
    def __len__(self) -> int:
        return len(self.columns)

    @property
    def signal_names(self) -> list[str]:
        return self.columns.signal_names

    @property
    def node_names(self) -> list[str]:
        return self.columns.node_names

    def _regroup(self, nodes: set[str]) -> None:
        """Give every mapped column of ``nodes`` its node's cohort as it is now (work in
        their columns only: a first GPU series moves its node as a fleet's index fills)."""
        if not nodes:
            return
        moved = False
        columns = self.columns
        for node in nodes:
            node_id = columns.known_node(node)
            if node_id < 0:
                continue
            cohort = self.cohorts.id_of(node)
            for col in columns.node_columns.get(node_id, ()):
                if columns.cohort[col] != cohort:
                    columns.cohort[col] = cohort
                    moved = True
        if moved:
            self._layout = None
            self._cohorts_moved = True

    def _declared_type(self, metric: str) -> str | None:
        types = self.metric_types
        found = types.get(metric)
        if found is not None:
            return found
        for suffix in ("_total", "_sum", "_count"):
            if metric.endswith(suffix):
                family = types.get(metric[: -len(suffix)])
                if family in ("histogram", "summary", "gaugehistogram") and suffix != "_total":
                    return "counter"
                if family is not None:
                    return family
        return None

    def _append(
        self, info: SeriesInfo, series: int, kind: int, name: str, gpu: str | None, **rule: Any
    ) -> None:
        entity = -1 if gpu is None else self._gpu_entities.get((info.node, gpu), -1)
        cohort, team = self.cohorts.id_of(info.node), self.teams.of.get(entity, 0)
        col = self.columns.append(series, kind, name, info.node, gpu, cohort, team, **rule)
        if entity >= 0:
            self._entity_columns.setdefault(entity, []).append(col)
        if kind == RATIO:
            self._unresolved[col] = (str(rule["denominator"]), info.labels)
            self._denom_metric[col] = str(rule["denominator"])

    def _add_frozen(self, info: SeriesInfo) -> None:
        """The node's ``health_targets_frozen_fraction`` column, after its first scored
        column that an exporter (not the scraper) sends."""
        frozen = self._presence.get("health_targets_frozen_fraction")
        if not info.node or info.node in self._frozen_nodes:
            return
        if frozen is None or self.repeats is None or target_key(info) is None:
            return
        self._frozen_nodes.add(info.node)
        node_id = self.columns.known_node(info.node)
        shape = {"direction": frozen.direction, "weight": frozen.weight}
        self._append(info, -1, FROZEN, frozen.name, None, entity_id=node_id, **shape)

    def _follow_contexts(self) -> bool:
        """Follow the series whose job or pod changed (``SeriesIndex.recontexted``): their
        GPU moves to that workload's team (a node shared by several jobs compares each GPU
        only with the GPUs of its own job), and their node to the cohort a cohort label
        among them names (``hpc_job``). True when a GPU or a node moved."""
        changed, self.index.recontexted = self.index.recontexted, []
        columns = sorted(c for c in set(changed) if c < self._synced)
        self._learn_cohorts(np.asarray(columns, dtype=np.int64))
        moved, self._cohorts_moved = self._cohorts_moved, False
        infos = self.index.infos
        nodes: set[int] = set()
        for column in columns:
            info = infos[column]
            entity = self._gpu_entities.get((info.node, info.gpu), -1) if info.gpu else -1
            if entity < 0:
                continue  # not mapped yet: mapped with its context as it is then
            self._set_team(entity, self.teams.move(entity, info), nodes)
        return self._note_splits(nodes) or moved

    def _follow_inferred(self) -> bool:
        """Move the GPUs whose team co-movement or activity moved (team_inference.py);
        True when one moved."""
        nodes: set[int] = set()
        for entity, team in self.inference.moves():
            self._set_team(entity, team, nodes)
        return self._note_splits(nodes)

    def _set_team(self, entity: int, team: int | None, nodes: set[int]) -> None:
        """Give the GPU's columns its new ``team`` (None: it stays), noting its node."""
        if team is None:
            return
        nodes.add(self._gpu_entity_node[entity])
        for col in self._entity_columns.get(entity, ()):
            self.columns.team[col] = team
        self._layout = None

    def _note_splits(self, nodes: set[int]) -> bool:
        """After the GPUs of ``nodes`` moved (all of them: a node's GPUs moving together are
        not split): note the split ones; True when there were any."""
        for node_id in nodes:
            self.teams.note_split(node_id, self.node_names[node_id])
        return bool(nodes)

    def sync(self, t: float | None = None) -> bool:
        """Map series added to the index since the last sync, and with ``t`` (the tick's time)
        apply a dump's workload changes up to then (``_follow_contexts``); True when columns
        were added or moved to another cohort or team (the layout changed)."""
        before = len(self.columns)
        infos = self.index.infos
        moved, self._cohorts_moved = self._cohorts_moved, False
        if t is not None:
            self.index.apply_contexts(t)
        for info in infos[self._synced :]:
            self._map_series(info)
        if self._synced < len(infos):  # per-series arrays (presence) grew too
            self._arrays = None
        self._synced = len(infos)
        if self.index.recontexted:  # after mapping: a new GPU's team is its context's
            moved = self._follow_contexts() or moved
        if t is not None:
            moved = self._follow_inferred() or moved
        self.teams.recount()
        if self.repeats is not None:
            self.repeats.sync(infos)
        if self._seen.shape[0] < len(infos):
            self._seen = np.concatenate(
                [self._seen, np.zeros(len(infos) - self._seen.shape[0], dtype=bool)]
            )
        added = len(self.columns) - before
        self._resolve_denominators()
        self._columns_added(before)
        held, self._new_held_node = self._new_held_node, False
        return added > 0 or moved or held

    def _columns_added(self, before: int) -> None:
        """Grow the per-column tick state for the columns from ``before`` on (restored values
        where a saved state had them)."""
        added = len(self.columns) - before
        if not added:
            return
        fill = np.full(added, np.nan)
        self._prev_value = np.concatenate([self._prev_value, fill])
        self._prev_time = np.concatenate([self._prev_time, fill])
        self._prev_den = np.concatenate([self._prev_den, fill])
        for col in range(before, len(self.columns)):
            restored = self._pending.pop(self.columns.series[col], None)
            if restored is not None and self.columns.series[col] >= 0:
                self._prev_value[col], self._prev_time[col], self._prev_den[col] = restored
        self._arrays = None
        self._layout = None

    def _learn_cohorts(self, series: IntArray) -> None:
        """Learn the nodes' cohorts from ``series`` (index columns, in the order their values
        were first sent: node_cohorts.py) and move the columns of the nodes that changed; the
        next ``sync`` reports the changed layout. A live scrape's relabelled series keep their
        columns (``SeriesIndex.columns``) and are learnt again from their new labels."""
        infos = self.index.infos
        self._regroup(self.cohorts.learn(infos[i] for i in series.tolist()))

    def _resolve_denominators(self) -> None:
        """Pair ratio columns with their denominator series once those are in the index."""
        for col, (metric, labels) in list(self._unresolved.items()):
            found = self.index.column_of(metric, labels)
            if found is None:  # the counter spelled the other way (rules.other_spelling)
                found = self.index.column_of(other_spelling(metric), labels)
            if found is not None:
                self.columns.denom[col] = found
                del self._unresolved[col]
                self._arrays = None

    def _map_series(self, info: SeriesInfo) -> None:
        self.cohorts.note_series(info)
        entity = -1
        verdict = self.catalog.classify(info.metric)
        if info.gpu:
            key = (info.node, info.gpu)
            entity = self._gpu_entities.get(key, -1)
            if entity < 0:
                entity = self._gpu_entities[key] = len(self._gpu_entity_node)
                node_id = self.columns.node_id(info.node)
                self._gpu_entity_node.append(node_id)
                self.teams.add_gpu(entity, node_id, info)
                self.inference.add_gpu(entity, node_id)
                self._add_presence(info, entity, node_id)
                first = self.cohorts.add_gpu_node(info.node)
                if first is not None:  # a new GPU node; the first moves all others
                    self._regroup(set(self.node_names) if first else {info.node})
        # XID series come and go by design (a windowed count exists only while an XID is in
        # its window): they are ground truth, not telemetry a GPU loses, so presence skips them.
        truth = not isinstance(verdict, str) and verdict.truth is not None
        self._series_gpu_entity.append(-1 if truth else entity)
        # one slot for both spellings of a counter: a series renamed X -> X_total (its
        # scrape turned OpenMetrics) replaces its predecessor
        family = counter_family(info.metric)
        slot = (
            -1
            if truth or entity < 0
            else self._slot_ids.setdefault((entity, family), len(self._slot_ids))
        )
        self._series_slot.append(slot)
        if info.metric == SUMMARY_SIGNAL_METRIC and not info.gpu:
            self._map_summary(info)
            return
        if verdict in ("ignore", "off"):
            return
        if verdict == "default":
            node_level = self.catalog.default_rule.node_level
            if not info.gpu and not node_level and info.node not in self._unnamed_nodes:
                if info.node:  # held back until its node has too few peers (map_unnamed)
                    if info.node not in self._held and self.columns.known_node(info.node) < 0:
                        self._new_held_node = True  # a node without columns: cohorts grew
                    self._held.setdefault(info.node, []).append(info)
                return
            self._append_default(info)
            return
        assert not isinstance(verdict, str)
        if verdict.truth is not None:  # ground truth (XID): read by xids.py, never scored
            return
        if self._is_relabel(info):
            return
        gpu = info.gpu if verdict.entity == "gpu" and info.gpu else None
        fields: dict[str, Any] = {
            "direction": verdict.direction,
            "weight": verdict.weight,
            "scale": verdict.scale,
            "resolution": verdict.resolution,
            "log_unit": verdict.log_unit,
            "denominator": verdict.denominator,
        }
        self._append(info, info.column, TRANSFORM[verdict.transform], verdict.name, gpu, **fields)
        self._add_frozen(info)

    def _map_summary(self, info: SeriesInfo) -> None:
        """A node-level column an agent computed (``config.SUMMARY_SIGNAL_METRIC``): the
        column of the rule its ``signal`` label names, reading the value as it is (the agent
        applied the rule's transform, scale and log unit). A name no rule here knows is
        scored as a node-level series no rule names: by the default rule when
        ``default_rule.node_level`` is on, else not at all (no column)."""
        signal = dict(info.labels).get("signal", "")
        rule = self.catalog.rule_named(signal)
        if rule is None or rule.entity != "node" or rule.truth is not None or rule.given:
            default = self.catalog.default_rule
            if not default.enabled or not default.node_level or not signal:
                return
            self._append(
                info, info.column, LEVEL, signal, None,
                direction=default.direction, weight=default.weight,
            )  # fmt: skip
            return
        fields = {"direction": rule.direction, "weight": rule.weight, "resolution": rule.resolution}
        self._append(info, info.column, LEVEL, rule.name, None, **fields)

    def _append_default(self, info: SeriesInfo) -> None:
        """The column of a series no rule names (level for gauges, rate for counters)."""
        rule = self.catalog.default_rule
        if self._is_relabel(info):
            return
        counter = self.catalog.is_counter(info.metric, self._declared_type(info.metric))
        kind = RATE if counter else LEVEL
        own_past = not info.gpu and not rule.node_level  # a node without peers (map_unnamed)
        self._append(
            info,
            info.column,
            kind,
            self.catalog.default_signal_name(info.metric),
            info.gpu or None,
            direction=rule.direction,
            weight=rule.own_past_weight if own_past else rule.weight,
        )
        self._add_frozen(info)

    def map_unnamed(self, nodes: Iterable[str]) -> bool:
        """Give the node-level series that no rule names of ``nodes`` their columns, now and
        from now on, although ``default_rule.node_level`` is off: the pipeline asks for the
        nodes with too few peers, whose own past scores those columns (peers cannot). Until
        then they are held back (a fleet does not pay for columns nothing scores). True when
        columns were added (the layout changed)."""
        before = len(self.columns)
        for node in nodes:
            if node in self._unnamed_nodes:
                continue
            self._unnamed_nodes.add(node)
            for info in self._held.pop(node, []):
                self._append_default(info)
        self._columns_added(before)
        return len(self.columns) > before

    def node_cohort_ids(self) -> dict[str, int]:
        """Every node seen, with columns or only held-back series: its cohort id now."""
        nodes = dict.fromkeys((*self.node_names, *self._held))
        return {node: self.cohorts.id_of(node) for node in nodes}

    @property
    def unnamed_nodes(self) -> frozenset[str]:
        """The nodes whose unnamed node-level series have columns (``map_unnamed``)."""
        return frozenset(self._unnamed_nodes)

    def _is_relabel(self, info: SeriesInfo) -> bool:
        """Whether ``info`` is a series already mapped under another value of a cohort label
        in its identity, or without one (the scheduler relabelled its target with the node's
        next job): it then feeds that series' signal column from its first observation on
        (``_follow_relabels``) instead of a column of its own. The first series of an
        identity without cohort labels is recorded and gets its column as usual (False)."""
        if not self.cohorts.labels:
            return False
        key = (info.metric, without(info.labels, self.cohorts.labels))
        col = self._relabel_keys.setdefault(key, len(self.columns))
        if col == len(self.columns):
            return False
        self._aliases.append((info.column, col))  # sync rebuilds the tick arrays
        return True

    def _follow_relabels(self, a: dict[str, np.ndarray], values: FloatArray) -> None:
        """Switch a signal column to the series that now carries it: one of its relabelled
        series observed while the series it reads is not. The column keeps its state (the
        previous value for rates, every scorer's history), so a node that moves to its next
        job under a new label value does not warm up again; its cohort moves with the new
        series' first observation (``_learn_cohorts``), and with a switch when no series of the
        node carries its present cohort's label value that tick any more, so a node back in a
        former job (a -> b -> a, whose series were all sent before) rejoins that cohort."""
        pairs = a["alias_pairs"]
        alias, col = pairs[:, 0], pairs[:, 1]
        now = ~np.isnan(values[alias]) & np.isnan(values[a["series"][col]])
        switched = np.flatnonzero(now)
        for k in switched.tolist():
            self._switch(k)
        if not switched.size:
            return
        infos, kept = self.index.infos, set()
        for node in {infos[s].node for s in alias[switched].tolist()}:
            carrying = self.cohorts.carrying(node)
            if carrying and not np.isnan(values[carrying]).all():
                kept.add(node)  # its present cohort's label is still sent: no move
        back = [s for s in alias[switched].tolist() if infos[s].node not in kept]
        self._learn_cohorts(np.asarray(back, dtype=np.int64))

    def _switch(self, k: int) -> None:
        """Make alias ``k``'s series its column's source (the former source its alias)."""
        series, col = self._aliases[k]
        if self.columns.series[col] == series:
            return
        self._aliases[k] = (self.columns.series[col], col)
        self.columns.series[col] = series
        metric = self._denom_metric.get(col)
        if metric is not None:  # the denominator is the new series' sibling
            self.columns.denom[col] = -1
            self._unresolved[col] = (metric, self.index.infos[series].labels)
            self._resolve_denominators()
        self._arrays = None

    def _add_presence(self, info: SeriesInfo, entity: int, node_id: int) -> None:
        missing = self._presence.get("health_series_missing_fraction")
        if missing is not None:
            fields = {"direction": missing.direction, "weight": missing.weight}
            self._append(info, -1, MISSING, missing.name, info.gpu, entity_id=entity, **fields)
        count = self._presence.get("health_gpu_count")
        if count is not None and node_id not in self._count_nodes:
            self._count_nodes.add(node_id)
            fields = {"direction": count.direction, "weight": count.weight}
            self._append(info, -1, GPU_COUNT, count.name, None, entity_id=node_id, **fields)

    # ------------------------------------------------------------------ per tick
    def _tick_arrays(self) -> dict[str, np.ndarray]:
        """Index arrays derived from the column lists, rebuilt only when columns are added
        (building them per tick cost more than the arithmetic)."""
        if self._arrays is None:
            series_entity = np.asarray(self._series_gpu_entity, dtype=np.int64)
            gpu_series = np.flatnonzero(series_entity >= 0)
            self._known = None
            columns = self.columns
            self._arrays = {
                **columns.arrays(),
                "series_entity": series_entity,
                "gpu_series": gpu_series,
                "gpu_series_entity": series_entity[gpu_series],
                "series_slot": np.asarray(self._series_slot, dtype=np.int64),
                "entity_series": np.bincount(
                    series_entity[gpu_series], minlength=len(self._gpu_entity_node)
                ),
                "entity_node": np.asarray(self._gpu_entity_node, dtype=np.int64),
                "target_node": np.asarray(
                    [columns.known_node(node) for node in self._target_nodes()], dtype=np.int64
                ),
                "alias_pairs": np.asarray(self._aliases, dtype=np.int64).reshape(-1, 2),
                **self.inference.columns(
                    len(self._gpu_entity_node), self._entity_columns, columns.signal_names,
                    columns.signal,
                ),
            }  # fmt: skip
        return self._arrays

    def compute(self, t: float, frame_values: FloatArray) -> FloatArray:
        """Signal values for the tick at ``t`` (syncs first if the index grew)."""
        if self._synced < len(self.index):
            self.sync()
        a = self._tick_arrays()
        n_series = self._synced
        if self.index.relabelled:  # scraped series the index relabelled: their new labels
            relabelled = np.unique(np.asarray(self.index.relabelled, dtype=np.int64))
            self.index.relabelled.clear()
            self._learn_cohorts(relabelled[relabelled < n_series])
        # One slot past the series holds NaN, so computed columns (series -1) gather NaN.
        padded = np.empty(n_series + 1)
        width = min(n_series, frame_values.shape[0])
        padded[:width] = frame_values[:width]
        padded[width:] = np.nan
        values = padded[:n_series]
        with np.errstate(invalid="ignore"):
            values[np.abs(values) >= DCGM_BLANK_THRESHOLD] = np.nan
        if self.repeats is not None:  # a cached scrape is no observation: as if lost
            self.repeats.blank(t, values)
        if a["alias_pairs"].shape[0]:
            self._follow_relabels(a, values)
            a = self._tick_arrays()

        cur = padded[a["series"]]
        observed = ~np.isnan(cur)
        prev, prev_t = self._prev_value, self._prev_time
        out = transformed(a, t, cur, observed, values, prev, prev_t, self._prev_den)
        missing = np.isnan(values)
        seen = self._seen[:n_series]
        sent = ~missing
        first = seen < sent
        if first.any():  # a series observed for the first time
            self._learn_cohorts(np.flatnonzero(first))
            retire_replaced(a["series_slot"], first, missing, seen)
            seen |= sent
            self._known = None
        if self._known is None:
            self._known = known_per_gpu(a, self._seen)
        gone = presence_values(a, missing, self._seen, self._known, len(self.node_names), out)
        self._note_vanished(gone)
        if a["frozen"].size:
            repeats = self.repeats
            scraped, frozen = (None, None) if repeats is None else (repeats.scraped, repeats.frozen)
            frozen_values(a, scraped, frozen, len(self.node_names), out)

        self.inference.observe(t, out, a)

        np.copyto(prev, cur, where=observed)
        np.copyto(prev_t, t, where=observed)
        computed = a["computed"]  # observed when they have a value (last_observed)
        prev_t[computed[~np.isnan(out[computed])]] = t
        return out

    def _note_vanished(self, gone: FloatArray) -> None:
        """``vanished``: the GPU entities gone (``presence_values``) at ``CONFIRM_TICKS`` of
        their node's ticks with GPU data in a row, this tick the last: a GPU's series all gone
        from a page that still answered with other GPUs (fell off the bus), within two
        scrape intervals of the fault. One tick is not enough: remote-written samples of one
        scrape can arrive over two ticks, and a GPU whose samples come a tick late is not
        gone. Off without the ``health_gpu_count`` rule (the signal that names it). A node
        with no GPU data this tick (target down, lost scrape, exporter restarting) keeps its
        GPUs' count: a page back with the same GPUs shows nothing new, one back without a GPU
        counts on."""
        if "health_gpu_count" not in self._presence:
            return
        n = gone.shape[0]
        if self._gone_ticks.shape[0] < n:
            grow = np.zeros(n - self._gone_ticks.shape[0])
            self._gone_ticks = np.concatenate((self._gone_ticks, grow))
        ticks = self._gone_ticks[:n]
        known = ~np.isnan(gone)
        ticks[known] = np.where(gone[known] > 0, ticks[known] + 1, 0.0)
        self.vanished = np.flatnonzero(known & (ticks == CONFIRM_TICKS))

    def vanished_gpus(self) -> list[tuple[str, str]]:
        """(node, gpu label) of each GPU in ``vanished``."""
        if not self.vanished.size:
            return []
        nodes, entities = self.node_names, self._gpu_entity_node
        labels = {entity: gpu for (_, gpu), entity in self._gpu_entities.items()}
        return [(nodes[entities[e]], labels[e]) for e in self.vanished.tolist()]

    def _target_nodes(self) -> list[str]:
        return [] if self.repeats is None else self.repeats.target_nodes()

    # ------------------------------------------------------------------ description
    @property
    def layout(self) -> ColumnLayout:
        """Per-column signal, node, gpu, cohort, direction and resolution (model.ColumnLayout)."""
        if self._layout is None:
            self._layout = self.columns.layout()
        return self._layout

    @property
    def cohort_names(self) -> list[str]:
        """Cohort id -> name (``ColumnLayout.cohort`` holds the ids)."""
        return self.cohorts.names

    @property
    def last_observed(self) -> FloatArray:
        """Per column, the time of its series' last observation, or for a computed column
        (presence, frozen targets) the last tick it had a value (NaN: never). The pipeline
        bridges a node's tick when a column with evidence on the previous tick has none now
        (``PipelineParams.bridge_missed_tick``). Read-only view, current after ``compute``."""
        view = self._prev_time.view()
        view.setflags(write=False)
        return view

    @property
    def weights(self) -> FloatArray:
        """Per-column fusion weight (read-only; cached until columns are added)."""
        if self._synced < len(self.index):
            self.sync()
        return self._tick_arrays()["weight"]

    def column_names(self, i: int) -> tuple[str, str, str | None, int]:
        """(signal name, node, gpu label or None, series column or -1 when computed)."""
        return self.columns.names(i)

    def series_columns(self) -> IntArray:
        """Per signal column, the series column it reads (-1 for computed columns)."""
        return np.asarray(self.columns.series, dtype=np.int64)

    # ------------------------------------------------------------------ persistence
    def state_dict(self) -> dict[str, np.ndarray]:
        """Previous values/times keyed by series column, so restarts keep their rates."""
        return {
            "series": self.series_columns(),
            "prev_value": self._prev_value.copy(),
            "prev_time": self._prev_time.copy(),
            "prev_den": self._prev_den.copy(),
            "seen": self._seen.copy(),
            "gone_ticks": self._gone_ticks.copy(),
            **_prefixed("repeats_", self.repeats),
            **self.inference.state_dict(),
        }

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        """Restore ``state_dict`` output; columns not mapped yet are restored when they are."""
        self.sync()
        saved = {int(x) for x in state["series"].tolist()}
        for k, (series, _) in enumerate(self._aliases):
            if series in saved:  # the column read that relabelled series when saved
                self._switch(k)
        where = {int(s): i for i, s in enumerate(self.columns.series) if s >= 0}
        dens = state.get("prev_den", np.full(state["series"].shape[0], np.nan)).tolist()
        for s, v, t, d in zip(
            state["series"].tolist(),
            state["prev_value"].tolist(),
            state["prev_time"].tolist(),
            dens,
            strict=True,
        ):
            if s < 0:
                continue
            col = where.get(int(s))
            if col is None:
                self._pending[int(s)] = (v, t, d)
            else:
                self._prev_value[col], self._prev_time[col], self._prev_den[col] = v, t, d
        seen = np.asarray(state["seen"], dtype=bool)
        if seen.shape[0] > self._seen.shape[0]:
            grown = np.zeros(seen.shape[0], dtype=bool)
            grown[: self._seen.shape[0]] = self._seen
            self._seen = grown
        self._seen[: seen.shape[0]] |= seen
        self._known = None
        if "gone_ticks" in state:
            self._gone_ticks = np.asarray(state["gone_ticks"], dtype=np.float64).copy()
        elif "gone_prev" in state:  # saved by one-tick confirmation: a gone GPU was told
            self._gone_ticks = CONFIRM_TICKS * np.asarray(state["gone_prev"], dtype=np.float64)
        self._learn_cohorts(np.flatnonzero(self._seen[: len(self.index)]))
        repeats = _unprefixed("repeats_", state)
        if self.repeats is not None and repeats:  # states saved before repeats.py have none
            self.repeats.load_state_dict(repeats)
        self.inference.load_state_dict(state)  # the moves apply at the next sync


class _Stateful(Protocol):
    def state_dict(self) -> dict[str, np.ndarray]: ...


def _prefixed(prefix: str, part: _Stateful | None) -> dict[str, np.ndarray]:
    """A helper's state under ``prefix`` (nothing when it is off)."""
    return {} if part is None else {prefix + k: v for k, v in part.state_dict().items()}


def _unprefixed(prefix: str, state: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The entries of ``state`` under ``prefix``, without it."""
    return {k[len(prefix) :]: v for k, v in state.items() if k.startswith(prefix)}
