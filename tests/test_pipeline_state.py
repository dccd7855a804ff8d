"""Tick loop state: a restart restores every stage, so scores and alerts continue as if nothing
happened."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from detector.config.load import load_config
from detector.loop import TickLoop
from detector.model import Frame
from detector.pipeline import Pipeline
from detector.replay.run import simulated_frames
from detector.series.index import SeriesIndex
from detector.series.labels import LabelRules
from detector.sim import Scenario, SimulatedCluster


def small_cluster(**changes: float) -> SimulatedCluster:
    fields = {"nodes": 6, "days": 0.15, "failure_count": 2, "seed": 3, **changes}
    scenario = dataclasses.replace(Scenario.demo(), **fields)
    return SimulatedCluster(scenario)


@pytest.mark.parametrize(
    "changes",
    [{}, {"step_s": 15.0, "dcgm_collect_every": 2, "scrape_loss": 0.05}],
    ids=["fresh pages", "cached and lost pages"],
)
def test_restored_pipeline_continues_exactly_like_the_original(changes: dict[str, float]) -> None:
    """Save mid-run (arrays + JSON metadata), restore into a fresh pipeline: identical scores,
    also where dcgm-exporter serves cached pages and scrapes are lost (the repeat detector and
    the pipeline's missed-tick bridge carry state from one tick to the next)."""
    config = load_config(None, env={})
    index = SeriesIndex()
    frames = list(simulated_frames(small_cluster(**changes), index))
    original = TickLoop.from_config(config, index)
    half = len(frames) // 2
    for frame in frames[:half]:
        original.step(frame)
    arrays, meta = original.state_dict()
    meta = json.loads(json.dumps(meta))  # what a state file holds
    restored = TickLoop.from_config(config, SeriesIndex())
    restored.load_state_dict({k: v.copy() for k, v in arrays.items()}, meta)
    assert [i.metric for i in index.infos] == [i.metric for i in restored.pipeline.index.infos]
    peak = 0.0
    for frame in frames[half:]:
        a = original.step(Frame(frame.time, frame.values.copy()))
        b = restored.step(Frame(frame.time, frame.values.copy()))
        assert np.array_equal(a.node_score, b.node_score, equal_nan=True)
        assert np.array_equal(a.scores.gpu_score, b.scores.gpu_score, equal_nan=True)
        assert a.started == b.started
        assert a.ended == b.ended
        peak = max(peak, float(np.nanmax(a.scores.gpu_score)))
    assert 6 == len(a.node_names)
    assert peak > 0.0  # the comparison covered real scores, not an empty pipeline


def test_restore_refuses_another_version() -> None:
    """A state of another version is refused with a reason (the daemon then starts clean)."""
    config = load_config(None, env={})
    pipeline = TickLoop.from_config(config, SeriesIndex())
    arrays, meta = pipeline.state_dict()
    meta["pipeline"]["version"] = 99
    with pytest.raises(ValueError, match="version"):
        TickLoop.from_config(config, SeriesIndex()).load_state_dict(arrays, meta)


def test_a_restart_keeps_the_gpu_jobs_co_movement_told_apart() -> None:
    """Unlabelled shared nodes (two GPUs each in side jobs): the groups co-movement found
    before the save are the restored pipeline's from its first tick, and scores continue
    identically."""
    env = {"DETECTOR_LABELS__GPU_WORKLOAD_LABELS": "[]"}
    config = load_config(None, env=env)
    rules = LabelRules.from_config(config.labels)
    index = SeriesIndex(rules)
    cluster = small_cluster(days=0.3, shared_nodes=2)
    frames = list(simulated_frames(cluster, index))
    original = TickLoop.from_config(config, index)
    half = len(frames) // 2
    for frame in frames[:half]:
        original.step(frame)
    assert original.pipeline.teams().inferred_split_nodes  # groups to carry over
    arrays, meta = original.state_dict()
    restored = TickLoop.from_config(config, SeriesIndex(rules))
    restored.load_state_dict({k: v.copy() for k, v in arrays.items()}, json.loads(json.dumps(meta)))
    for frame in frames[half:]:
        a = original.step(Frame(frame.time, frame.values.copy()))
        b = restored.step(Frame(frame.time, frame.values.copy()))
        assert np.array_equal(a.scores.gpu_score, b.scores.gpu_score, equal_nan=True)
        assert _teams(original.pipeline) == _teams(restored.pipeline)


def _teams(pipeline: Pipeline) -> set[frozenset[int]]:
    """The pipeline's GPU teams as sets of GPU entities (a team's id is only a name, given
    in the order teams were found, which a restore need not repeat)."""
    members: dict[int, set[int]] = {}
    for entity, team in pipeline.signal_map.teams.of.items():
        members.setdefault(team, set()).add(entity)
    return {frozenset(m) for m in members.values()}
