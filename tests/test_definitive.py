"""Definitive structural evidence in the tick loop's decisions: a GPU gone from a page its node's
exporter still serves (``TickResult.definitive``) fires its node's alert on that tick, whatever
the threshold and the minimum duration, and pages; statistical evidence still waits
``alerts.min_duration_s``; both survive a restart and a calibration's re-decision."""

from __future__ import annotations

import numpy as np

from detector.config import Config, load_xid_catalog
from detector.loop import Decisions, LoopTick, TickLoop, episode_params
from detector.pipeline import TickResult
from detector.replay.run import run_replay, simulated_frames
from detector.series import SeriesIndex
from detector.sim import FailureSpec, Scenario, SimulatedCluster

T0 = 1_700_000_000.0
STEP = 15.0
NODES = ("n1", "n2")
CONFIG = Config()  # min_duration_s 60 and min_observations 3: four ticks of 15 s
_EMPTY = np.zeros(0)


def decisions() -> Decisions:
    return Decisions.from_config(CONFIG, load_xid_catalog(), episode_params(CONFIG, None))


def scored(
    k: int, scores: tuple[float, float], definitive: tuple[tuple[str, str | None], ...] = ()
) -> TickResult:
    return TickResult(
        time=T0 + STEP * k,
        node_names=NODES,
        node_score=np.array(scores),
        gpu_node=np.zeros(0, dtype=np.int64),
        gpu_label=(),
        gpu_score=_EMPTY,
        xids=(),
        incidents=(),
        definitive=definitive,
    )


EVIDENCE = {  # per node: its leading signals and GPU, as the pipeline would name them
    0: (("health_gpu_count", "health_series_missing_fraction"), "5"),
    1: (("gpu_temp",), "1"),
}


def evidence(node: int) -> tuple[tuple[str, ...], str | None]:
    return EVIDENCE[node]


def run(d: Decisions, ticks: list[TickResult]) -> list[LoopTick]:
    return [d.decide(tick, (), evidence) for tick in ticks]


def timeline() -> list[TickResult]:
    """n1: a GPU vanishes at tick 2 (score 0.3, below the 0.6 threshold); n2: a statistical
    deviation above the threshold from tick 2 on."""
    ticks = [scored(k, (0.0, 0.0)) for k in range(2)]
    ticks.append(scored(2, (0.3, 0.9), definitive=(("n1", "5"),)))
    ticks += [scored(k, (0.3, 0.9)) for k in range(3, 9)]
    return ticks


def test_definitive_evidence_fires_and_pages_on_the_tick_that_shows_it() -> None:
    """The vanished GPU's node is notified on its first tick, critical, naming the GPU and its
    presence signals, though its score is under the threshold."""
    [tick] = [t for t in run(decisions(), timeline()) if t.notified and t.notified[0].node == "n1"]
    assert T0 + 2 * STEP == tick.time
    [alert] = tick.notified
    assert (T0 + 2 * STEP, "5", True) == (alert.start, alert.gpu, alert.definitive)
    [note] = [n for n in tick.notifications if dict(n.labels)["node"] == "n1"]
    labels = dict(note.labels)
    assert ("critical", "health_gpu_count", "5") == (
        labels["severity"],
        labels["signal"],
        labels["gpu"],
    )
    assert "gone from the page" in dict(note.annotations)["description"]


def test_statistical_evidence_still_waits_its_minimum_duration() -> None:
    """The deviation on the other node fires min_duration_s after it began, as a warning."""
    ticks = run(decisions(), timeline())
    [(time, alert)] = [(t.time, a) for t in ticks for a in t.notified if a.node == "n2"]
    assert (T0 + 2 * STEP + CONFIG.alerts.min_duration_s, False) == (time, alert.definitive)
    [note] = [n for t in ticks for n in t.notifications if dict(n.labels)["node"] == "n2"][:1]
    assert "warning" == dict(note.labels)["severity"]


def test_definitive_evidence_holds_its_alert_for_the_xid_hold_then_follows_the_score() -> None:
    """Forced for ``xid_hold_s`` from the tick that showed it, then resolved by the score (0.3
    is under the clear level) like any alert: the GPU staying gone does not force it again."""
    hold = CONFIG.alerts.xid_hold_s
    ticks = [scored(0, (0.0, 0.0)), scored(1, (0.3, 0.0), definitive=(("n1", "5"),))]
    n = int((hold + CONFIG.alerts.clear_duration_s) / STEP) + 4
    ticks += [scored(k, (0.3, 0.0)) for k in range(2, n)]
    ended = [(t.time, a.node) for t in run(decisions(), ticks) for a in t.ended]
    [(end, node)] = ended
    assert "n1" == node
    assert T0 + STEP + hold < end <= T0 + STEP + hold + CONFIG.alerts.clear_duration_s + STEP


def test_a_restart_keeps_the_episode_definitive() -> None:
    """Saved while forced and restored into fresh decisions, the open alert is still the
    definitive one (it keeps paging)."""
    first = decisions()
    run(first, timeline()[:4])
    arrays, meta = first.state_dict()
    second = decisions()
    second.load_state_dict(arrays, meta)
    [alert] = [a for a in second.open_sent_alerts() if a.node == "n1"]
    assert (True, T0 + 2 * STEP) == (alert.definitive, alert.start)


def test_calibration_re_decides_a_vanished_gpu_as_the_replay_did() -> None:
    """A simulated GPU off the bus (XID 79, no precursor) with a threshold no score reaches:
    the replay alerts within two ticks of the fault, definitive, and its Recording re-decided at
    the same parameters (what calibrate does) gives the same alert."""
    scenario = Scenario(
        nodes=3,
        gpus=4,
        days=0.05,
        step_s=STEP,
        seed=2,
        fault_trace=None,
        noisy_nodes=0,
        failures=(FailureSpec("pcie", node=1, gpu=2, at_s=1800.0, lead_s=0.0, xid=79),),
        repair_cap_s=600.0,
    )
    config = Config.model_validate({"alerts": {"threshold": 0.999}})
    index = SeriesIndex()
    loop = TickLoop.from_config(config, index)
    frames = simulated_frames(SimulatedCluster(scenario), index)
    result = run_replay(loop, frames, record_scores=True)
    fault = scenario.start + 1800.0
    assert [("node-02", "2", True)] == [(a.node, a.gpu, a.definitive) for a in result.alerts]
    assert fault < result.alerts[0].start <= fault + 2 * STEP  # confirmed on its second tick
    assert result.recording is not None
    decided = result.recording.decide(loop.decisions.fresh(episode_params(config, None)))
    assert [(a.node, a.start) for a in result.alerts] == [(a.node, a.start) for a in decided.alerts]
