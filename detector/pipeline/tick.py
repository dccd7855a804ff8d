"""One tick of scoring, no I/O: frame -> signals -> scorers -> fusion -> alert scores.

The same object serves the live daemon (wall clock) and replay (the data's clock), driven by
the shared tick loop (``detector.loop.TickLoop``), which decides alerts from what ``step``
returns. The caller owns the series index (ingest fills it) and hands over one ``Frame`` per
tick.

A node's alert score is the larger of its node-level fused score and its GPUs' fused scores;
``peak_evidence`` names the signals and the GPU that dominate a node at a tick. XIDs the data
shows (the sticky DCGM gauge) are returned with the tick for the loop to judge. A node whose
tick misses a column that carried evidence on the previous tick (a lost or cached scrape, an
exporter on a slower cadence) scores NaN for that tick, so its alert state neither ends nor
advances (``PipelineParams.bridge_missed_tick``).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..config import ScoringConfig, SignalCatalog, XidCatalog
from ..model import (
    BoolArray,
    ColumnLayout,
    FloatArray,
    Frame,
    Incident,
    IntArray,
    SeriesInfo,
    SignalScore,
    XidEvent,
)
from ..scorers import Scorer, touch, update_columns
from ..series import SeriesIndex
from ..signals import SignalMap
from .fusion import CommonMode, EntityMap, FusionParams, fuse, storm_columns, top_signals
from .xids import XidExtractor

OWN_PAST = "own_past"  # the scorer of peerless nodes' node-level columns (scorers/own_past.py)


@dataclass(frozen=True, slots=True)
class PipelineParams:
    fusion: FusionParams = field(default_factory=FusionParams)
    top_k: int = ScoringConfig().top_k  # the schema's default, written once there
    # A node tick is incomplete (alert score NaN: episodes keep their state) when a column that
    # carried evidence on the previous tick is unobserved on this one (a lost or cached scrape,
    # an exporter on a slower cadence): no new sample is no evidence that the node recovered,
    # nor that its deviation goes on. One missed tick is bridged, a second is not: a pending
    # alert must not reach its minimum duration across a gap on one tick's evidence.
    bridge_missed_tick: bool = True
    # An exporter page repeated byte for byte is no observation for up to this long, a frozen
    # exporter past it (signals.SignalMap, repeats.py); None: every scrape is an observation.
    repeat_hold_s: float | None = 60.0
    # Calibrated multipliers of the rules' fusion weights, by signal name (absent: 1).
    signal_weights: Mapping[str, float] = field(default_factory=dict)
    # A node whose cohort has fewer nodes than this (a single server, a node alone in its job)
    # has no peers to be judged against: its node-level columns that peers would score, and
    # its node-level series that no rule names, are scored against their own past by the
    # ``own_past`` scorer when the pipeline has one (``Pipeline._scorer_mask``). 0: off.
    own_past_min_peers: int = 0


@dataclass(frozen=True, slots=True)
class TickResult:
    time: float
    node_names: tuple[str, ...]
    node_score: FloatArray  # per node alert score in [0, 1]; NaN: nothing sent, or incomplete
    gpu_node: np.ndarray  # per GPU entity: node id
    gpu_label: tuple[str, ...]  # per GPU entity: gpu label
    gpu_score: FloatArray  # per GPU entity in [0, 1]; NaN when the GPU sent nothing
    xids: tuple[XidEvent, ...]  # XIDs the data showed this tick (the DCGM gauge)
    incidents: tuple[Incident, ...]
    column_z: FloatArray = field(default_factory=lambda: np.zeros(0))  # fused per-column scores
    # (node, gpu) with definitive structural evidence this tick: the GPU's series all gone
    # from a page its node's exporter still serves with other GPUs (SignalMap.vanished); the
    # node's alert fires at once (loop/alerts.py), as a failure XID's does.
    definitive: tuple[tuple[str, str | None], ...] = ()


class ScorerStage:
    """Each scorer on the columns its rules name, its scores in that scorer's full-width row
    (``scorers.base.update_columns``: the kernels read their columns from the full row and
    write the row themselves, other scorers gather and scatter). The rows are allocated once
    per layout and reused every tick (columns outside a scorer's subset stay 0), so ``run``'s
    result is valid until the next ``run``.

    A scorer's state is indexed by its columns' order of arrival (``subsets[name]``, its
    slots), which only grows at its end: columns are only appended, and a column that joins
    a scorer later (the own-past preset takes a node's columns when its cohort is too small)
    is appended to that scorer's slots. A column that leaves a scorer (the node gained peers)
    keeps its slot and is fed NaN (not observed: its state stays as it was) and scores 0."""

    def __init__(self, scorers: Sequence[Scorer]) -> None:
        self.scorers = list(scorers)
        self.subsets: dict[str, np.ndarray] = {}  # per scorer: its slots (columns, in order)
        self._idle: dict[str, np.ndarray] = {}  # per scorer: slot positions it no longer scores
        self._layouts: dict[str, ColumnLayout] = {}
        self._rows: dict[str, FloatArray] = {}

    def set_layout(self, applies: Mapping[str, BoolArray], layout: ColumnLayout) -> None:
        """``applies[name]``: mask of the columns scorer ``name`` is meant for."""
        for scorer in self.scorers:
            name = scorer.name
            wanted = np.flatnonzero(applies[name])
            slots = self.subsets.get(name, np.zeros(0, dtype=np.int64))
            if not np.array_equal(wanted[: slots.shape[0]], slots):  # joined or left mid-way
                slots = np.concatenate((slots, np.setdiff1d(wanted, slots)))
            else:
                slots = wanted
            self.subsets[name] = slots
            self._idle[name] = np.flatnonzero(~applies[name][slots])
        self._layouts = {name: layout.subset(idx) for name, idx in self.subsets.items()}
        self._rows = {name: np.zeros(len(layout)) for name in self.subsets}

    def restore_slots(self, slots: Mapping[str, np.ndarray]) -> None:
        """Slot orders saved with the scorers' state (``pipeline_state``), before the next
        ``set_layout``."""
        self.subsets.update({name: np.asarray(s, dtype=np.int64) for name, s in slots.items()})

    def run(self, t: float, x: FloatArray) -> dict[str, FloatArray]:
        """Every scorer's scores for the tick, full width (see the class docstring). The row
        is first read once in order (``kernels.touch``), so a row cold in cache streams in
        instead of being fetched line by line by the scorers' gathers."""
        if x.dtype == np.float64 and x.flags.c_contiguous:
            touch(x)
        for scorer in self.scorers:
            name = scorer.name
            slots, idle = self.subsets[name], self._idle[name]
            if not slots.size:
                continue
            if not idle.size:
                update_columns(scorer, t, x, slots, self._layouts[name], self._rows[name])
                continue
            part = x.take(slots)
            part[idle] = np.nan
            scores = scorer.update(t, part, self._layouts[name])
            scores[idle] = 0.0
            self._rows[name][slots] = scores
        return self._rows


class Pipeline:
    """Composes the scoring stages; see the module docstring."""

    def __init__(
        self,
        index: SeriesIndex,
        signals: SignalCatalog,
        xids: XidCatalog,
        scorers: Sequence[Scorer],
        params: PipelineParams | None = None,
    ) -> None:
        self.index = index
        self.params = params or PipelineParams()
        self.xid_catalog = xids
        self.signal_map = SignalMap(signals, index, repeat_hold_s=self.params.repeat_hold_s)
        self.xid_extractor = XidExtractor(index, xids)
        self.scoring = ScorerStage(scorers)
        self._layout: ColumnLayout | None = None
        self._entities: EntityMap | None = None
        self._applies: dict[str, BoolArray] = {}
        self._storm_columns = np.zeros(0, dtype=np.int64)  # fusion.storm_columns, per layout
        self._given_columns = np.zeros(0, dtype=np.int64)  # columns of ``given`` rules
        self.values = np.zeros(0)  # the latest tick's signal values (agent summaries read it)
        self._node_columns: list[np.ndarray] = []
        self._weights = np.zeros(0)
        self._prev_z = np.zeros(0)  # the previous tick's fused column scores
        self.common_mode = CommonMode()  # each (signal, node) excursion's onset
        self._prev_t = -np.inf  # the previous tick's time

    @property
    def scorers(self) -> list[Scorer]:
        return self.scoring.scorers

    @property
    def node_names(self) -> tuple[str, ...]:
        """The nodes the data has named so far, in node-id order (ids never change)."""
        return self.signal_map.layout.node_names if len(self.index) else ()

    # -- layout -----------------------------------------------------------------------------
    def _refresh_layout(self) -> None:
        alone = self._peerless_nodes()
        self.signal_map.map_unnamed(alone)  # their unnamed node-level series: own-past columns
        layout = self.signal_map.layout
        lone = set(alone)
        peerless = np.asarray([name in lone for name in layout.node_names], dtype=bool)
        self._layout = layout
        self._entities = EntityMap.build(layout, self.signal_map.columns.gpu_label)
        self._applies = {s.name: self._scorer_mask(s.name, layout, peerless) for s in self.scorers}
        self.scoring.set_layout(self._applies, layout)
        self._storm_columns = storm_columns(self._applies, layout)
        given = [
            rule.given if (rule := self.signal_map.catalog.rule_named(name)) else False
            for name in layout.signal_names
        ]
        self._given_columns = np.flatnonzero(np.asarray(given, dtype=bool)[layout.signal])
        order = np.argsort(layout.node, kind="stable")
        bounds = np.searchsorted(layout.node[order], np.arange(len(layout.node_names) + 1))
        self._node_columns = [
            order[bounds[i] : bounds[i + 1]] for i in range(len(layout.node_names))
        ]
        calibrated = self.params.signal_weights
        factor = np.array([calibrated.get(name, 1.0) for name in layout.signal_names])
        self._weights = self.signal_map.weights * factor[layout.signal]

    def _peerless_nodes(self) -> list[str]:
        """The nodes (sorted) whose cohort has fewer nodes than ``own_past_min_peers``, among
        every node seen (none when that is off or no scorer is ``own_past``)."""
        least = self.params.own_past_min_peers
        if least <= 0 or OWN_PAST not in {s.name for s in self.scorers}:
            return []
        cohorts = self.signal_map.node_cohort_ids()
        size = Counter(cohorts.values())
        return sorted(node for node, cohort in cohorts.items() if size[cohort] < least)

    def _scorer_mask(self, scorer: str, layout: ColumnLayout, peerless: BoolArray) -> BoolArray:
        """The columns ``scorer`` applies to: those whose rule names it (the default rule's
        scorers for GPU series no rule names, and for node-level ones with
        ``default_rule.node_level``); and for ``own_past`` also the node-level columns of
        ``peerless`` nodes that peers would score or no rule names."""
        catalog = self.signal_map.catalog
        rules = {rule.name: rule for rule in catalog.signals}
        default = catalog.default_rule
        names = layout.signal_names
        wanted = np.asarray(
            [scorer in (rules[n].scorers if n in rules else default.scorers) for n in names],
            dtype=bool,
        )[layout.signal]
        unnamed = np.asarray([n not in rules for n in names], dtype=bool)[layout.signal]
        node_level = layout.gpu < 0
        if not default.node_level:  # unnamed node-level columns exist only for own_past
            wanted &= ~(unnamed & node_level)
        if scorer == OWN_PAST and peerless.any():
            by_peers = np.asarray(
                [n not in rules or "peers" in rules[n].scorers for n in names], dtype=bool
            )[layout.signal]
            wanted |= peerless[layout.node] & node_level & by_peers
        return wanted

    # -- one tick ---------------------------------------------------------------------------
    def step(self, frame: Frame) -> TickResult:
        t = frame.time
        if self.signal_map.sync(t) or self._layout is None:
            self._refresh_layout()
        layout, entities = self._layout, self._entities
        assert layout is not None
        assert entities is not None
        x = self.values = self.signal_map.compute(t, frame.values)
        observed = ~np.isnan(x)
        scores = self.scoring.run(t, x)
        fused = fuse(
            scores,
            self._applies,
            self._weights,
            observed,
            layout,
            entities,
            self.params.fusion,
            self.common_mode,
            t,
            (self._storm_columns, x[self._storm_columns] > 0.0),
            (self._given_columns, x[self._given_columns]),
        )

        n_nodes = len(layout.node_names)
        # An entity is seen unless all its columns are unobserved; counted over the few
        # unobserved columns (weighted bincounts over every column cost ~0.1 ms a tick).
        unseen = np.flatnonzero(~observed)
        node_seen = np.bincount(layout.node[unseen], minlength=n_nodes) < entities.node_size
        unseen_gpu = entities.gpu_entity[unseen]
        gpu_seen = (
            np.bincount(unseen_gpu[unseen_gpu >= 0], minlength=len(entities.gpu_node))
            < entities.gpu_size
        )
        gpu_score = np.where(gpu_seen, fused.gpu_score, np.nan)
        alert_score = fused.node_score.copy()
        if entities.gpu_node.size:
            np.maximum.at(alert_score, entities.gpu_node, fused.gpu_score)
        alert_score = np.where(node_seen, alert_score, np.nan)
        if self.params.bridge_missed_tick:
            alert_score[self._incomplete(fused.column_z, unseen, layout)] = np.nan
        self._prev_t = t
        incidents = tuple(
            Incident(t, None, layout.signal_names[sig], int(cnt), int(node_seen.sum()))
            for sig, cnt in zip(
                fused.common_mode_signals.tolist(), fused.common_mode_nodes.tolist(), strict=True
            )
        )
        return TickResult(
            time=t,
            node_names=layout.node_names,
            node_score=alert_score,
            gpu_node=entities.gpu_node,
            gpu_label=entities.gpu_label,
            gpu_score=gpu_score,
            xids=tuple(self.xid_extractor.update(t, frame.values)),
            incidents=incidents,
            column_z=fused.column_z,
            definitive=tuple(self.signal_map.vanished_gpus()),
        )

    def _incomplete(self, column_z: FloatArray, unseen: IntArray, layout: ColumnLayout) -> IntArray:
        """Nodes whose tick is incomplete (see ``PipelineParams.bridge_missed_tick``): a
        column unobserved now that was observed on the previous tick with evidence."""
        prev_z, self._prev_z = self._prev_z, column_z  # fuse returns a fresh array each tick
        unseen = unseen[unseen < prev_z.shape[0]]  # columns added this tick: no evidence yet
        carried = unseen[prev_z[unseen] > self.params.fusion.z0]
        if carried.size:
            carried = carried[self.signal_map.last_observed[carried] == self._prev_t]
        nodes: IntArray = np.unique(layout.node[carried])
        return nodes

    # -- evidence ---------------------------------------------------------------------------
    def node_evidence(
        self, tick: TickResult, node: int, k: int | None = None
    ) -> tuple[SignalScore, ...]:
        """The strongest columns (above the fusion's z0, at most ``k``, default ``top_k``) of
        node id ``node`` at ``tick``, strongest first, as (node, GPU, signal, fused z: weighted
        robust sigmas from baseline or peers). Computed on demand, so replay does not pay for
        it: what an alert names (``peak_evidence``), what the diagnosis reads and what the
        daemon exports (``evidence``)."""
        layout, entities = self._layout, self._entities
        if layout is None or entities is None or tick.column_z.shape[0] != len(layout):
            return ()
        if not 0 <= node < len(self._node_columns):
            return ()
        k = self.params.top_k if k is None else k
        name = layout.node_names[node]
        out = []
        for col, z in top_signals(
            tick.column_z, self._node_columns[node], layout, k, self.params.fusion.z0
        ):
            gpu_entity = int(entities.gpu_entity[col])
            gpu = entities.gpu_label[gpu_entity] if gpu_entity >= 0 else None
            out.append(SignalScore(name, gpu, layout.signal_names[int(layout.signal[col])], z))
        return tuple(out)

    def peak_evidence(self, tick: TickResult, node: int) -> tuple[tuple[str, ...], str | None]:
        """The signals of ``node_evidence`` (each named once, strongest first) and the GPU of
        the strongest column; ((), None) when no column contributed evidence. What an alert
        names at its peak."""
        found = self.node_evidence(tick, node)
        names = tuple(dict.fromkeys(e.signal for e in found))
        return names, found[0].gpu if found else None

    def evidence(self, tick: TickResult, k: int | None = None) -> list[SignalScore]:
        """``node_evidence`` of every node with a positive score at ``tick``: what the daemon
        exports as ``detector_signal_score``."""
        scores = np.nan_to_num(tick.node_score, nan=0.0)
        return [
            e
            for node in np.flatnonzero(scores > 0).tolist()
            for e in self.node_evidence(tick, node, k)
        ]

    def lead_signals(self, tick: TickResult) -> tuple[IntArray, IntArray]:
        """Per node of ``tick``: the signal id (``layout.signal_names``) of its strongest
        column above the fusion's z0, -1 where none contributed evidence, and that column's
        GPU entity (-1: node-level or none). What calibration records to name an alert's
        evidence without re-scoring."""
        layout, entities = self._layout, self._entities
        n_nodes = len(tick.node_names)
        lead: IntArray = np.full(n_nodes, -1, dtype=np.int64)
        lead_gpu: IntArray = np.full(n_nodes, -1, dtype=np.int64)
        if layout is None or entities is None or tick.column_z.shape[0] != len(layout):
            return lead, lead_gpu
        live = np.flatnonzero(tick.column_z > self.params.fusion.z0)
        if live.size:
            # strongest first within each node; the first row per node is its leader
            order = np.lexsort((-tick.column_z[live], layout.node[live]))
            nodes = layout.node[live[order]]
            first = np.flatnonzero(np.r_[True, nodes[1:] != nodes[:-1]])
            columns = live[order[first]]
            lead[nodes[first]] = layout.signal[columns]
            lead_gpu[nodes[first]] = entities.gpu_entity[columns]
        return lead, lead_gpu

    # -- what the drivers report ------------------------------------------------------------
    @property
    def signal_names(self) -> tuple[str, ...]:
        """Signal ids of ``lead_signals`` -> names (the current layout's)."""
        return self.signal_map.layout.signal_names if len(self.index) else ()

    def signal_coverage(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """Which of the rules' named, scored signals have a column (the data fed them) and
        which do not: a dcgm-exporter on its default field list lacks the ECC, NVLink-error
        and violation counters, the precursors of several XIDs."""
        present = set(self.signal_map.signal_names)
        named = [
            rule.name
            for rule in self.signal_map.catalog.signals
            if rule.truth is None and rule.scorers and rule.transform != "presence"
        ]
        return tuple(n for n in named if n in present), tuple(n for n in named if n not in present)

    def teams(self) -> TeamReport:
        """How GPUs and nodes were grouped into peers (for summaries and logs)."""
        teams = self.signal_map.teams
        return TeamReport(
            split_nodes=tuple(sorted(teams.split_nodes)),
            inferred_split_nodes=tuple(sorted(teams.inferred_split_nodes)),
            alone_nodes=tuple(sorted(teams.alone_nodes)),
            cohort_advice=teams.cohort_advice(),
        )

    # -- state ------------------------------------------------------------------------------
    def state_dict(self) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """Everything a restart needs to carry on without re-warming: (arrays, JSON metadata).

        The series index is saved in column order, so restoring it rebuilds the same signal
        columns, which the scorers' arrays are aligned to."""
        arrays: dict[str, np.ndarray] = {}
        parts: dict[str, dict[str, np.ndarray]] = {
            "signals": self.signal_map.state_dict(),
            "xids": self.xid_extractor.state_dict(),
            "common_mode": self.common_mode.state_dict(),
            **{f"scorer.{s.name}": s.state_dict() for s in self.scorers},
        }
        for prefix, part in parts.items():
            arrays.update({f"{prefix}/{key}": value for key, value in part.items()})
        arrays["pipeline/prev_z"] = self._prev_z.copy()
        names = self.signal_map.column_names
        meta: dict[str, Any] = {
            "version": STATE_VERSION,
            "series": [
                [
                    i.metric,
                    [list(kv) for kv in i.labels],
                    i.node,
                    i.gpu,
                    [list(kv) for kv in i.context],
                ]
                for i in self.index.infos
            ],
            "node_names": list(self.node_names),
            "prev_t": self._prev_t if math.isfinite(self._prev_t) else None,
            # the nodes whose unnamed node-level series have columns (map_unnamed), and
            # own_past's columns in its state's order (ScorerStage) by identity: a restored
            # index rebuilds map_unnamed's columns after the others, and only own_past scores
            # them (every other scorer's columns come back in the order its state has them)
            "unnamed_nodes": sorted(self.signal_map.unnamed_nodes),
            "scorer_slots": {
                name: [list(names(int(c))) for c in cols.tolist()]
                for name, cols in self.scoring.subsets.items()
                if name == OWN_PAST and cols.size
            },
        }
        return arrays, meta

    def load_state_dict(self, arrays: Mapping[str, np.ndarray], meta: Mapping[str, Any]) -> None:
        """Load ``state_dict`` output into a freshly built pipeline with an empty index.

        Raises ValueError (with what is wrong) for a state of another version or shape;
        callers treat that as "start clean"."""
        if meta.get("version") != STATE_VERSION:
            raise ValueError(f"state version {meta.get('version')!r}, expected {STATE_VERSION}")
        if len(self.index):
            raise ValueError("restore needs a pipeline whose series index is still empty")
        infos = [
            SeriesInfo(
                column,
                metric,
                tuple((k, v) for k, v in labels),
                node,
                gpu,
                tuple((k, v) for k, v in ctx),
            )
            for column, (metric, labels, node, gpu, ctx) in enumerate(meta["series"])
        ]
        self.index.extend_from(infos)
        self.signal_map.sync()
        self.signal_map.map_unnamed(meta.get("unnamed_nodes", []))
        self._refresh_layout()
        saved_slots = meta.get("scorer_slots")
        if saved_slots is not None:
            self.scoring.restore_slots(_slots_of(self, saved_slots))
            self._refresh_layout()
        self.signal_map.load_state_dict(_part(arrays, "signals"))
        self.xid_extractor.load_state_dict(_part(arrays, "xids"))
        for scorer in self.scorers:
            scorer.load_state_dict(_part(arrays, f"scorer.{scorer.name}"))
        self._prev_z = arrays.get("pipeline/prev_z", np.zeros(0)).copy()
        self.common_mode.load_state_dict(_part(arrays, "common_mode"))
        prev_t = meta.get("prev_t")
        self._prev_t = -math.inf if prev_t is None else float(prev_t)


@dataclass(frozen=True, slots=True)
class TeamReport:
    """How peers were grouped: nodes whose GPUs ran more than one workload (GPU peers by
    workload), nodes whose unlabelled GPUs co-movement told apart, nodes with a GPU judged
    alone, and the advice when nodes of different jobs were judged against each other."""

    split_nodes: tuple[str, ...] = ()
    inferred_split_nodes: tuple[str, ...] = ()
    alone_nodes: tuple[str, ...] = ()
    cohort_advice: str = ""


STATE_VERSION = 2  # 2: alert episodes moved to the tick loop's state


def _part(arrays: Mapping[str, np.ndarray], prefix: str) -> dict[str, np.ndarray]:
    return {k.split("/", 1)[1]: v for k, v in arrays.items() if k.startswith(prefix + "/")}


def _slots_of(pipeline: Pipeline, saved: Mapping[str, Any]) -> dict[str, IntArray]:
    """Saved scorer slots (column identities, ``Pipeline.state_dict``) as the restored
    columns; ValueError when one is not among them (its scorer's state would not line up)."""
    where = {tuple(pipeline.signal_map.column_names(i)): i for i in range(len(pipeline.signal_map))}
    out: dict[str, IntArray] = {}
    for name, identities in saved.items():
        cols = []
        for identity in identities:
            signal, node, gpu, series = identity
            col = where.get((signal, node, gpu, series))
            if col is None:
                raise ValueError(f"state: scorer {name}'s column {identity} is not restored")
            cols.append(col)
        out[name] = np.asarray(cols, dtype=np.int64)
    return out
