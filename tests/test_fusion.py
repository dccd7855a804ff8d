"""Fusion: max over applicable scorers, weights, excess over z0, root-sum-square per entity,
monotone [0, 1] mapping, common mode, EntityMap and top_signals."""

from __future__ import annotations

import numpy as np
import pytest

from detector.model import BoolArray, ColumnLayout, FloatArray
from detector.pipeline.fusion import (
    CommonMode,
    EntityMap,
    Fused,
    FusionParams,
    fuse,
    storm_columns,
    top_signals,
)
from detector.scorers.registry import grid_layout
from detector.signals.columns import gpu_number

PARAMS = FusionParams(
    z0=3.0, scale=4.0, common_mode_fraction=0.5, common_mode_z=3.0, common_mode_min_nodes=4
)


def unit(*excesses: float, scale: float = PARAMS.scale) -> float:
    """The documented score of one entity whose columns exceed z0 by ``excesses``."""
    evidence = np.sqrt(sum(np.log1p(e) ** 2 for e in excesses))
    return float(1.0 - np.exp(-evidence / scale))


def run_fuse(
    layout: ColumnLayout,
    scores: dict[str, FloatArray],
    applies: dict[str, BoolArray] | None = None,
    weights: FloatArray | None = None,
    observed: BoolArray | None = None,
    params: FusionParams = PARAMS,
    common: CommonMode | None = None,
    t: float = 0.0,
    events: BoolArray | None = None,
) -> Fused:
    """One tick of ``fuse``; pass ``common`` (and ``t``) to carry onsets across ticks."""
    n = len(layout)
    applies = applies or {name: np.ones(n, dtype=bool) for name in scores}
    weights = np.ones(n) if weights is None else weights
    observed = np.ones(n, dtype=bool) if observed is None else observed
    entities = EntityMap.build(layout)
    common = CommonMode() if common is None else common
    counted = None
    if events is not None:  # as the pipeline passes them: the storm columns' events only
        storm = storm_columns(applies, layout)
        counted = (storm, events[storm])
    return fuse(scores, applies, weights, observed, layout, entities, params, common, t, counted)


def test_column_score_is_the_largest_applicable_scorer() -> None:
    """A scorer that does not apply to a column is ignored even when it is larger."""
    layout = grid_layout(1, 0, (), ("a", "b"))
    scores = {"zscore": np.array([5.0, 2.0]), "changepoint": np.array([9.0, 4.0])}
    applies = {"zscore": np.array([True, True]), "changepoint": np.array([False, True])}
    fused = run_fuse(layout, scores, applies)
    assert [5.0, 4.0] == fused.column_z.tolist()


def test_weights_scale_column_scores_before_the_excess() -> None:
    """column_z is score * weight; a weight that brings 6 sigma under z0 removes the evidence."""
    layout = grid_layout(1, 0, (), ("a", "b"))
    fused = run_fuse(layout, {"zscore": np.array([6.0, 6.0])}, weights=np.array([0.5, 2.0]))
    assert [3.0, 12.0] == fused.column_z.tolist()
    assert unit(9.0) == pytest.approx(fused.node_score[0])


def test_jitter_below_z0_adds_no_evidence() -> None:
    """Hundreds of columns at or below z0 leave the node score at exactly 0."""
    layout = grid_layout(1, 0, (), tuple(f"s{i}" for i in range(300)))
    fused = run_fuse(layout, {"zscore": np.full(300, 3.0)})
    assert 0.0 == fused.node_score[0]


def test_evidence_is_root_sum_square_of_log_excesses() -> None:
    """Two columns at z0 + 3 equal one column with sqrt(2) times its log-evidence, and beat a
    single z0 + 3; a single extreme column is worth far less than its raw excess."""
    layout = grid_layout(4, 0, (), ("a", "b"))
    same = float(np.expm1(np.sqrt(2.0) * np.log1p(3.0)))
    z = np.array([6.0, 6.0, 3.0 + same, 0.0, 6.0, 0.0, 50.0, 0.0])
    solo = FusionParams(scale=PARAMS.scale, common_mode_min_nodes=100)  # no common mode here
    fused = run_fuse(layout, {"zscore": z}, params=solo)
    assert unit(3.0, 3.0) == pytest.approx(fused.node_score[0])
    assert fused.node_score[0] == pytest.approx(fused.node_score[1])
    assert fused.node_score[0] > fused.node_score[2] == pytest.approx(unit(3.0))
    assert unit(47.0) == pytest.approx(fused.node_score[3])
    assert fused.node_score[3] < 0.9


def test_score_is_in_unit_interval_and_monotone_in_evidence() -> None:
    """More excess never lowers the score; huge evidence stays within [0, 1]."""
    z = np.array([0.0, 3.0, 3.5, 5.0, 10.0, 100.0, 1e6])
    layout = grid_layout(len(z), 0, (), ("a",))
    solo = FusionParams(common_mode_min_nodes=100)  # each node on its own, no common mode
    scores = run_fuse(layout, {"zscore": z}, params=solo).node_score
    assert np.all(np.diff(scores) >= 0)
    assert np.all((scores >= 0) & (scores <= 1))
    assert scores[-1] > 0.95


def test_gpu_score_uses_only_its_own_columns_and_node_score_all() -> None:
    """A hot GPU raises its GPU score and its node's score, not its neighbour GPU's."""
    layout = grid_layout(2, 2, ("temp",), ("load",))  # per node: temp g0, temp g1, load
    z = np.zeros(len(layout))
    z[1] = 7.0  # node 0, GPU 1
    z[5] = 5.0  # node 1, node-level load
    fused = run_fuse(layout, {"zscore": z})
    assert pytest.approx([0.0, unit(4.0), 0.0, 0.0]) == fused.gpu_score.tolist()
    assert pytest.approx([unit(4.0), unit(2.0)]) == fused.node_score.tolist()


def test_common_mode_signal_keeps_only_peer_scores_and_is_reported() -> None:
    """A signal hot on 6 of 8 nodes: reported with its node count; its columns lose their own
    score, a GPU that deviates from its node's other GPUs keeps that peer score, and another
    signal on a hot node still counts."""
    layout = grid_layout(8, 2, ("temp",), ("nfs", "load"))  # per node: temp g0, g1, nfs, load
    z = np.zeros(len(layout))
    peer = np.zeros(len(layout))
    nfs = np.arange(8) * 4 + 2
    z[nfs[:6]] = 8.0  # nfs hot on nodes 0..5: common mode
    temp = np.arange(8) * 4
    z[temp[:5]] = 9.0  # temp of GPU 0 hot on nodes 0..4: common mode ...
    peer[temp[4]] = 6.0  # ... node 4's GPU 0 also deviates from its node's other GPU
    z[4 * 1 + 3] = 9.0  # load on node 1 alone: not common mode
    fused = run_fuse(layout, {"zscore": z, "peers": peer})
    assert [0, 1] == fused.common_mode_signals.tolist()  # temp, nfs
    assert [5, 6] == fused.common_mode_nodes.tolist()
    assert 0.0 == fused.node_score[0]
    assert unit(6.0) == pytest.approx(fused.node_score[1])  # its load still counts
    assert unit(3.0) == pytest.approx(fused.node_score[4])  # peer score 6 - z0
    assert unit(3.0) == pytest.approx(fused.gpu_score[8])  # node 4, GPU 0
    assert 0.0 == fused.gpu_score[0]


def test_common_mode_without_peer_scorer_silences_the_signal() -> None:
    """No peer scores at all: a cluster-wide move contributes nothing to any node."""
    layout = grid_layout(5, 0, (), ("nfs",))
    fused = run_fuse(layout, {"zscore": np.full(5, 9.0)})
    assert [0] == fused.common_mode_signals.tolist()
    assert np.all(fused.node_score == 0.0)


def test_common_mode_needs_min_nodes_and_fraction() -> None:
    """3 hot nodes (< min 4) or 4 of 10 (< 50%) are individual deviations, not common mode."""
    few = grid_layout(3, 0, (), ("nfs",))
    fused = run_fuse(few, {"zscore": np.full(3, 9.0)})
    assert 0 == fused.common_mode_signals.size
    assert np.all(fused.node_score > 0)
    many = grid_layout(10, 0, (), ("nfs",))
    z = np.zeros(10)
    z[:4] = 9.0
    assert 0 == run_fuse(many, {"zscore": z}).common_mode_signals.size
    z[4] = 9.0  # 5 of 10 = the fraction
    assert [5] == run_fuse(many, {"zscore": z}).common_mode_nodes.tolist()


def test_common_mode_fraction_counts_only_nodes_that_report_the_signal() -> None:
    """4 hot nodes out of 4 observed (6 silent) is common mode."""
    layout = grid_layout(10, 0, (), ("nfs",))
    z = np.zeros(10)
    z[:4] = 9.0
    observed = np.zeros(10, dtype=bool)
    observed[:4] = True
    assert [0] == run_fuse(layout, {"zscore": z}, observed=observed).common_mode_signals.tolist()


def test_common_mode_counts_nodes_not_gpu_columns() -> None:
    """One node with 8 hot GPUs on a signal is one hot node, not eight."""
    layout = grid_layout(4, 8, ("temp",))
    z = np.zeros(len(layout))
    z[:8] = 9.0
    fused = run_fuse(layout, {"zscore": z})
    assert 0 == fused.common_mode_signals.size
    assert fused.node_score[0] == pytest.approx(unit(*[6.0] * 8))


def test_entity_map_gives_one_entity_per_node_gpu_pair() -> None:
    """GPU columns of one (node, gpu) share an entity; node-level columns have none."""
    layout = grid_layout(2, 2, ("temp", "power"), ("load",))
    em = EntityMap.build(layout)
    # per node: temp g0, temp g1, power g0, power g1, load
    assert [0, 1, 0, 1, -1, 2, 3, 2, 3, -1] == em.gpu_entity.tolist()
    assert [0, 0, 1, 1] == em.gpu_node.tolist()
    assert ("0", "1", "0", "1") == em.gpu_label
    assert 2 == em.n_nodes
    # (signal, node) pairs: columns of the same signal on the same node share one
    pairs = em.signal_node_pair
    assert pairs[0] == pairs[1] != pairs[2]
    assert em.pair_signal[pairs].tolist() == layout.signal.tolist()


def test_entity_map_keeps_nodes_right_for_hashed_gpu_labels() -> None:
    """Non-numeric GPU labels become large ints (gpu_number); entities stay on their node."""
    labels = ["GPU-aaaa", "GPU-bbbb", "GPU-cccc"]
    gpu = np.array([gpu_number(label) for label in labels] * 2, dtype=np.int64)
    assert gpu.max() > 2_000_000  # hashed labels are far beyond small GPU ids
    node = np.repeat(np.arange(2, dtype=np.int64), 3)
    layout = ColumnLayout(
        signal=np.zeros(6, dtype=np.int64),
        node=node,
        gpu=gpu,
        cohort=np.zeros(6, dtype=np.int64),
        direction=np.zeros(6, dtype=np.int64),
        signal_names=("temp",),
        node_names=("n0", "n1"),
    )
    em = EntityMap.build(layout)
    assert 6 == len(em.gpu_node)
    assert node.tolist() == em.gpu_node[em.gpu_entity].tolist()
    assert 6 == len(set(em.gpu_entity.tolist()))


def test_entity_map_names_each_gpu_after_its_first_column() -> None:
    """With the data's labels per column, a GPU entity carries its first column's label
    (not its hashed id); a column without a label names its GPU ""."""
    labels = ["GPU-aaaa", "GPU-bbbb", "GPU-aaaa", "GPU-bbbb", "GPU-cccc", None]
    gpu = np.array([gpu_number(label or "x") for label in labels], dtype=np.int64)
    gpu[5] = 7  # an id of its own, its column unlabelled
    layout = ColumnLayout(
        signal=np.array([0, 0, 1, 1, 0, 0], dtype=np.int64),
        node=np.array([0, 0, 0, 0, 1, 1], dtype=np.int64),
        gpu=gpu,
        cohort=np.zeros(6, dtype=np.int64),
        direction=np.zeros(6, dtype=np.int64),
        signal_names=("temp", "power"),
        node_names=("n0", "n1"),
    )
    em = EntityMap.build(layout, labels)
    named = {em.gpu_label[e]: em.gpu_node[e] for e in em.gpu_entity.tolist()}
    assert {"GPU-aaaa": 0, "GPU-bbbb": 0, "GPU-cccc": 1, "": 1} == named
    assert labels[:5] == [em.gpu_label[e] for e in em.gpu_entity[:5].tolist()]


def test_top_signals_lists_strongest_positive_columns_first() -> None:
    """At most k (column, score) pairs, descending, among the given columns, positives only."""
    layout = grid_layout(1, 0, (), tuple("abcdef"))
    z = np.array([1.0, 5.0, 0.0, 3.0, 9.0, 2.0])
    cols = np.array([0, 1, 2, 3, 5], dtype=np.int64)  # column 4 is another entity's
    assert [(1, 5.0), (3, 3.0), (5, 2.0)] == top_signals(z, cols, layout, 3)
    assert [(1, 5.0), (3, 3.0), (5, 2.0), (0, 1.0)] == top_signals(z, cols, layout, 10)
    assert [] == top_signals(z, np.array([2], dtype=np.int64), layout, 3)
    assert [] == top_signals(z, np.array([], dtype=np.int64), layout, 3)


def test_two_nodes_of_a_small_cohort_moving_together_are_one_event() -> None:
    """With the default parameters, a signal hot on 2 of 8 nodes in one tick (a two-node job
    checkpointing) is a group event: reported, and neither node scores on it; hot on one node
    alone, it is that node's evidence."""
    layout = grid_layout(8, 0, (), ("mem_available",))
    z = np.zeros(8)
    z[[3, 4]] = 8.0
    pair = run_fuse(layout, {"peers": z}, params=FusionParams())
    assert [0] == pair.common_mode_signals.tolist()
    assert [2] == pair.common_mode_nodes.tolist()
    assert 0.0 == pair.node_score.max()
    z[4] = 0.0
    alone = run_fuse(layout, {"peers": z}, params=FusionParams())
    assert 0 == alone.common_mode_signals.size
    assert alone.node_score[3] > 0.5


TWO = FusionParams(z0=3.0, scale=4.0, common_mode_fraction=0.05, common_mode_min_nodes=2)


def against_own_past(layout: ColumnLayout, common: CommonMode, t: float, z: FloatArray) -> Fused:
    """One tick of z-scores (against each column's own past) at ``TWO``, onsets carried."""
    return run_fuse(layout, {"zscore": z}, params=TWO, common=common, t=t)


def test_excursions_that_began_hours_apart_are_two_faults_not_a_group() -> None:
    """Two nodes whose health status went bad 4 h apart (dead GPUs awaiting repair) overlap in
    time but did not start together: both keep their score. Before onsets were kept, any two
    hot nodes in the same tick were common mode and silenced each other for hours."""
    layout = grid_layout(10, 0, (), ("health",))
    common = CommonMode()
    z = np.zeros(10)
    z[0] = 9.0
    for t in np.arange(0.0, 4 * 3600.0, 30.0):
        assert 0 == against_own_past(layout, common, float(t), z).common_mode_signals.size
    z[1] = 9.0
    for t in np.arange(4 * 3600.0, 6 * 3600.0, 30.0):
        fused = against_own_past(layout, common, float(t), z)
        assert 0 == fused.common_mode_signals.size
        assert fused.node_score[0] == fused.node_score[1] == pytest.approx(unit(6.0))


def test_nodes_that_start_together_are_a_group_and_a_returning_node_rejoins() -> None:
    """Three nodes starting within the window are a group event for as long as they stay up; a
    node that drops out and comes back while the group is still up rejoins it instead of
    alerting, and a node that goes bad after the group has ended is a fault of its own."""
    layout = grid_layout(10, 0, (), ("nfs",))
    common = CommonMode()
    z = np.zeros(10)
    z[[0, 1]] = 9.0
    assert [2] == against_own_past(layout, common, 0.0, z).common_mode_nodes.tolist()
    z[2] = 9.0  # two minutes later: within the 5-minute window
    assert [3] == against_own_past(layout, common, 120.0, z).common_mode_nodes.tolist()
    z[2] = 0.0
    against_own_past(layout, common, 3600.0, z)
    z[2] = 9.0  # back an hour after the group began: rejoins the running incident
    fused = against_own_past(layout, common, 3630.0, z)
    assert [3] == fused.common_mode_nodes.tolist()
    assert 0.0 == fused.node_score[2]
    z[[0, 1, 2]] = 0.0
    against_own_past(layout, common, 7200.0, z)
    z[3] = 9.0  # alone, after the incident ended
    fused = against_own_past(layout, common, 7230.0, z)
    assert 0 == fused.common_mode_signals.size
    assert unit(6.0) == pytest.approx(fused.node_score[3])


def test_common_mode_state_survives_a_save_and_load() -> None:
    """The onsets are saved: after a restart two long-running faults are still two faults."""
    layout = grid_layout(4, 0, (), ("health",))
    common = CommonMode()
    z = np.zeros(4)
    z[0] = 9.0
    against_own_past(layout, common, 0.0, z)
    z[1] = 9.0
    against_own_past(layout, common, 3600.0, z)
    restored = CommonMode()
    restored.load_state_dict(common.state_dict())
    assert 0 == against_own_past(layout, restored, 3630.0, z).common_mode_signals.size
    fresh = CommonMode()  # no saved onsets: both begin now, together
    assert [2] == against_own_past(layout, fresh, 3630.0, z).common_mode_nodes.tolist()


def test_nodes_off_their_cohort_at_once_are_a_group_whenever_each_moved() -> None:
    """Against peers a node is judged now: three single-node jobs started 27, 16 and 14 min ago
    (bench/robustness.py's 8-node cluster) are off the idle cohort together, a split cohort,
    not three faults; the same onsets judged against their own past are three faults."""
    layout = grid_layout(8, 0, (), ("mem",))
    by_peers, by_own = CommonMode(), CommonMode()
    z = np.zeros(8)
    for t, node in ((0.0, 4), (660.0, 6), (780.0, 7)):
        z[node] = 9.0
        peers = run_fuse(layout, {"peers": z}, params=TWO, common=by_peers, t=t)
        own = against_own_past(layout, by_own, t, z)
    assert [3] == peers.common_mode_nodes.tolist()
    assert np.all(peers.node_score == 0.0)
    assert [2] == own.common_mode_nodes.tolist()  # 6 and 7 began 2 min apart; 4 did not
    assert unit(6.0) == pytest.approx(own.node_score[4])


def test_a_node_that_starts_bursting_in_a_storm_most_nodes_share_is_part_of_it() -> None:
    """A checkpoint storm: 60 of 64 nodes report NFS retransmissions at once, all but one
    used to them (counts z < 3). The one idle for hours (its learnt rate ~0) scores z 14 on
    its own past: part of the storm, not a fault. Without the storm (3 nodes with events)
    the same burst alerts, and so does a node whose burst began before the storm did."""
    layout = grid_layout(64, 0, (), ("nfs_retrans",))
    common = CommonMode()
    z = np.zeros(64)
    z[57] = 14.0
    events = np.zeros(64, dtype=bool)
    events[:60] = True
    storm = run_fuse(layout, {"counts": z}, params=TWO, common=common, t=0.0, events=events)
    assert 0.0 == storm.node_score[57]
    assert [1] == storm.common_mode_nodes.tolist()
    events[3:] = False
    events[57] = True
    quiet = run_fuse(layout, {"counts": z}, params=TWO, common=CommonMode(), events=events)
    assert unit(11.0) == pytest.approx(quiet.node_score[57])
    early = CommonMode()
    run_fuse(layout, {"counts": z}, params=TWO, common=early, t=0.0, events=events)
    events[:60] = True  # the storm comes a tick after its own burst began
    later = run_fuse(layout, {"counts": z}, params=TWO, common=early, t=30.0, events=events)
    assert unit(11.0) == pytest.approx(later.node_score[57])
    only_zscore = run_fuse(layout, {"zscore": z}, params=TWO, common=CommonMode(), events=events)
    assert unit(11.0) == pytest.approx(only_zscore.node_score[57])  # storms are counters'


def test_a_gpu_counter_on_every_node_is_no_storm() -> None:
    """A job at its power cap has violation counts on every GPU of every node for hours; a
    failing PSU's burst on one node must still count (GPU counters make no storm)."""
    layout = grid_layout(64, 1, ("power_violation",))
    z = np.zeros(64)
    z[57] = 14.0
    events = np.ones(64, dtype=bool)
    fused = run_fuse(layout, {"counts": z}, params=TWO, common=CommonMode(), events=events)
    assert unit(11.0) == pytest.approx(fused.node_score[57])
