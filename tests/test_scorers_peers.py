"""PeerDeviation: lone deviants against common swings, grouping and statistics vs brute force."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from detector.config.rules import load_signal_rules
from detector.scorers.base import ColumnLayout
from detector.scorers.peers import MAD_SCALE, PeerDeviation, peer_groups
from detector.scorers.registry import grid_layout
from detector.scorers.zscore import RobustZScore
from detector.series.index import SeriesIndex
from detector.signals.map import SignalMap

TICK_S = 15.0


def test_lone_deviant_gpu_stands_out_while_all_eight_swing_together() -> None:
    """A common 100-sigma swing gives low peer scores; one GPU 10 sigma off its peers is caught."""
    layout = grid_layout(1, 8, ("gpu_power",))
    rng = np.random.default_rng(0)
    ticks = 300
    x = 500.0 + 20.0 * np.sin(np.arange(ticks) / 10.0)[:, None] + rng.normal(size=(ticks, 8))
    x[120:140] -= 100.0  # all eight drop together (a checkpoint pause)
    x[200:, 3] += 10.0
    peers, zscore = PeerDeviation(), RobustZScore(half_life_s=600.0, warmup=20)
    peer_scores, z_scores = [], []
    for i, row in enumerate(x):
        peer_scores.append(peers.update(i * TICK_S, row, layout))
        z_scores.append(zscore.update(i * TICK_S, row, layout))
    p, z = np.array(peer_scores), np.array(z_scores)
    assert p[:200].max() < 4.0
    assert p[210:, 3].min() > 5.0
    assert np.delete(p[210:], 3, axis=1).max() < 4.0
    assert z[120:125].min() > 5.0  # the common swing fools a per-series z-score, not peers


def test_groups_with_too_few_observed_members_score_zero() -> None:
    """A node with 2 GPUs, or 8 GPUs of which only 2 are observed, has no peers to judge by."""
    small = grid_layout(1, 2, ("temp",))
    x = np.array([60.0, 90.0])
    assert np.array_equal(np.zeros(2), PeerDeviation().update(0.0, x, small))
    layout = grid_layout(1, 8, ("temp",))
    row = np.full(8, np.nan)
    row[[0, 1]] = [60.0, 90.0]
    assert np.array_equal(np.zeros(8), PeerDeviation().update(0.0, row, layout))


def test_node_level_columns_are_compared_within_their_cohort() -> None:
    """Node columns are judged against their own cohort: levels of other cohorts do not count."""
    layout = grid_layout(10, 0, (), ("load",), cohorts=2)  # even nodes cohort 0, odd cohort 1
    rng = np.random.default_rng(1)
    scorer = PeerDeviation(smooth_half_life_s=0.0)
    for i in range(40):  # past the peer and habit warm-ups
        row = np.where(layout.cohort == 0, 10.0, 100.0) + rng.normal(size=10)
        scores = scorer.update(i * TICK_S, row, layout)
        assert scores.max() < 6.0
    row[2] = 30.0  # a cohort-0 node at a cohort-1-ish level
    scores = scorer.update(40 * TICK_S, row, layout)
    assert scores[2] > 10.0
    assert np.delete(scores, 2).max() < 6.0


def random_layout(rng: np.random.Generator, n: int) -> ColumnLayout:
    gpu = rng.integers(-1, 4, n)
    return ColumnLayout(
        signal=rng.integers(0, 3, n),
        node=rng.integers(0, 5, n),
        gpu=gpu,
        cohort=rng.integers(0, 2, n),
        direction=np.zeros(n, dtype=np.int64),
        signal_names=("a", "b", "c"),
        node_names=tuple(f"n{i}" for i in range(5)),
    )


@pytest.mark.parametrize(("n", "rounds"), [(400, 5), (2400, 1)])
def test_group_median_and_mad_match_a_brute_force_loop(n: int, rounds: int) -> None:
    """Vectorized medians and floored MAD sigmas equal a per-group nanmedian loop, for groups
    of up to 8 (sorting network), up to INSERTION_MAX and beyond it (~100 members), with
    ties."""
    rng = np.random.default_rng(2)
    for _ in range(rounds):
        layout = random_layout(rng, n)
        x = rng.normal(size=n) * 10
        tie = rng.random(n) < 0.1
        x[tie] = np.round(x[tie])  # ties
        x[rng.random(n) < 0.2] = np.nan
        scorer = PeerDeviation(min_peers=3)
        med, sigma = scorer.group_stats(x, layout)
        for j in range(n):
            if layout.gpu[j] >= 0:
                same = (layout.gpu >= 0) & (layout.node == layout.node[j])
            else:
                same = (layout.gpu < 0) & (layout.cohort == layout.cohort[j])
            members = x[same & (layout.signal == layout.signal[j])]
            members = members[~np.isnan(members)]
            if members.shape[0] < 3:
                assert np.isnan(med[j])
                continue
            m = np.median(members)
            mad = MAD_SCALE * np.median(np.abs(members - m))
            assert med[j] == m
            assert sigma[j] == max(mad, scorer.mad_floor_rel * abs(m) + scorer.mad_floor_abs)


def test_every_column_lands_in_exactly_one_group_row() -> None:
    """The padded group matrices hold each column of a large-enough group exactly once."""
    rng = np.random.default_rng(3)
    layout = random_layout(rng, 1000)
    matrices = peer_groups(layout, min_size=1)
    members = np.concatenate([m[m >= 0] for m in matrices])
    assert np.array_equal(np.arange(1000), np.sort(members))
    for matrix in matrices:
        for row in matrix:
            cols = row[row >= 0]
            assert np.unique(layout.signal[cols]).shape[0] == 1
            assert np.unique(layout.gpu[cols] >= 0).shape[0] == 1


def test_a_column_that_always_stands_out_stops_scoring_once_its_habit_is_learnt() -> None:
    """A GPU slot that always runs 8 C hotter than its peers is its habit, not an anomaly;
    a further 8 C on top of the habit is."""
    layout = grid_layout(1, 8, ("temp",))
    rng = np.random.default_rng(3)
    scorer = PeerDeviation(smooth_half_life_s=0.0, baseline_half_life_s=600.0)
    offset = np.zeros(8)
    offset[5] = 8.0
    scores = np.zeros(8)
    for i in range(400):
        row = 60.0 + offset + rng.normal(size=8)
        if i == 399:
            row[5] += 8.0
        scores = scorer.update(i * TICK_S, row, layout)
        if 300 <= i < 399:
            assert scores.max() < 5.0
    assert scores[5] > 5.0


def test_a_member_back_from_a_gap_is_not_compared_across_unlike_windows() -> None:
    """A node that missed a scrape reports a rate averaged over two ticks; when every node's
    rate moves that very tick, that average sits between the old and new level and looks like
    a lone deviant. Such a member is not compared that tick (its next tick is judged), also
    when it lost another scrape just before; a real deviant is still caught right after a
    tick that every member missed, and after its own lost scrape (that tick unjudged: 0)."""
    layout = grid_layout(10, 0, (), ("nfs_backlog",))
    rng = np.random.default_rng(5)
    scorer = PeerDeviation()
    level = np.full(10, 0.015)
    scores = []
    for i in range(80):
        if i == 60:
            level[:] = 0.002  # a cluster-wide transition (a checkpoint ends)
        row = level * (1.0 + 1e-3 * rng.normal(size=10))
        if i in (57, 59):
            row[4] = np.nan  # node 4 lost two scrapes, one tick apart
        if i == 59:
            row[2] = np.nan  # node 2's scrape was lost
        if i == 60:
            row[[2, 4]] = 0.5 * (0.015 + 0.002)  # their rates then span both ticks
        if i == 70:
            row[:] = np.nan  # a tick no node reported
        if i >= 72:
            row[7] *= 3.0  # a real lone deviant, the tick after everyone's gap
        if i == 76:
            row[7] = np.nan  # whose scrape is lost in turn
        scores.append(scorer.update(i * TICK_S, row, layout))
    s = np.array(scores)
    assert s[60:70].max() < 4.0  # nodes 2 and 4's two-tick averages are not deviations
    assert s[61:70, [2, 4]].max() < 4.0  # and they are judged again from the next tick
    assert s[72, 7] > 10.0
    assert s[77, 7] == 0.0  # back from its gap it is not judged (the pipeline bridges it)
    assert s[78, 7] > 10.0
    assert np.delete(s[72:], 7, axis=1).max() < 4.0


def test_a_state_saved_before_intervals_were_kept_loads_and_scores_the_same() -> None:
    """A peers state without ``interval`` (written before gaps were recognised) loads with
    every interval unknown, and the next regular tick scores as the uninterrupted scorer."""
    layout = grid_layout(2, 8, ("temp",))
    rng = np.random.default_rng(9)
    x = 60.0 + rng.normal(size=(41, 16))
    x[36:, 5] += 10.0  # GPU 5 of node 0 leaves its peers
    scorer = PeerDeviation()
    for i in range(40):
        scorer.update(i * TICK_S, x[i], layout)
    old = {k: v for k, v in scorer.state_dict().items() if k != "interval"}
    restored = PeerDeviation()
    restored.load_state_dict(old)
    assert np.array_equal(np.zeros(16), restored.interval)
    expected = scorer.update(40 * TICK_S, x[40], layout)
    assert expected[5] > 3.0
    np.testing.assert_array_equal(expected, restored.update(40 * TICK_S, x[40], layout))


@pytest.mark.parametrize("resolution", [0.0, 0.1])
def test_a_one_step_move_of_a_rounded_signal_is_quantization_not_a_deviant(
    resolution: float,
) -> None:
    """Readings rounded to 0.1 (a throttle share): a GPU reading one step above peers that
    agree exactly at 0 scores about step / (step / sqrt(12)) = 3.5, not the tens of sigmas an
    unrounded signal's exact agreement would give it; five steps still stand out."""
    base = grid_layout(1, 8, ("power_violation",))
    layout = dataclasses.replace(base, resolution=np.full(len(base), resolution))
    peers = PeerDeviation(smooth_half_life_s=0.0)
    ticks = 200
    x = np.zeros((ticks, 8))
    x[120, 3] = 0.1  # one step, one tick
    x[180:, 5] = 0.5  # five steps, for good
    scores = np.array([peers.update(i * TICK_S, row, layout) for i, row in enumerate(x)])
    if resolution:
        assert scores[120, 3] < 4.0
        assert scores[185:, 5].max() > 10.0
    else:
        assert scores[120, 3] > 20.0  # the same move without a resolution: a floor-size MAD


def _hourly_excursions(
    scorer: PeerDeviation, hours: int, last: tuple[float, float] = (4.0, 20.0), seed: int = 4
) -> np.ndarray:
    """10 nodes, one signal; node 3 drops 20 units (~20 peer sigmas) below its peers for 4 min
    every hour (a lone job's checkpoint); the last hour's drop lasts ``last[0]`` minutes and
    is ``last[1]`` units deep. Scores per tick (15 s) x node."""
    layout = grid_layout(10, 0, (), ("mem_available",))
    rng = np.random.default_rng(seed)
    ticks = int(hours * 3600 / TICK_S)
    scores = np.zeros((ticks, 10))
    for i in range(ticks):
        row = 100.0 + rng.normal(size=10)
        hour, minute = divmod(i * TICK_S / 60.0, 60.0)
        length, depth = last if hour == hours - 1 else (4.0, 20.0)
        if 30.0 <= minute < 30.0 + length:
            row[3] -= depth
        scores[i] = scorer.update(i * TICK_S, row, layout)
    return scores


def _hour_peaks(scores: np.ndarray, column: int) -> np.ndarray:
    per_hour = int(3600 / TICK_S)
    return scores[:, column].reshape(-1, per_hour).max(axis=1)


def test_a_recurring_lone_excursion_is_habituated_while_its_first_counts_in_full() -> None:
    """A node whose lone job checkpoints every hour leaves its peers the same way each time:
    the first excursion scores in full, each repeat less (never below a third of the
    unhabituated score by the 8th hour here), and the other nodes stay quiet. Without
    habituation (excursion_z None) every repeat scores like the first."""
    habituated = _hour_peaks(_hourly_excursions(PeerDeviation(), 8), 3)
    plain_scores = _hourly_excursions(PeerDeviation(excursion_z=None), 8)
    plain = _hour_peaks(plain_scores, 3)
    assert plain.min() > 15.0  # every checkpoint is a ~20-sigma lone deviant
    assert habituated[0] == plain[0]
    assert np.all(habituated[1:] < 0.7 * plain[1:])
    assert habituated[-1] < 0.4 * plain[-1]
    assert np.delete(plain_scores, 3, axis=1).max() < 3.0


def test_an_excursion_longer_or_deeper_than_the_habit_is_judged_in_full() -> None:
    """After 7 habituated 4-min checkpoints, a drop that lasts 40 min is discounted only for
    twice the usual length (10 min here, the excursion window): from then on it scores as
    without habituation. A drop three times as deep keeps its excess over the usual peak."""
    long_h = _hourly_excursions(PeerDeviation(), 8, last=(40.0, 20.0))
    long_p = _hourly_excursions(PeerDeviation(excursion_z=None), 8, last=(40.0, 20.0))
    start = int((7 * 3600 + 30 * 60) / TICK_S)  # the long drop's first tick
    early = slice(start, start + int(4 * 60 / TICK_S))
    late = slice(start + int(12 * 60 / TICK_S), start + int(40 * 60 / TICK_S))
    assert long_h[early, 3].max() < 0.5 * long_p[early, 3].max()
    np.testing.assert_allclose(long_h[late, 3], long_p[late, 3])
    assert long_h[late, 3].min() > 10.0
    deep_h = _hour_peaks(_hourly_excursions(PeerDeviation(), 8, last=(4.0, 60.0)), 3)
    deep_p = _hour_peaks(_hourly_excursions(PeerDeviation(excursion_z=None), 8), 3)
    # ~60 sigmas, the habit ~18: at least the excess over the habit is kept
    assert deep_h[-1] > 45.0 - deep_p[:-1].mean()


def test_a_restored_state_carries_an_excursion_in_progress() -> None:
    """Saved in the middle of a habituated excursion and loaded into a new scorer, the next
    ticks score exactly as the uninterrupted one's; a state saved before habituation existed
    (no habit arrays) loads with none learnt."""
    layout = grid_layout(10, 0, (), ("mem_available",))
    rng = np.random.default_rng(7)
    scorer, rows = PeerDeviation(), []
    for i in range(int(3.5 * 3600 / TICK_S) + 8):  # 3 checkpoints, the 4th begun
        row = 100.0 + rng.normal(size=10)
        if 30.0 <= (i * TICK_S / 60.0) % 60.0 < 34.0:
            row[3] -= 20.0
        rows.append(row)
        scorer.update(i * TICK_S, row, layout)
    restored = PeerDeviation()
    restored.load_state_dict(scorer.state_dict())
    old_format = {k: v for k, v in scorer.state_dict().items() if k not in PeerDeviation._HABIT}
    fresh = PeerDeviation()
    fresh.load_state_dict(old_format)
    assert np.all(fresh.habit_runs == 0.0)
    assert np.all(fresh.run_last == -np.inf)
    t0 = len(rows) * TICK_S
    for k in range(8):
        row = rows[-1]
        expected = scorer.update(t0 + k * TICK_S, row, layout)
        np.testing.assert_array_equal(expected, restored.update(t0 + k * TICK_S, row, layout))
        assert expected[3] < fresh.update(t0 + k * TICK_S, row, layout)[3]


def test_losing_every_other_scrape_does_not_teach_a_longer_interval() -> None:
    """A node that loses every other scrape for a while reports each rate over two ticks.
    Its usual interval must not creep up to that: when the whole cohort's rate then moves
    in the very tick it returns (a checkpoint storm ends), its two-tick average is still
    not compared with its peers'. A scrape interval that really changed (the whole cohort
    now every 60 s) is learnt after 8 late ticks, after which a lone deviant is caught."""
    layout = grid_layout(10, 0, (), ("nfs_backlog",))
    rng = np.random.default_rng(8)
    scorer = PeerDeviation()
    level = np.full(10, 0.2)
    scores = []
    for i in range(80):
        if i == 70:
            level[:] = 0.002  # the storm ends for everyone
        row = level * (1.0 + 1e-3 * rng.normal(size=10))
        if 58 <= i < 70 and i % 2 == 1:
            row[4] = np.nan  # node 4 loses every other scrape, six times
        if i == 70:
            row[4] = 0.5 * (0.2 + 0.002)  # back: its rate spans both ticks
        scores.append(scorer.update(i * TICK_S, row, layout))
    assert np.array(scores)[60:80].max() < 4.0
    later = []
    for k in range(40):  # from now on every node is scraped every 60 s
        row = 0.002 * (1.0 + 1e-3 * rng.normal(size=10))
        if k >= 20:
            row[7] *= 3.0  # a real lone deviant
        later.append(scorer.update(80 * TICK_S + 60.0 * (k + 1), row, layout))
    assert np.array(later)[25:, 7].min() > 10.0


def test_habituation_works_without_a_habit_baseline_and_can_be_turned_off() -> None:
    """With no habit baseline the excursions are still tallied (6 h half-life), and
    ``excursion_z=None`` keeps no habituation state at all."""
    no_base = _hour_peaks(_hourly_excursions(PeerDeviation(baseline_half_life_s=None), 6), 3)
    assert no_base[-1] < 0.5 * no_base[0]
    off = PeerDeviation(excursion_z=None)
    _hourly_excursions(off, 1)
    assert not set(PeerDeviation._HABIT) & set(off.state_dict())


def _nfs_latency_scores(log_unit: float | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """16 nodes' NFS RTT per request, 6 h: 0.7 ms, 20 ms in a 3-min checkpoint storm every
    30 min; each node's reading off by |3%| noise, node 5's by |12%| (a noisier client),
    node 9 30% slower from hour 4 (a degraded mount). Scored in seconds, or in log space as
    rules/signals.yaml has it (``log_unit``). Scores (ticks x nodes), storm ticks, hours."""
    layout = grid_layout(16, 0, (), ("nfs_op_rtt",))
    rng = np.random.default_rng(3)
    scorer = PeerDeviation()
    ticks = int(6 * 3600 / TICK_S)
    scores, storm = np.zeros((ticks, 16)), np.zeros(ticks, dtype=bool)
    spread = np.full(16, 0.03)
    spread[5] = 0.12
    for i in range(ticks):
        t = i * TICK_S
        storm[i] = t % 1800 < 180
        x = (0.020 if storm[i] else 0.0007) * (1.0 + spread * np.abs(rng.normal(size=16)))
        x[9] *= 1.3 if t >= 4 * 3600 else 1.0
        scores[i] = scorer.update(t, x if log_unit is None else np.log1p(x / log_unit), layout)
    return scores, storm, np.arange(ticks) * TICK_S / 3600.0


def test_a_slow_nfs_client_is_caught_between_checkpoint_storms_in_log_space() -> None:
    """A latency's spread grows with its level (30x in a storm). In log space a node 30%
    slower than its peers scores alike in and between storms, and a noisier client stays
    below alert level. In seconds the storms' spread, kept as the group's smoothed scale,
    hides the slow node between storms and the noisy client's storm readings look deviant."""
    logged, storm, hours = _nfs_latency_scores(1e-4)
    slow = (hours >= 4.0) & (hours < 4.5)
    assert np.median(logged[slow & ~storm, 9]) > 8.0
    assert np.median(logged[slow & storm, 9]) > 8.0
    assert logged[hours < 4.0, 9].max() < 3.0
    assert logged[hours > 0.5, 5].max() < 5.0
    assert np.delete(logged, [5, 9], axis=1)[hours > 0.5].max() < 3.0
    seconds, _, _ = _nfs_latency_scores(None)
    assert np.median(seconds[slow & ~storm, 9]) < 4.0
    assert seconds[storm, 5].max() > 8.0


def _loading_phase_scores(strip_resolution: bool) -> tuple[np.ndarray, np.ndarray]:
    """One node's 8 GPUs through the shipped rules (DCGM_FI_DEV_GPU_UTIL, whole percent,
    120 s samples): idle at exactly 0 for 3 h, a 10-min loading phase at 25 +- 1 (most GPUs
    tie on one value, so the group's MAD is 0), GPU 4 stuck at 10 in its last 4 min; then
    training at 99 +- 1. Peer scores of the gpu_util columns (ticks x GPUs), and the mask
    of loading ticks before GPU 4 lags."""
    catalog = load_signal_rules()
    if strip_resolution:
        rules = tuple(r.model_copy(update={"resolution": 0.0}) for r in catalog.signals)
        catalog = catalog.model_copy(update={"signals": rules})
    index = SeriesIndex()
    signals = SignalMap(catalog, index)
    series = [
        index.add(
            "DCGM_FI_DEV_GPU_UTIL", (("Hostname", "n1"), ("UUID", f"GPU-{g}"), ("gpu", str(g)))
        )
        for g in range(8)
    ]
    signals.sync()
    cols = [next(i for i in range(len(signals)) if signals.column_names(i)[3] == s) for s in series]
    rng = np.random.default_rng(5)
    peers, step = PeerDeviation(), 120.0
    scores, loading = [], []
    for k in range(int(4 * 3600 / step)):
        minute = k * step / 60.0
        if minute < 180.0:
            util = np.zeros(8)
        elif minute < 190.0:
            util = 25.0 + rng.choice([-1.0, 0.0, 0.0, 0.0, 0.0, 1.0], size=8)
            util[4] = 10.0 if minute >= 186.0 else util[4]
        else:
            util = 99.0 + rng.choice([-1.0, 0.0, 1.0], size=8)
        frame = np.full(len(index), np.nan)
        frame[series] = util
        x = signals.compute(k * step, frame)
        scores.append(peers.update(k * step, x, signals.layout)[cols])
        loading.append(180.0 <= minute < 186.0)
    return np.array(scores), np.array(loading)


def test_whole_number_readings_tied_after_an_idle_phase_are_not_deviants() -> None:
    """DCGM reports utilization and temperatures in whole units (rules: resolution 1). After
    an idle phase with no spread at all, a loading phase where most GPUs tie on one value
    has a MAD of 0: a GPU one or two percent off its peers is quantization, not a tens-of-
    sigma deviant, while a GPU stuck at 10 beside peers at 25 still stands out. Without the
    resolution (the same readings) the one-percent GPUs score like a fault."""
    shipped, loading = _loading_phase_scores(strip_resolution=False)
    assert shipped[loading].max() < 8.0
    assert shipped[-20:].max() < 8.0  # training, 99 +- 1 (its last 40 min)
    assert shipped[~loading, 4].max() > 20.0  # the stuck GPU, minutes 186-190
    plain, _ = _loading_phase_scores(strip_resolution=True)
    assert plain[loading].max() > 20.0
