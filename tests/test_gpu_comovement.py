"""Which GPUs of a node run one job, told from how their power moves where no workload label
names it (detector/gpu_comovement.py), on its own and through the pipeline."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from detector.config.load import load_config
from detector.loop import TickLoop
from detector.model import GPU_ALONE, SeriesInfo
from detector.replay.run import ReplayResult, run_replay, simulated_frames
from detector.replay.summary import summary_lines
from detector.series.index import SeriesIndex
from detector.series.labels import LabelRules, normalize
from detector.signals.gpu_comovement import CONFIRM, EVERY_S, MIN_EVIDENCE_S, CoMovingGpus
from detector.signals.gpu_teams import GpuTeams
from detector.sim import Scenario, SimulatedCluster

STEP = 30.0
IDLE, BUSY = 90.0, 650.0


def _wobble(rng: np.random.Generator, ticks: int, job: int = 0) -> np.ndarray:
    """A job's step-time wobble: noise smoothed over ~5 ticks, so its GPUs' power moves
    together from tick to tick (20 W), with a dip every 30 minutes (a checkpoint; each job's
    10 minutes after the previous job's: two jobs that checkpoint at once move together)."""
    kernel = np.hanning(7)
    wobble = np.convolve(rng.standard_normal(ticks + 6), kernel / kernel.sum(), "valid")[:ticks]
    dip = (np.arange(ticks) * STEP + 600 * job) % 1800 < 120
    return 20.0 * wobble / wobble.std() - 250.0 * dip


def _power(
    jobs: list[int | None], hours: float, seed: int = 1, noise: float | list[float] = 6.0
) -> np.ndarray:
    """(ticks, GPUs) power of one node: GPU i runs job ``jobs[i]`` (None: idle), each job on
    a wobble of its own, every GPU with its own sensor noise (W; one figure or one a GPU)."""
    rng = np.random.default_rng(seed)
    ticks = int(hours * 3600 / STEP)
    wobbles = {job: _wobble(rng, ticks, job) for job in sorted({j for j in jobs if j is not None})}
    columns = [np.full(ticks, IDLE) if job is None else BUSY + wobbles[job] for job in jobs]
    sizes = np.broadcast_to(np.asarray(noise, dtype=float), (len(jobs),))
    return np.stack(columns, axis=1) + rng.normal(0.0, 1.0, (ticks, len(jobs))) * sizes


def _run(power: np.ndarray, nodes: int = 1, t0: float = 0.0) -> tuple[CoMovingGpus, list]:
    """Feed ``power`` (ticks, GPUs; ``nodes`` nodes of equal size, in order) tick by tick;
    the moves reported, as (hours, GPU, key)."""
    comoving = CoMovingGpus()
    per_node = power.shape[1] // nodes
    for entity in range(power.shape[1]):
        comoving.add_gpu(entity, entity // per_node)
    return comoving, _feed(comoving, power, t0)


def _feed(comoving: CoMovingGpus, power: np.ndarray, t0: float) -> list:
    moves = []
    for k, row in enumerate(power):
        t = t0 + k * STEP
        comoving.observe(t, row)
        moves += [(t / 3600, e, key) for e, key in comoving.take_changes()]
    return moves


def test_two_jobs_on_a_node_become_two_teams() -> None:
    """Six GPUs train one job, two another: the two leave the node's team together, named by
    their lowest GPU; the six stay."""
    comoving, moves = _run(_power([0] * 6 + [1] * 2, hours=4))
    assert [-1] * 6 + [6, 6] == comoving.key.tolist()
    assert [(6, 6), (7, 6)] == [(e, key) for _, e, key in moves]
    first = min(h for h, _, _ in moves)
    assert first * 3600 >= MIN_EVIDENCE_S + (CONFIRM - 1) * EVERY_S  # evidence, confirmed


def test_one_event_that_moves_both_jobs_does_not_merge_them() -> None:
    """Once apart, the side job stays apart through a node-wide event that moves every GPU
    at once (a power-capping episode: 15 minutes at -200 W each, hour 4). It would merge back
    if it had to stay below the bar it left by (the check that this test can fail)."""
    power = _power([0] * 6 + [1] * 2, hours=7)
    capped = slice(int(4 * 3600 / STEP), int(4.25 * 3600 / STEP))
    power[capped] -= 200.0
    comoving, moves = _run(power)
    assert [(6, 6), (7, 6)] == [(e, key) for _, e, key in moves]
    assert [-1] * 6 + [6, 6] == comoving.key.tolist()


def test_a_job_on_two_gpus_of_an_idle_node_leaves_the_idle_ones() -> None:
    """Six GPUs idle (no common driver: loners) while two train: the loners outnumber the
    job, so the job leaves and the idle GPUs are the node's team."""
    comoving, _ = _run(_power([None] * 6 + [0, 0], hours=4))
    assert [-1] * 6 + [6, 6] == comoving.key.tolist()


def test_idle_gpus_beside_a_job_are_alone() -> None:
    """Six GPUs train, two idle from the start: the idle ones move with nothing, so beside a
    job that moves together they are judged alone (no GPU peers) rather than as its deviants
    at each of its phase changes. The job stays the node's team."""
    comoving, moves = _run(_power([0] * 6 + [None] * 2, hours=3))
    assert [-1] * 6 + [GPU_ALONE] * 2 == comoving.key.tolist()
    assert [(6, GPU_ALONE), (7, GPU_ALONE)] == [(e, key) for _, e, key in moves]


def test_a_gpu_flat_at_its_power_cap_still_moves_with_its_job() -> None:
    """GPU 3 reads flat at its power cap, 30 W below its job's level, from the first reading
    (a daemon started mid-job): it still drops with the job at each checkpoint, so it is
    linked to the job and stays its peer, not alone."""
    power = _power([0] * 8, hours=4)
    rng = np.random.default_rng(3)
    power[:, 3] = np.minimum(power[:, 3], BUSY - 30.0) + rng.normal(0.0, 2.0, power.shape[0])
    comoving, moves = _run(power)
    assert [] == moves
    assert comoving.joined[3] >= CONFIRM  # proven


def test_a_side_job_that_starts_late_leaves_as_a_group() -> None:
    """GPUs 6 and 7 idle for two hours beside the main job (alone), then run a job of their
    own: once they move together they leave as one group."""
    power = np.concatenate(
        [_power([0] * 6 + [None] * 2, hours=2, seed=1), _power([0] * 6 + [1] * 2, hours=5, seed=2)]
    )
    comoving, moves = _run(power)
    assert [-1] * 6 + [6, 6] == comoving.key.tolist()
    assert [(6, GPU_ALONE), (7, GPU_ALONE), (6, 6), (7, 6)] == [(e, key) for _, e, key in moves]


def test_one_pair_does_not_chain_a_side_job_into_the_team() -> None:
    """After the side job (GPUs 6, 7) has left, GPU 6 and main-job GPU 0 share a move of
    their own for three hours (an event on the two alone): that pair correlates above the
    link, GPU 6's mean with the team's GPUs does not, so the side job stays apart (through
    the one pair it would merge into the team: the check that this test can fail)."""
    power = _power([0] * 6 + [1] * 2, hours=6)
    rng = np.random.default_rng(11)
    shared = slice(int(3 * 3600 / STEP), None)
    ticks = power[shared].shape[0]
    common = np.convolve(rng.standard_normal(ticks + 6), np.hanning(7), "valid")[:ticks]
    power[shared, 0] += 60.0 * common / common.std()  # W, three times the jobs' wobble
    power[shared, 6] += 60.0 * common / common.std()
    comoving, moves = _run(power)
    assert [(6, 6), (7, 6)] == [(e, key) for _, e, key in moves]
    with np.errstate(invalid="ignore", divide="ignore"):
        r = comoving.cov / np.sqrt(comoving.var[comoving.pair_i] * comoving.var[comoving.pair_j])
    pair = np.flatnonzero((comoving.pair_i == 0) & (comoving.pair_j == 6))
    assert r[pair][0] >= 0.5  # at the end the pair is linked; the chain is cut


def test_one_job_on_every_gpu_is_never_split() -> None:
    """All eight GPUs in one job, with sensor noise as large as the job's wobble: no move in
    12 hours. Nor with every GPU idle."""
    assert [] == _run(_power([0] * 8, hours=12, noise=20.0))[1]
    assert [] == _run(_power([None] * 8, hours=12))[1]


def test_a_gpu_that_leaves_its_job_is_never_split_off() -> None:
    """GPU 3 of an eight-GPU job stops following it after 2 hours, moving on its own (a
    failing GPU's erratic power) or reading flat: it stays with its node's peers, which is
    what lets them catch it."""
    for erratic in (True, False):
        power = _power([0] * 8, hours=8)
        rng = np.random.default_rng(7)
        late = slice(int(2 * 3600 / STEP), None)
        ticks = power[late].shape[0]
        power[late, 3] = BUSY + (_wobble(rng, ticks) if erratic else rng.normal(0, 1.0, ticks))
        assert [] == _run(power)[1], f"erratic={erratic}"


def test_a_node_gone_idle_after_its_job_is_not_split() -> None:
    """A node's job ends and its GPUs idle for a day: the fading common past leaves every pair
    near the link threshold. The three quietest GPUs stay linked longest (some 16 hours on), a
    chance group beside five loners, but it is not split off: it still moves a little with
    the others (without that check it would be)."""
    noise = [3.0] * 3 + [8.0] * 5
    busy, idle = _power([0] * 8, hours=3, noise=noise), _power([None] * 8, hours=24, noise=noise)
    assert [] == _run(np.concatenate([busy, idle]))[1]


def test_nodes_are_grouped_apart_and_all_at_once() -> None:
    """Three nodes in one pass: a shared node, a node of one job, a node whose GPUs run two
    4-GPU jobs; each node's GPUs are grouped only with its own."""
    power = np.concatenate(
        [
            _power([0] * 6 + [1] * 2, hours=4, seed=1),
            _power([0] * 8, hours=4, seed=2),
            _power([0] * 4 + [1] * 4, hours=4, seed=3),
        ],
        axis=1,
    )
    comoving, _ = _run(power, nodes=3)
    expected = [-1] * 6 + [6, 6] + [-1] * 8 + [-1] * 4 + [20] * 4
    assert expected == comoving.key.tolist()


def test_a_gpu_not_observed_takes_no_part() -> None:
    """NaN readings (a GPU a workload label names, or one not scraped) are not observed: such
    a GPU never moves and adds no evidence."""
    power = _power([0] * 6 + [1] * 2, hours=4)
    power[:, 7] = np.nan
    comoving, moves = _run(power)
    # GPU 6, alone in its job, moves with no other GPU beside a job that moves together:
    # judged alone; GPU 7 never moves
    assert [6] == [e for _, e, _ in moves]
    assert [-1] * 6 + [GPU_ALONE, -1] == comoving.key.tolist()
    assert 0.0 == comoving.observed_s[7]


def test_the_grouping_survives_a_restart() -> None:
    """State saved mid-run and restored into a new instance goes on exactly as the original,
    and the next ``take_changes`` reports every GPU's restored group."""
    power = _power([0] * 6 + [1] * 2, hours=5)
    half = power.shape[0] // 2
    original, _ = _run(power)
    first, _ = _run(power[:half])
    restored = CoMovingGpus()
    for entity in range(8):
        restored.add_gpu(entity, 0)
    restored.load_state_dict(first.state_dict())
    assert [(6, 6), (7, 6)] == restored.take_changes()
    _feed(restored, power[half:], half * STEP)
    for name, value in original.state_dict().items():
        np.testing.assert_allclose(value, restored.state_dict()[name], err_msg=name)
    other = CoMovingGpus()
    for entity in range(8):
        other.add_gpu(entity, entity // 4)
    with pytest.raises(ValueError, match="not the index's"):
        other.load_state_dict(first.state_dict())
    older = {k: v for k, v in first.state_dict().items() if k != "joined"}  # saved before it
    earlier = CoMovingGpus()
    for entity in range(8):
        earlier.add_gpu(entity, 0)
    earlier.load_state_dict(older)
    assert [(6, 6), (7, 6)] == earlier.take_changes()
    assert [0] * 8 == earlier.joined.tolist()  # proven anew


def test_gpus_are_added_in_entity_order() -> None:
    comoving = CoMovingGpus()
    comoving.add_gpu(0, 0)
    with pytest.raises(ValueError, match="out of order"):
        comoving.add_gpu(2, 0)


def _gpu_info(gpu: str, pod: str | None = None) -> SeriesInfo:
    labels = [("gpu", gpu), ("Hostname", "n1")] + ([("exported_pod", pod)] if pod else [])
    return SeriesInfo(0, *normalize("DCGM_FI_DEV_POWER_USAGE", tuple(labels), LabelRules()))


def test_a_workload_label_wins_over_co_movement() -> None:
    """A GPU whose series name its pod keeps the pod's team whatever its power says; once the
    label is gone, the team co-movement found for it applies."""
    teams = GpuTeams(LabelRules())
    teams.add_gpu(0, 0, _gpu_info("0", "train-a"))
    teams.add_gpu(1, 0, _gpu_info("1"))
    labelled = teams.of[0]
    assert labelled != 0
    assert teams.infer(0, 5) is None  # the label wins
    assert labelled == teams.of[0]
    inferred = teams.infer(1, 5)
    assert inferred is not None
    assert inferred not in (0, labelled)
    assert [True, False] == teams.labelled_mask(2).tolist()
    assert inferred == teams.move(0, _gpu_info("0"))  # label gone: its inferred team
    assert [False, False] == teams.labelled_mask(2).tolist()
    assert 0 == teams.infer(1, -1)  # back to the node's own team


def test_a_node_split_by_co_movement_is_told_from_one_split_by_labels() -> None:
    teams = GpuTeams(LabelRules())
    for gpu in range(3):
        teams.add_gpu(gpu, 0, _gpu_info(str(gpu)))
    teams.infer(2, 2)
    teams.note_split(0, "n1")
    assert set() == teams.split_nodes
    assert {"n1"} == teams.inferred_split_nodes
    teams.recount()
    assert 0 == teams.workloads_at_once  # inferred groups are no named workloads


def _replay(scenario: Scenario, comovement: str) -> ReplayResult:
    """An unlabelled replay of ``scenario``, co-movement following ``comovement`` (the
    activity split off: it alone removes these alerts, tests/test_gpu_activity.py)."""
    env = {
        "DETECTOR_LABELS__GPU_WORKLOAD_LABELS": "[]",
        "DETECTOR_LABELS__GPU_WORKLOAD_COMOVEMENT": comovement,
        "DETECTOR_LABELS__GPU_ACTIVITY_SIGNAL": "",
    }
    config = load_config(None, env=env)
    index = SeriesIndex(LabelRules.from_config(config.labels))
    cluster = SimulatedCluster(scenario)
    return run_replay(TickLoop.from_config(config, index), simulated_frames(cluster, index))


def test_a_replay_tells_apart_the_jobs_of_shared_nodes_without_labels() -> None:
    """The simulator's shared nodes (two GPUs each in side jobs of their own), with no
    workload label: co-movement splits exactly those nodes, judges GPUs alone on no other,
    the summary names them, and fewer alerts fire than with all GPUs of a node as peers."""
    scenario = dataclasses.replace(
        Scenario.demo(), nodes=8, days=0.5, seed=41, shared_nodes=3, failure_count=0
    )
    result = _replay(scenario, "power_usage")
    assert ("node-01", "node-05", "node-08") == result.inferred_split_nodes
    assert (
        "GPU workloads inferred: on 3 nodes GPUs that no workload label names moved as "
        "separate jobs, each group judged against its own (labels.gpu_workload_comovement): "
        "node-01, node-05, node-08"
    ) in summary_lines(result)
    # between side jobs, the side GPUs idle beside their node's job: judged alone
    assert result.alone_nodes
    assert set(result.alone_nodes) <= set(result.inferred_split_nodes)
    assert any(line.startswith("GPUs judged alone: ") for line in summary_lines(result))
    off = _replay(scenario, "")  # off
    assert () == off.inferred_split_nodes == off.alone_nodes
    assert not any("inferred" in line or "alone" in line for line in summary_lines(off))
    assert len(result.alerts) < len(off.alerts)


def test_a_tick_without_any_reading_is_as_if_it_were_not() -> None:
    """Every GPU labelled, or a pipeline tick between two DCGM scrapes: a tick with no power
    reading leaves the state exactly as skipping it would (the next tick's decays span it)."""
    power = _power([0] * 6 + [1] * 2, hours=3)
    plain, _ = _run(power)
    gappy = CoMovingGpus()
    for entity in range(8):
        gappy.add_gpu(entity, 0)
    blank = np.full(8, np.nan)
    for k, row in enumerate(power):
        gappy.observe(k * STEP - STEP / 2, blank)  # a tick between two scrapes
        gappy.observe(k * STEP, row)
    for name, value in plain.state_dict().items():
        np.testing.assert_allclose(value, gappy.state_dict()[name], err_msg=name)
