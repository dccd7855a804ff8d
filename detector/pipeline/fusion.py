"""Fusion: many column scores -> one score in [0, 1] per node and per GPU, with evidence.

Per column, the scorers that apply to it (from its signal rule) are combined by taking the
largest score, then weighted. Only the excess over ``z0`` counts, so the ordinary jitter of
hundreds of columns adds nothing, and with diminishing returns: a column's evidence is
``log1p(z - z0)`` (a 50-sigma column is worth about 4, not 47: extreme z values usually mean a
tiny learnt variance, while independent signals agreeing is real evidence). An entity's evidence
``E`` is the root of the sum of its columns' squared evidence (two signals at 10 sigma outweigh
one at 20), mapped to [0, 1] by ``1 - exp(-E / scale)``: monotone, so calibration can place
thresholds on it, and far from saturating (one column at 50 sigma scores 0.86).

Common mode: when one signal moves beyond ``common_mode_z`` on at least
``common_mode_min_nodes`` nodes and at least ``common_mode_fraction`` of the nodes that report
it together (an NFS checkpoint storm, one job's checkpoint or restart, a switch hiccup), it is a
group event, not N node faults: GPU columns keep only their within-node peer score (a GPU that
deviates from its node's other GPUs still counts), node columns drop out, and the signal is
reported as a cluster incident. Real GPU faults are independent across nodes; several nodes
moving on the same signal together almost never are. Two nodes already count
(``common_mode_min_nodes``): a job of two nodes checkpointing is as common as a job of ten, and
two independent faults on one signal at once are far rarer than one shared cause; from 40 nodes
up the fraction (5%) asks for more.

"Together" depends on what a score measures. Against its peers (``peers``) a node is judged
now: several nodes off their cohort at the same tick means the cohort is split (jobs in
different phases), however long ago each of them moved. Against its own past (every other
scorer) a node is judged by a change, which has an onset: the nodes' excursions must have
begun within ``common_mode_window_s`` of each other. So two GPUs that died hours apart and wait
for repair side by side stay two faults (``CommonMode`` keeps each pair's onset), where
overlapping used to be enough to silence both. A node whose excursion begins while its signal
is a group event joins it (a long storm's nodes drop in and out), and a pair once in a group
event stays in it until its excursion ends.

Given scores: a column whose rule is ``given`` (an agent's GPU score, read from its summary)
holds a score in [0, 1] computed elsewhere. It is not scored again: its column score is set to
the z whose evidence maps back to that very score (``given_z``), so a GPU with only that column
fuses to its agent's score exactly, and its node's score combines it with the node's own
evidence like any other column's. Common mode leaves it alone (the agent already judged the GPU
against its node's other GPUs, which is what common mode keeps of a GPU column).

Storms: a node-level event counter (scored by ``counts``: NFS, InfiniBand) reported above 0
by at least ``common_mode_storm_fraction`` (half) of the nodes that report it is a storm on its
signal (NFS retransmissions while the storage is overloaded). Nodes used to such storms score
them low, so their scores alone may show no crowd; a node whose excursion begins during a storm
(one idle for hours, whose learnt rate fell to ~0) joins it like a group event. GPU counters
never make a storm: a job at its power cap has violation counts on every node for hours, and a
failing PSU's own burst must not join that.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from ..model import BoolArray, ColumnLayout, FloatArray, IntArray

PEER_SCORER = "peers"
COUNT_SCORER = "counts"
_GPU_SPAN = 1 << 32  # above every GPU id of a ColumnLayout


@dataclass(frozen=True, slots=True)
class FusionParams:
    z0: float = 3.0
    scale: float = 2.0
    common_mode_fraction: float = 0.05
    common_mode_z: float = 3.0
    common_mode_min_nodes: int = 2
    common_mode_window_s: float = 300.0
    common_mode_storm_fraction: float = 0.5


@dataclass(frozen=True, slots=True)
class EntityMap:
    """Columns -> entities. GPU entities are the distinct (node, gpu >= 0) pairs."""

    gpu_entity: IntArray  # per column: GPU entity id, -1 for node-level columns
    gpu_node: IntArray  # per GPU entity: its node id
    gpu_label: tuple[str, ...]  # per GPU entity: the gpu label
    signal_node_pair: IntArray  # per column: compact id of (signal, node)
    pair_signal: IntArray  # per pair id: its signal id
    pair_node: IntArray  # per pair id: its node id
    n_nodes: int
    # Derived once per layout for fuse(): columns per pair, and the columns grouped by signal
    # (signal s owns signal_columns[signal_bounds[s] : signal_bounds[s + 1]]).
    pair_size: IntArray
    signal_columns: IntArray
    signal_bounds: IntArray
    node_size: IntArray  # columns per node
    gpu_size: IntArray  # columns per GPU entity

    @classmethod
    def build(
        cls, layout: ColumnLayout, column_labels: Sequence[str | None] | None = None
    ) -> EntityMap:
        """The entities of ``layout``. ``column_labels`` (per column, its GPU's label as the
        data spells it) names each GPU entity after its first column; without them (or for a
        column without one) a GPU is named by its id."""
        n_nodes = len(layout.node_names)
        is_gpu = layout.gpu >= 0
        # GPU ids reach ~1e9 (signal_columns.gpu_number hashes non-numeric labels), so the
        # (node, gpu) key needs a span above every id; a smaller one would decode some GPUs to
        # wrong nodes.
        keys = layout.node.astype(np.int64) * _GPU_SPAN + np.where(is_gpu, layout.gpu, 0)
        uniq, first, inverse = np.unique(keys[is_gpu], return_index=True, return_inverse=True)
        gpu_entity = np.full(len(layout), -1, dtype=np.int64)
        gpu_entity[is_gpu] = inverse
        gpu_node = (uniq // _GPU_SPAN).astype(np.int64)
        gpu_idx = (uniq % _GPU_SPAN).astype(np.int64)
        if column_labels is None:
            labels = tuple(str(g) for g in gpu_idx.tolist())
        else:  # one lookup per GPU, not per column: this runs at every layout change
            first_columns = np.flatnonzero(is_gpu)[first].tolist()
            labels = tuple(column_labels[c] or "" for c in first_columns)
        pair_keys = layout.signal.astype(np.int64) * max(n_nodes, 1) + layout.node
        pairs, pair_inv = np.unique(pair_keys, return_inverse=True)
        signal_columns = np.argsort(layout.signal, kind="stable")
        signal_bounds = np.searchsorted(
            layout.signal[signal_columns], np.arange(len(layout.signal_names) + 1)
        )
        return cls(
            gpu_entity=gpu_entity,
            gpu_node=gpu_node,
            gpu_label=labels,
            signal_node_pair=pair_inv.astype(np.int64),
            pair_signal=(pairs // max(n_nodes, 1)).astype(np.int64),
            pair_node=(pairs % max(n_nodes, 1)).astype(np.int64),
            n_nodes=n_nodes,
            pair_size=np.bincount(pair_inv, minlength=pairs.shape[0]).astype(np.int64),
            signal_columns=signal_columns.astype(np.int64),
            signal_bounds=signal_bounds.astype(np.int64),
            node_size=np.bincount(layout.node, minlength=n_nodes).astype(np.int64),
            gpu_size=np.bincount(inverse, minlength=uniq.shape[0]).astype(np.int64),
        )


@dataclass(frozen=True, slots=True)
class Fused:
    column_z: FloatArray  # per column: weighted, common-mode-damped score (z units)
    node_score: FloatArray  # per node, in [0, 1]
    gpu_score: FloatArray  # per GPU entity, in [0, 1]
    common_mode_signals: IntArray  # signal ids moving cluster-wide this tick
    common_mode_nodes: IntArray  # per such signal: how many nodes moved


class CommonMode:
    """Per (signal, node): when its current excursion beyond ``common_mode_z`` began (NaN: not
    in one) and whether it has been part of a group event since; indexed by signal id and node
    id, which only grow, so the state survives layout changes. See the module docstring."""

    def __init__(self) -> None:
        self.onset = np.zeros((0, 0))
        self.grouped = np.zeros((0, 0), dtype=bool)

    def _grow(self, n_signals: int, n_nodes: int) -> None:
        s0, n0 = self.onset.shape
        if n_signals <= s0 and n_nodes <= n0:
            return
        shape = (max(n_signals, s0), max(n_nodes, n0))
        onset, grouped = np.full(shape, np.nan), np.zeros(shape, dtype=bool)
        onset[:s0, :n0], grouped[:s0, :n0] = self.onset, self.grouped
        self.onset, self.grouped = onset, grouped

    def update(
        self,
        t: float,
        hot: BoolArray,
        seen: BoolArray,
        entities: EntityMap,
        need: FloatArray,
        window_s: float,
        storm: BoolArray | None = None,
    ) -> BoolArray:
        """One tick: ``hot``/``seen`` per pair (beyond ``common_mode_z`` / observed), ``need``
        per signal the nodes a group event takes, ``storm`` per signal whether most nodes
        report its events this tick (``fuse``). Returns the pairs in a group event this tick.
        Unseen pairs keep their state."""
        n_signals = need.shape[0]
        self._grow(n_signals, entities.n_nodes)
        sig, node = entities.pair_signal, entities.pair_node
        onset = self.onset[sig, node]
        grouped = self.grouped[sig, node]
        ended = seen & ~hot
        onset[ended], grouped[ended] = np.nan, False
        began = hot & np.isnan(onset)
        onset[began] = t
        common = np.zeros(hot.shape[0], dtype=bool)
        hot_ids = np.flatnonzero(hot)
        n_hot = np.bincount(sig[hot_ids], minlength=n_signals)
        for s in np.flatnonzero(n_hot >= need).tolist():
            ids = hot_ids[sig[hot_ids] == s]
            times = np.sort(onset[ids])
            near = np.searchsorted(times, onset[ids] + window_s, "right") - np.searchsorted(
                times, onset[ids] - window_s, "left"
            )
            common[ids] = near >= need[s]
        common |= hot & grouped
        # a pair whose excursion begins while its signal is a group event (or a storm) joins it
        active = np.bincount(sig[common], minlength=n_signals) > 0
        if storm is not None:
            active |= storm
        common |= began & active[sig]
        grouped |= common
        self.onset[sig, node], self.grouped[sig, node] = onset, grouped
        return common

    def state_dict(self) -> dict[str, np.ndarray]:
        return {"onset": self.onset.copy(), "grouped": self.grouped.copy()}

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        onset, grouped = state.get("onset"), state.get("grouped")
        if onset is None or grouped is None or onset.shape != grouped.shape or onset.ndim != 2:
            return  # an older state: onsets restart from the next tick
        self.onset, self.grouped = onset.astype(np.float64), grouped.astype(bool)


def storm_columns(applies: Mapping[str, BoolArray], layout: ColumnLayout) -> IntArray:
    """The columns whose events can make a storm (module docstring): node-level columns
    scored by ``counts``. Per layout, so ``fuse`` looks only at their values each tick."""
    counted = applies.get(COUNT_SCORER)
    if counted is None:
        return np.zeros(0, dtype=np.int64)
    return np.flatnonzero(counted & (layout.gpu < 0))


def _quorum(seen: np.ndarray, fraction: float, params: FusionParams) -> FloatArray:
    """Per signal, the nodes that make a crowd: ``fraction`` of those seen, at least
    ``common_mode_min_nodes``."""
    need: FloatArray = np.maximum(params.common_mode_min_nodes, fraction * np.maximum(seen, 1))
    return need


def _to_unit(evidence: FloatArray, scale: float) -> FloatArray:
    return 1.0 - np.exp(-evidence / scale)


# A given score of 1 would be infinite evidence; capped here (evidence ~14 at scale 2).
GIVEN_MAX = 0.999


def given_z(score: FloatArray, params: FusionParams) -> FloatArray:
    """Column scores whose evidence fuses back to ``score`` (see "Given scores" above):
    ``z0 + expm1(-scale * ln(1 - score))``; NaN and values <= 0 give ``z0`` (no evidence)."""
    p = np.clip(np.nan_to_num(score, nan=0.0), 0.0, GIVEN_MAX)
    z: FloatArray = params.z0 + np.expm1(-params.scale * np.log1p(-p))
    return z


def fuse(
    scores: Mapping[str, FloatArray],
    applies: Mapping[str, BoolArray],
    weights: FloatArray,
    observed: BoolArray,
    layout: ColumnLayout,
    entities: EntityMap,
    params: FusionParams,
    common_mode: CommonMode,
    t: float,
    events: tuple[IntArray, BoolArray] | None = None,
    given: tuple[IntArray, FloatArray] | None = None,
) -> Fused:
    """Fuse one tick at time ``t``. ``applies[name]`` masks the columns scorer ``name`` is
    meant for; ``common_mode`` carries the excursions' onsets from tick to tick; ``events`` =
    (``storm_columns``, whether each reports events this tick, its value above 0), or None;
    ``given`` = (the given columns, their scores this tick), or None.

    Speed (results are bit-identical to the plain formulation): masked ``fmax`` in place
    instead of ``np.where`` temporaries; counts over the few columns that are hot or
    unobserved instead of weighted bincounts over every column; evidence only where a column
    exceeds ``z0`` (everywhere else it is exactly 0, and adding 0 leaves a sum unchanged)."""
    n = len(layout)
    raw = np.zeros(n)
    for name, s in scores.items():
        # raw >= 0 throughout, so fmax(raw, 0) == raw where the scorer does not apply.
        np.fmax(raw, s, out=raw, where=applies[name])

    # common mode, per (signal, node) pair above common_mode_z (module docstring): against
    # its peers, several at once; against its own past, excursions that began together
    n_pairs = len(entities.pair_signal)
    n_signals = len(layout.signal_names)
    pair = entities.signal_node_pair
    hot_cols = np.flatnonzero(raw > params.common_mode_z)
    peer_z, own_z = np.zeros(hot_cols.shape[0]), np.zeros(hot_cols.shape[0])
    for name, s in scores.items():
        on = applies[name][hot_cols]
        target = peer_z if name == PEER_SCORER else own_z
        np.fmax(target, s[hot_cols], out=target, where=on)
    peer_hot, own_hot = np.zeros(n_pairs, dtype=bool), np.zeros(n_pairs, dtype=bool)
    peer_hot[pair[hot_cols[peer_z > params.common_mode_z]]] = True
    own_hot[pair[hot_cols[own_z > params.common_mode_z]]] = True
    # A pair is seen unless every one of its columns is unobserved (few are, per tick).
    unseen = np.bincount(pair[~observed], minlength=n_pairs)
    seen_pair = unseen < entities.pair_size
    seen = np.bincount(entities.pair_signal, weights=seen_pair, minlength=n_signals)
    need = _quorum(seen, params.common_mode_fraction, params)  # nodes a group event takes
    crowd = np.bincount(entities.pair_signal, weights=peer_hot, minlength=n_signals)
    common_pair = peer_hot & (crowd >= need)[entities.pair_signal]
    window = params.common_mode_window_s
    storm = None
    if events is not None:
        # A storm: most nodes report a node-level counter's events at once (NFS
        # retransmissions while the storage is overloaded). Nodes used to such storms score
        # them low, so their scores alone may show no crowd; a node that begins an excursion
        # now (one idle for hours, whose learnt rate is ~0) has its counts judged as part of it.
        columns, reporting = events
        busy_pair = np.zeros(n_pairs, dtype=bool)
        busy_pair[pair[columns[reporting]]] = True
        busy = np.bincount(entities.pair_signal, weights=busy_pair, minlength=n_signals)
        storm = busy >= _quorum(seen, params.common_mode_storm_fraction, params)
    common_pair |= common_mode.update(t, own_hot, seen_pair, entities, need, window, storm)
    hot_pair = peer_hot | own_hot
    moved = np.bincount(entities.pair_signal, weights=common_pair, minlength=n_signals)
    common_ids = np.flatnonzero(moved)
    column_z = raw  # a fresh array: modified in place from here on
    if common_ids.size:
        # GPU columns keep their within-node peer score (independent of the crowd); node
        # columns' peers are the very crowd that moved, so they drop out for this tick. Every
        # column of the signal but those of pairs whose own excursion is not the group's.
        bounds = entities.signal_bounds
        damp = np.concatenate(
            [entities.signal_columns[bounds[i] : bounds[i + 1]] for i in common_ids.tolist()]
        )
        damp = damp[~(hot_pair & ~common_pair)[pair[damp]]]
        keep = entities.gpu_entity[damp] >= 0
        if PEER_SCORER in scores:
            keep &= applies[PEER_SCORER][damp]
            column_z[damp] = np.where(keep, scores[PEER_SCORER][damp], 0.0)
        else:
            column_z[damp] = 0.0
    column_z *= weights
    if given is not None and given[0].size:
        column_z[given[0]] = given_z(given[1], params)

    # Evidence log1p(max(z - z0, 0)) is 0 wherever z <= z0; NaN (never expected) is kept.
    live = np.flatnonzero(~(column_z <= params.z0))
    evidence = np.log1p(np.maximum(column_z[live] - params.z0, 0.0))
    sq = evidence * evidence
    node_e = np.sqrt(np.bincount(layout.node[live], weights=sq, minlength=entities.n_nodes))
    gpu_of = entities.gpu_entity[live]
    is_gpu = gpu_of >= 0
    gpu_e = np.sqrt(
        np.bincount(gpu_of[is_gpu], weights=sq[is_gpu], minlength=len(entities.gpu_node))
    )
    return Fused(
        column_z=column_z,
        node_score=_to_unit(node_e, params.scale),
        gpu_score=_to_unit(gpu_e, params.scale),
        common_mode_signals=common_ids.astype(np.int64),
        common_mode_nodes=moved[common_ids].astype(np.int64),
    )


def top_signals(
    column_z: FloatArray, columns: IntArray, layout: ColumnLayout, k: int, floor: float = 0.0
) -> list[tuple[int, float]]:
    """The k strongest (column, score) among ``columns`` scoring above ``floor`` (pass the
    fusion's ``z0`` to list only columns that contributed evidence), strongest first."""
    if columns.size == 0:
        return []
    z = column_z[columns]
    take = min(k, columns.size)
    best = np.argpartition(-z, take - 1)[:take]
    best = best[np.argsort(-z[best], kind="stable")]
    return [(int(columns[i]), float(z[i])) for i in best if z[i] > floor]
