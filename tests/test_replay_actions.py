"""Node exclusions are decided in the tick loop: a replay with ``actions`` enabled lists the
exclusions ``run`` would have made (dry-run by default) and prints them in its summary."""

from __future__ import annotations

from detector.config import load_config
from detector.loop import TickLoop
from detector.replay import run_replay, simulated_frames, summary_lines
from detector.series import LabelRules, SeriesIndex
from detector.sim import FailureSpec, Scenario, SimulatedCluster

SCENARIO = Scenario(
    nodes=6,
    gpus=2,
    days=0.1,
    fault_trace=None,
    noisy_nodes=0,
    seed=4,
    failures=(
        FailureSpec("gsp", node=1, gpu=0, at_s=2400.0, lead_s=0.0, xid=119),
        FailureSpec("ecc", node=4, gpu=1, at_s=5400.0, lead_s=0.0, xid=48),
    ),
    repair_cap_s=900.0,
)


def test_a_replay_lists_the_exclusions_run_would_make() -> None:
    """The first failure XID's node is excluded, in dry-run; the second would pass the share
    cap (10% of 6 nodes: one node), so it is refused and the breaker opens; the summary says
    both."""
    config = load_config(None, env={"DETECTOR_ACTIONS__ENABLED": "true"})
    index = SeriesIndex(LabelRules.from_config(config.labels))
    cluster = SimulatedCluster(SCENARIO)
    result = run_replay(
        TickLoop.from_config(config, index),
        simulated_frames(cluster, index),
        events=cluster.events(),
    )
    excluded = [d for d in result.actions if d.action == "exclude" and d.refused is None]
    assert [SCENARIO.node_name(1)] == [d.node for d in excluded]
    assert all(d.dry_run and not d.to_execute for d in excluded)
    refused = [(d.node, d.refused) for d in result.actions if d.refused is not None]
    assert (SCENARIO.node_name(4), "share_cap") == refused[0]
    assert {"breaker_open"} == {why for _, why in refused[1:]}
    lines = summary_lines(result)
    assert any(
        line.startswith("actions (dry-run): 1 node exclusion(s)") and SCENARIO.node_name(1) in line
        for line in lines
    ), lines
    assert any("refused (share_cap)" in line for line in lines), lines


def test_actions_off_decide_nothing() -> None:
    """The default config (actions off) decides no action and prints no action line."""
    config = load_config(None, env={})
    index = SeriesIndex(LabelRules.from_config(config.labels))
    cluster = SimulatedCluster(SCENARIO)
    result = run_replay(
        TickLoop.from_config(config, index),
        simulated_frames(cluster, index),
        events=cluster.events(),
    )
    assert [] == result.actions
    assert not any(line.startswith("actions") for line in summary_lines(result))
