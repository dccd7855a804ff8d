"""Fusion: many column scores -> one score in [0, 1] per node and per GPU, with evidence.

Per column, the scorers that apply to it (from its signal rule) are combined by taking the
largest score, then weighted. Only the excess over ``z0`` counts, so the ordinary jitter of
hundreds of columns adds nothing, and with diminishing returns: a column's evidence is
``log1p(z - z0)`` (a 50-sigma column is worth about 4, not 47: extreme z values usually mean a
tiny learnt variance, while independent signals agreeing is real evidence). An entity's evidence
``E`` is the root of the sum of its columns' squared evidence (two signals at 10 sigma outweigh
one at 20), mapped to [0, 1] by ``1 - exp(-E / scale)``: monotone, so calibration can place
thresholds on it, and far from saturating (one column at 50 sigma scores 0.86).

Common mode: when one signal exceeds ``common_mode_z`` on at least ``common_mode_min_nodes``
nodes and at least ``common_mode_fraction`` of the nodes that report it, in the same tick (an NFS
checkpoint storm, one job's checkpoint or restart, a switch hiccup), it is a group event, not N
node faults: GPU columns keep only their within-node peer score (a GPU that deviates from its
node's other GPUs still counts), node columns drop out for the tick, and the signal is reported
as a cluster incident. Real GPU faults are independent across nodes; several nodes moving on
the same signal in the same tick almost never are. Two nodes already count
(``common_mode_min_nodes``): a job of two nodes checkpointing is as common as a job of ten, and
two independent faults on one signal in the same tick are far rarer than one shared cause; from
40 nodes up the fraction (5%) asks for more.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from .model import BoolArray, ColumnLayout, FloatArray, IntArray

PEER_SCORER = "peers"
_GPU_SPAN = 1 << 32  # above every GPU id of a ColumnLayout


@dataclass(frozen=True, slots=True)
class FusionParams:
    z0: float = 3.0
    scale: float = 2.0
    common_mode_fraction: float = 0.05
    common_mode_z: float = 3.0
    common_mode_min_nodes: int = 2


@dataclass(frozen=True, slots=True)
class EntityMap:
    """Columns -> entities. GPU entities are the distinct (node, gpu >= 0) pairs."""

    gpu_entity: IntArray  # per column: GPU entity id, -1 for node-level columns
    gpu_node: IntArray  # per GPU entity: its node id
    gpu_label: tuple[str, ...]  # per GPU entity: the gpu label
    signal_node_pair: IntArray  # per column: compact id of (signal, node)
    pair_signal: IntArray  # per pair id: its signal id
    n_nodes: int
    # Derived once per layout for fuse(): columns per pair, and the columns grouped by signal
    # (signal s owns signal_columns[signal_bounds[s] : signal_bounds[s + 1]]).
    pair_size: IntArray
    signal_columns: IntArray
    signal_bounds: IntArray
    node_size: IntArray  # columns per node
    gpu_size: IntArray  # columns per GPU entity

    @classmethod
    def build(cls, layout: ColumnLayout, gpu_labels: tuple[str, ...] | None = None) -> EntityMap:
        n_nodes = len(layout.node_names)
        is_gpu = layout.gpu >= 0
        # GPU ids reach ~1e9 (signals.gpu_number hashes non-numeric labels), so the (node, gpu)
        # key needs a span above every id; a smaller one would decode some GPUs to wrong nodes.
        keys = layout.node.astype(np.int64) * _GPU_SPAN + np.where(is_gpu, layout.gpu, 0)
        uniq, inverse = np.unique(keys[is_gpu], return_inverse=True)
        gpu_entity = np.full(len(layout), -1, dtype=np.int64)
        gpu_entity[is_gpu] = inverse
        gpu_node = (uniq // _GPU_SPAN).astype(np.int64)
        gpu_idx = (uniq % _GPU_SPAN).astype(np.int64)
        labels = tuple(str(g) for g in gpu_idx) if gpu_labels is None else gpu_labels
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


def _to_unit(evidence: FloatArray, scale: float) -> FloatArray:
    return 1.0 - np.exp(-evidence / scale)


def fuse(
    scores: Mapping[str, FloatArray],
    applies: Mapping[str, BoolArray],
    weights: FloatArray,
    observed: BoolArray,
    layout: ColumnLayout,
    entities: EntityMap,
    params: FusionParams,
) -> Fused:
    """Fuse one tick. ``applies[name]`` masks the columns scorer ``name`` is meant for.

    Speed (results are bit-identical to the plain formulation): masked ``fmax`` in place
    instead of ``np.where`` temporaries; counts over the few columns that are hot or
    unobserved instead of weighted bincounts over every column; evidence only where a column
    exceeds ``z0`` (everywhere else it is exactly 0, and adding 0 leaves a sum unchanged)."""
    n = len(layout)
    raw = np.zeros(n)
    for name, s in scores.items():
        # raw >= 0 throughout, so fmax(raw, 0) == raw where the scorer does not apply.
        np.fmax(raw, s, out=raw, where=applies[name])

    # common mode: share of (signal, node) pairs above common_mode_z among the observed pairs
    n_pairs = len(entities.pair_signal)
    n_signals = len(layout.signal_names)
    pair = entities.signal_node_pair
    hot_pair = np.zeros(n_pairs, dtype=bool)
    hot_pair[pair[raw > params.common_mode_z]] = True
    # A pair is seen unless every one of its columns is unobserved (few are, per tick).
    unseen = np.bincount(pair[~observed], minlength=n_pairs)
    seen_pair = unseen < entities.pair_size
    hot = np.bincount(entities.pair_signal, weights=hot_pair, minlength=n_signals)
    seen = np.bincount(entities.pair_signal, weights=seen_pair, minlength=n_signals)
    common = (hot >= params.common_mode_min_nodes) & (
        hot >= params.common_mode_fraction * np.maximum(seen, 1)
    )
    common_ids = np.flatnonzero(common)
    column_z = raw  # a fresh array: modified in place from here on
    if common_ids.size:
        # GPU columns keep their within-node peer score (independent of the crowd); node
        # columns' peers are the very crowd that moved, so they drop out for this tick.
        bounds = entities.signal_bounds
        damp = np.concatenate(
            [entities.signal_columns[bounds[i] : bounds[i + 1]] for i in common_ids.tolist()]
        )
        keep = entities.gpu_entity[damp] >= 0
        if PEER_SCORER in scores:
            keep &= applies[PEER_SCORER][damp]
            column_z[damp] = np.where(keep, scores[PEER_SCORER][damp], 0.0)
        else:
            column_z[damp] = 0.0
    column_z *= weights

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
        common_mode_nodes=hot[common_ids].astype(np.int64),
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
