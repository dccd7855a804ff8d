"""The action engine (detector/actions/engine.py): caps, breaker, dry-run, incidents, shadow,
holds, releases and a state round trip. Virtual clock: every ``now`` is passed in."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from detector.actions import (
    ActionEngine,
    ActionRequest,
    ActionRunner,
    Candidate,
    Decision,
    post_request,
    read_inbox,
)
from detector.config import ActionsConfig, load_config
from detector.errors import ActionError, ConfigError
from detector.model import Alert, XidEvent

T0 = 1_750_000_000.0


class RecordingExecutor:
    """A fake executor: records what it was asked to do; fails for the nodes in ``broken``."""

    def __init__(self, broken: tuple[str, ...] = ()) -> None:
        self.calls: list[tuple[str, str]] = []
        self.broken = broken

    async def apply(self, decision: Decision) -> None:
        self.calls.append(("exclude", decision.node))
        if decision.node in self.broken:
            raise ActionError(f"fake: node {decision.node} unreachable")

    async def release(self, decision: Decision) -> None:
        self.calls.append(("release", decision.node))

    async def aclose(self) -> None:
        return None


def _config(**overrides: Any) -> ActionsConfig:
    base: dict[str, Any] = {"enabled": True, "dry_run": False, "max_excluded_fraction": 1.0}
    return ActionsConfig(**(base | overrides))


def _xid(node: str, t: float, xid: int = 79) -> Candidate:
    return Candidate.from_xid(XidEvent(time=t, node=node, gpu="3", xid=xid))


def _alert(node: str, start: float, score: float, **kw: Any) -> Candidate:
    alert = Alert(
        node=node,
        gpu=None,
        start=start,
        end=None,
        peak_score=0.97,
        signals=("ecc_dbe", "power_usage"),
    )
    return Candidate.from_alert(alert, score, **kw)


def _results(decisions: list[Decision]) -> list[tuple[str, str, str]]:
    return [(d.action, d.node, d.result) for d in decisions]


def test_breaker_opens_when_failures_arrive_faster_than_the_cap() -> None:
    """Past max_per_hour the breaker opens, says so, and refuses until a person closes it."""
    engine = ActionEngine(_config(max_per_hour=2))
    got = []
    with capture_logs() as logs:
        for i in range(5):  # a failure XID on a new node every 10 minutes
            t = T0 + 600 * i
            got += _results(engine.update(t, [_xid(f"gpu-{i:02d}", t)], n_nodes=63))
    expected = [
        ("exclude", "gpu-00", "approved"),
        ("exclude", "gpu-01", "approved"),
        ("exclude", "gpu-02", "refused_rate_cap"),
        ("exclude", "gpu-03", "refused_breaker_open"),
        ("exclude", "gpu-04", "refused_breaker_open"),
    ]
    assert expected == got
    assert engine.stats().breaker_open
    opened = [e for e in logs if e["event"] == "action breaker open"]
    assert 1 == len(opened)
    assert "more than 2 exclusions within an hour" == opened[0]["reason"]
    # Latched: hours later, with the hour's window long past, still refused.
    later = T0 + 5 * 3600
    assert [("exclude", "gpu-10", "refused_breaker_open")] == _results(
        engine.update(later, [_xid("gpu-10", later)], n_nodes=63)
    )
    assert engine.close_breaker(later + 1, by="alice")
    after = later + 2
    assert [("exclude", "gpu-11", "approved")] == _results(
        engine.update(after, [_xid("gpu-11", after)], n_nodes=63)
    )


def test_share_cap_opens_the_breaker() -> None:
    """A 10% share of 20 nodes lets 2 be excluded at once; the third opens the breaker."""
    engine = ActionEngine(_config(max_excluded_fraction=0.1, max_per_hour=10))
    got = []
    for i in range(3):
        t = T0 + 7200 * i  # slow enough for the hourly cap
        got += _results(engine.update(t, [_xid(f"gpu-{i}", t)], n_nodes=20))
    assert ["approved", "approved", "refused_share_cap"] == [r for _, _, r in got]
    breaker = engine.breaker
    assert breaker is not None
    assert "would exclude 3 of 20 nodes (cap 2" in str(breaker["reason"])


def test_share_cap_allows_one_node_of_a_small_cluster() -> None:
    """The share cap is at least one node, so a 4-node cluster can still exclude one."""
    engine = ActionEngine(_config(max_excluded_fraction=0.1))
    assert [("exclude", "a", "approved")] == _results(engine.update(T0, [_xid("a", T0)], 4))


async def test_dry_run_logs_and_counts_but_changes_nothing() -> None:
    """Dry-run (the default once enabled): no executor call, one audit line, one count."""
    executor = RecordingExecutor()
    runner = ActionRunner(ActionEngine(ActionsConfig(enabled=True)), executor)
    with capture_logs() as logs:
        decisions = await runner.step(T0, [_xid("gpu-07", T0)], n_nodes=63)
    assert [("exclude", "gpu-07", "dry_run")] == _results(decisions)
    assert [] == executor.calls
    audit = [e for e in logs if e["event"] == "action"]
    assert [("exclude", "gpu-07", "dry_run", "failure XID 79 on GPU 3")] == [
        (e["action"], e["node"], e["result"], e["reason"]) for e in audit
    ]
    stats = runner.engine.stats()
    assert {("exclude", "dry_run"): 1} == dict(stats.decisions)
    assert (0, 1) == (stats.excluded, stats.excluded_dry_run)


async def test_an_enabled_engine_excludes_through_the_executor() -> None:
    """Not in dry-run, the decision reaches the executor and counts as done."""
    executor = RecordingExecutor()
    runner = ActionRunner(ActionEngine(_config()), executor)
    await runner.step(T0, [_xid("gpu-07", T0)], n_nodes=63)
    assert [("exclude", "gpu-07")] == executor.calls
    assert {("exclude", "done"): 1} == dict(runner.engine.stats().decisions)


def test_disabled_engine_decides_nothing() -> None:
    """The default config (actions.enabled false) never decides anything."""
    engine = ActionEngine(load_config(None, {}).actions)
    assert [] == engine.update(T0, [_xid("gpu-01", T0)], n_nodes=63)
    assert {} == dict(engine.stats().decisions)


def test_never_acts_on_cluster_incidents_nor_in_shadow_mode() -> None:
    """An incident's alert and anything in shadow mode are refused, said once per alert."""
    engine = ActionEngine(_config(alert_classes=["*"], alert_hold_s=0))
    incident = _alert("gpu-01", T0, 0.95, incident=True)
    first = engine.update(T0, [incident], n_nodes=63)
    again = engine.update(T0 + 15, [incident], n_nodes=63)  # still open: not said twice
    shadowed = engine.update(T0 + 30, [_xid("gpu-02", T0 + 30)], n_nodes=63, shadow=True)
    assert [("exclude", "gpu-01", "refused_cluster_incident")] == _results(first)
    assert [] == again
    assert [("exclude", "gpu-02", "refused_shadow")] == _results(shadowed)
    assert {} == dict(engine.excluded)


def test_an_alert_acts_only_once_its_score_is_held_long_enough() -> None:
    """A dip below alert_min_score restarts the hold; the class must be configured."""
    engine = ActionEngine(_config(alert_classes=["memory"], alert_min_score=0.9, alert_hold_s=600))
    start = T0
    ticks = [(0, 0.95), (300, 0.95), (450, 0.5), (600, 0.95), (900, 0.95), (1200, 0.95)]
    acted_at = []
    for dt, score in ticks:
        cand = _alert("gpu-05", start, score, failure_class="memory")
        if engine.update(start + dt, [cand], n_nodes=63):
            acted_at.append(dt)
    assert [1200] == acted_at
    other = ActionEngine(_config(alert_classes=["memory"], alert_hold_s=0))
    thermal = _alert("gpu-06", start, 0.99, failure_class="thermal")
    assert [] == other.update(start, [thermal], n_nodes=63)


def test_state_round_trip_is_idempotent() -> None:
    """After a save and restore (through JSON), the same failure is not acted on twice and
    the breaker, the hour's exclusions and the counters carry over."""
    config = _config(max_per_hour=1, alert_classes=["*"], alert_hold_s=0)
    engine = ActionEngine(config)
    alert = _alert("gpu-01", T0, 0.95)
    assert [("exclude", "gpu-01", "approved")] == _results(engine.update(T0, [alert], 63))
    engine.update(T0 + 60, [_xid("gpu-02", T0 + 60)], 63)  # refused: opens the breaker
    restored = ActionEngine(config)
    restored.load_state_dict(json.loads(json.dumps(engine.state_dict())))
    assert [] == restored.update(T0 + 120, [alert], 63)
    assert ["gpu-01"] == list(restored.excluded)
    assert restored.breaker == engine.breaker
    assert engine.stats() == restored.stats()


def test_a_state_of_another_version_is_refused_whole() -> None:
    """load_state_dict raises ValueError and keeps the engine as it was."""
    engine = ActionEngine(_config())
    engine.update(T0, [_xid("gpu-01", T0)], 63)
    with pytest.raises(ValueError, match="version"):
        engine.load_state_dict({"version": 99})
    assert ["gpu-01"] == list(engine.excluded)


def test_only_a_person_releases_unless_a_policy_is_set() -> None:
    """Without release_after_s a node stays excluded; a person's release does not make the
    same open alert exclude it again."""
    engine = ActionEngine(_config(alert_classes=["*"], alert_hold_s=0))
    alert = _alert("gpu-01", T0, 0.95)
    engine.update(T0, [alert], 63)
    assert [] == engine.update(T0 + 30 * 86400, [alert], 63)  # open a month: still excluded
    released = engine.release("gpu-01", T0 + 30 * 86400, by="alice")
    assert released is not None
    assert ("release", "released by alice") == (released.action, released.reason)
    assert [] == engine.update(T0 + 30 * 86400 + 15, [alert], 63)
    assert None is engine.release("gpu-01", T0 + 30 * 86400 + 30, by="alice")


def test_release_policy_frees_a_node_after_quiet_hours() -> None:
    """release_after_s counts from the node's last confirmed failure."""
    engine = ActionEngine(_config(release_after_s=4 * 3600))
    engine.update(T0, [_xid("gpu-01", T0)], 63)
    engine.update(T0 + 3 * 3600, [_xid("gpu-01", T0 + 3 * 3600, xid=48)], 63)  # again
    assert [] == engine.update(T0 + 6 * 3600, [], 63)
    out = engine.update(T0 + 7 * 3600, [], 63)
    assert [("release", "gpu-01", "approved")] == _results(out)
    assert "no confirmed failure for 4 h" == out[0].reason


async def test_a_failed_exclusion_is_counted_and_forgotten() -> None:
    """An executor error is counted as failed; the node is not recorded as excluded."""
    runner = ActionRunner(ActionEngine(_config()), RecordingExecutor(broken=("gpu-01",)))
    await runner.step(T0, [_xid("gpu-01", T0)], 63)
    assert {("exclude", "failed"): 1} == dict(runner.engine.stats().decisions)
    assert {} == dict(runner.engine.excluded)


def test_requests_from_the_inbox_release_without_acting_again() -> None:
    """A release done by ``detector actions release`` is recorded as done, not re-run."""
    engine = ActionEngine(_config(max_per_hour=1))
    engine.update(T0, [_xid("gpu-01", T0)], 63)
    engine.update(T0 + 1, [_xid("gpu-02", T0 + 1)], 63)  # opens the breaker
    requests = [
        ActionRequest("release", "gpu-01", "alice", T0 + 100),
        ActionRequest("close_breaker", "", "alice", T0 + 100),
    ]
    out = engine.apply_requests(requests, T0 + 101)
    assert [("release", "gpu-01", "approved")] == _results(out)
    assert {} == dict(engine.excluded)
    assert None is engine.breaker
    assert 1 == engine.stats().decisions[("release", "done")]


def test_a_released_node_is_not_excluded_again_for_the_same_alert_after_a_restart() -> None:
    """The acted-on alert ids are state too: after a release and a restart, the alert that
    is still open does not exclude the node a second time; a new alert does."""
    config = _config(alert_classes=["*"], alert_hold_s=0)
    engine = ActionEngine(config)
    alert = _alert("gpu-01", T0, 0.95)
    engine.update(T0, [alert], 63)
    engine.release("gpu-01", T0 + 60, by="alice")
    restored = ActionEngine(config)
    restored.load_state_dict(json.loads(json.dumps(engine.state_dict())))
    assert [] == restored.update(T0 + 120, [alert], 63)
    new_alert = _alert("gpu-01", T0 + 3600, 0.95)
    assert [("exclude", "gpu-01", "approved")] == _results(
        restored.update(T0 + 3600, [alert, new_alert], 63)
    )


def test_a_release_by_the_policy_frees_room_in_the_same_tick() -> None:
    """Releases are decided before exclusions, so a node freed now makes room under the
    share cap for a failure in the same tick."""
    engine = ActionEngine(_config(max_excluded_fraction=0.05, release_after_s=3600))
    engine.update(T0, [_xid("gpu-01", T0)], n_nodes=20)  # cap: 1 node
    t = T0 + 3600
    out = engine.update(t, [_xid("gpu-02", t)], n_nodes=20)
    assert [("release", "gpu-01", "approved"), ("exclude", "gpu-02", "approved")] == _results(out)
    assert None is engine.breaker


@pytest.mark.parametrize(
    ("env", "complaint"),
    [
        ({"DETECTOR_ACTIONS__KIND": "webhook"}, "actions: kind webhook needs webhook.url"),
        (
            {"DETECTOR_ACTIONS__KUBERNETES__TAINT_KEY": "bad key!"},
            "actions.kubernetes.taint_key: not a Kubernetes qualified name",
        ),
        ({"DETECTOR_ACTIONS__MAX_EXCLUDED_FRACTION": "1.5"}, "actions.max_excluded_fraction"),
        ({"DETECTOR_ACTIONS__KUBERNETES__TAINT_EFFECT": "Sometimes"}, "taint_effect"),
    ],
)
def test_bad_actions_config_is_refused_naming_the_field(
    env: dict[str, str], complaint: str
) -> None:
    """The actions section is validated at load time; the message names source and field."""
    with pytest.raises(ConfigError, match=re.escape(complaint)):
        load_config(None, {"DETECTOR_ACTIONS__ENABLED": "true", **env})


def test_a_malformed_inbox_line_names_file_and_line(tmp_path: Path) -> None:
    """A hand-edited inbox with a bad line is an ActionError naming file and line."""
    inbox = tmp_path / "state.npz.actions-inbox.jsonl"
    post_request(inbox, ActionRequest("release", "gpu-01", "alice", T0))
    with inbox.open("a") as fh:
        fh.write('{"op": "reboot", "node": "gpu-02", "by": "x", "time": 1}\n')
    with pytest.raises(ActionError, match=rf"{re.escape(str(inbox))}:2: .*unknown op 'reboot'"):
        read_inbox(inbox)
