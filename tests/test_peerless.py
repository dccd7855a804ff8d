"""Nodes without enough peers: their node-level signals are scored against their own past
(``own_past``), one mechanism in the pipeline's scorer masks (pipeline/tick.py)."""

from __future__ import annotations

import numpy as np

from detector.config.load import load_config
from detector.model import ColumnLayout, Frame, Labels
from detector.pipeline.build import build_pipeline
from detector.pipeline.tick import Pipeline, ScorerStage
from detector.scorers.registry import grid_layout
from detector.series.index import SeriesIndex
from detector.series.labels import LabelRules

T0 = 1_700_000_000.0
STEP = 15.0
LOAD, ARP, EDAC = "node_load1", "node_arp_entries", "node_edac_correctable_errors_total"


def node_series(node: str) -> Labels:
    return (("instance", f"{node}:9100"),)


def pipeline(env: dict[str, str] | None = None) -> Pipeline:
    config = load_config(None, env=env or {})
    return build_pipeline(config, SeriesIndex(LabelRules.from_config(config.labels)))


def add_node(p: Pipeline, node: str) -> None:
    """A node sending node_load1 (rule: peers), node_arp_entries (no rule) and an EDAC
    counter (rule: counts)."""
    for metric in (LOAD, ARP, EDAC):
        p.index.add(metric, node_series(node))


def step(p: Pipeline, k: int, rng: np.random.Generator) -> None:
    values = 10.0 + rng.normal(size=len(p.index))
    p.step(Frame(T0 + STEP * k, values))


def scored_by(p: Pipeline, scorer: str) -> set[tuple[str, str]]:
    """(signal, node) of the columns ``scorer`` applies to now."""
    layout = p.signal_map.layout
    return {
        (layout.signal_names[layout.signal[c]], layout.node_names[layout.node[c]])
        for c in np.flatnonzero(p._applies[scorer]).tolist()
    }


def test_a_single_node_is_scored_against_its_own_past() -> None:
    """Alone: the peer-scored signal and the metric no rule names go to own_past (the latter
    to nothing else); the counts-scored counter keeps its own rule only."""
    p = pipeline()
    add_node(p, "a")
    rng = np.random.default_rng(0)
    step(p, 0, rng)
    assert {("node_load", "a"), (ARP, "a")} == scored_by(p, "own_past")
    assert {("node_load", "a")} == scored_by(p, "peers")
    assert {("edac_correctable", "a")} == scored_by(p, "counts")


def test_a_cohort_big_enough_keeps_peers_only() -> None:
    """Three nodes in one cohort: nothing for own_past, and the metric no rule names has no
    column (default_rule.node_level is off)."""
    p = pipeline()
    for node in ("a", "b", "c"):
        add_node(p, node)
    step(p, 0, np.random.default_rng(0))
    assert set() == scored_by(p, "own_past")
    assert {"node_load", "edac_correctable", "health_targets_frozen_fraction"} >= set(
        p.signal_map.layout.signal_names
    )


def test_turned_off_a_single_node_gets_no_own_past() -> None:
    """scoring.own_past_when_peerless false: no own_past scorer, no column for the metric
    no rule names."""
    p = pipeline({"DETECTOR_SCORING__OWN_PAST_WHEN_PEERLESS": "false"})
    add_node(p, "a")
    step(p, 0, np.random.default_rng(0))
    assert "own_past" not in {s.name for s in p.scorers}
    assert ARP not in p.signal_map.layout.signal_names


def test_a_node_that_gains_peers_leaves_its_own_past() -> None:
    """Node a alone, then b and c join its cohort: a's columns stop being scored by own_past;
    they keep their slots (fed nothing, so their state waits) and score 0."""
    p = pipeline()
    add_node(p, "a")
    rng = np.random.default_rng(1)
    for k in range(150):
        step(p, k, rng)
    assert {("node_load", "a"), (ARP, "a")} == scored_by(p, "own_past")
    add_node(p, "b")
    add_node(p, "c")
    step(p, 150, rng)
    assert set() == scored_by(p, "own_past")
    assert 2 == p.scoring.subsets["own_past"].shape[0]
    assert np.all(p.scoring._rows["own_past"] == 0.0)


def test_a_restored_state_lines_own_past_up_with_columns_rebuilt_in_another_order() -> None:
    """A single node whose peer-scored memory series arrives after its unnamed one got its
    column: a restored index rebuilds the unnamed column last, so the scorer's slots are
    restored by column identity, and the restored pipeline carries on with the same scores."""
    p = pipeline()
    add_node(p, "a")
    rng = np.random.default_rng(2)
    for k in range(100):
        step(p, k, rng)
    p.index.add("node_memory_MemAvailable_bytes", node_series("a"))
    for k in range(100, 200):
        step(p, k, rng)
    arrays, meta = p.state_dict()
    restored = pipeline()
    restored.load_state_dict(arrays, meta)
    assert slot_names(p) == slot_names(restored)
    assert p.scoring.subsets["own_past"].tolist() != restored.scoring.subsets["own_past"].tolist()
    own_past = []
    for k in range(200, 260):
        values = 10.0 + rng.normal(size=len(p.index))
        a = p.step(Frame(T0 + STEP * k, values))
        b = restored.step(Frame(T0 + STEP * k, values.copy()))
        assert by_name(p, a.column_z) == by_name(restored, b.column_z)
        own_past.append(p.scoring._rows["own_past"].max())
    assert max(own_past) > 0.0  # the comparison covers own_past's scores


def slot_names(p: Pipeline) -> list[tuple[str, str, str | None, int]]:
    return [p.signal_map.column_names(c) for c in p.scoring.subsets["own_past"].tolist()]


def by_name(p: Pipeline, z: np.ndarray) -> dict[tuple[str, str, str | None, int], float]:
    return {p.signal_map.column_names(c): float(z[c]) for c in range(z.shape[0])}


class Recorder:
    """A scorer that returns its input + 1 and remembers what it was fed."""

    name = "rec"

    def __init__(self) -> None:
        self.fed: list[np.ndarray] = []

    def update(self, t: float, x: np.ndarray, layout: ColumnLayout) -> np.ndarray:
        self.fed.append(x.copy())
        return np.nan_to_num(x) + 1.0

    def state_dict(self) -> dict[str, np.ndarray]:
        return {}

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        return None


def test_columns_that_join_later_are_appended_and_those_that_leave_are_fed_nan() -> None:
    """A scorer's state order is its columns' order of arrival: column 0 joining after column
    2 comes second; a column that leaves keeps its place, is fed NaN and scores 0."""
    layout = grid_layout(3, 0, (), ("load",))
    stage = ScorerStage([Recorder()])
    rec = stage.scorers[0]
    assert isinstance(rec, Recorder)
    x = np.array([10.0, 20.0, 30.0])
    stage.set_layout({"rec": np.array([False, False, True])}, layout)
    stage.run(0.0, x)
    stage.set_layout({"rec": np.array([True, False, True])}, layout)
    rows = stage.run(1.0, x)
    assert [2, 0] == stage.subsets["rec"].tolist()
    assert [30.0, 10.0] == rec.fed[-1].tolist()
    assert [11.0, 0.0, 31.0] == rows["rec"].tolist()
    stage.set_layout({"rec": np.array([True, False, False])}, layout)
    rows = stage.run(2.0, x)
    assert [2, 0] == stage.subsets["rec"].tolist()
    assert np.isnan(rec.fed[-1][0])
    assert 10.0 == rec.fed[-1][1]
    assert [11.0, 0.0, 0.0] == rows["rec"].tolist()
