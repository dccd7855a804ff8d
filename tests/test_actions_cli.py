"""``detector actions`` (list, release, close-breaker) over a real state file, and the
action figures on /metrics."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families
from structlog.testing import capture_logs
from test_actions_webhook import Receiver

from detector.actions import (
    STATE_KEY,
    ActionEngine,
    ActionRequest,
    Candidate,
    drain_inbox,
    inbox_path,
)
from detector.cli import main
from detector.config import load_config
from detector.model import XidEvent
from detector.service import save_state
from detector.service.export import Exporter

T0 = 1_750_000_000.0


@pytest.fixture(autouse=True)
def _quiet_logs() -> Iterator[None]:
    """The engine's audit lines are not the CLI's output: keep them out of stdout."""
    with capture_logs():
        yield


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    thread = threading.Thread(target=r.server.serve_forever, daemon=True)
    thread.start()
    try:
        yield r
    finally:
        r.server.shutdown()
        r.server.server_close()
        thread.join()


def _setup(tmp_path: Path, url: str, dry_run: bool) -> tuple[Path, ActionEngine]:
    """A config naming a state file, and a state file whose engine excluded gpu-03."""
    state = tmp_path / "state.npz"
    config_path = tmp_path / "config.yaml"
    config_path.write_text(
        f"state:\n  path: {state}\n"
        f"actions:\n  enabled: true\n  dry_run: {str(dry_run).lower()}\n  kind: webhook\n"
        f"  max_per_hour: 1\n  webhook:\n    url: {url}\n    attempts: 1\n"
    )
    engine = ActionEngine(load_config(config_path).actions)
    event = XidEvent(time=T0, node="gpu-03", gpu="2", xid=79)
    engine.update(T0, [Candidate.from_xid(event, "memory")], n_nodes=63)
    other = XidEvent(time=T0 + 60, node="gpu-04", gpu="0", xid=79)
    engine.update(T0 + 60, [Candidate.from_xid(other)], n_nodes=63)  # opens the breaker
    save_state(state, {}, {"loop": {STATE_KEY: engine.state_dict()}})
    return config_path, engine


def test_lists_what_is_excluded_and_why(
    tmp_path: Path, receiver: Receiver, capsys: pytest.CaptureFixture[str]
) -> None:
    """One node, its class, reason, alert and evidence, and the open breaker."""
    config, _ = _setup(tmp_path, receiver.url, dry_run=False)
    assert 0 == main(["actions", "--config", str(config)])
    out = capsys.readouterr().out.splitlines()
    assert [
        "actions: webhook; breaker OPEN: more than 1 exclusions within an hour",
        "gpu-03  excluded since 2025-06-15 15:06:40Z  class memory",
        "    reason: failure XID 79 on GPU 2; alert xid79:gpu-03/2@1750000000",
        "    evidence: xid_79",
    ] == out


def test_release_undoes_the_exclusion_and_tells_the_daemon(
    tmp_path: Path, receiver: Receiver, capsys: pytest.CaptureFixture[str]
) -> None:
    """release NODE: the executor's release now, then a request in the inbox that the
    engine records without acting again; the list then shows it released."""
    config, engine = _setup(tmp_path, receiver.url, dry_run=False)
    assert 0 == main(["actions", "--config", str(config), "--by", "alice", "release", "gpu-03"])
    assert "gpu-03: released through webhook\n" == capsys.readouterr().out
    assert [("release", "gpu-03", "alice")] == [
        (b["event"], b["node"], b["by"]) for b in receiver.bodies
    ]
    main(["actions", "--config", str(config)])
    assert "released by alice at " in capsys.readouterr().out
    # A second release of the same node is refused: nothing left to release.
    assert 2 == main(["actions", "--config", str(config), "release", "gpu-03"])
    assert "gpu-03 is not excluded by the detector (excluded: none)" in capsys.readouterr().err

    inbox = inbox_path(tmp_path / "state.npz")
    requests = drain_inbox(inbox)
    assert ["release"] == [r.op for r in requests]
    assert not inbox.exists()
    decisions = engine.apply_requests(requests, T0 + 7200)
    assert ["gpu-03"] == [d.node for d in decisions]
    assert {} == dict(engine.excluded)
    assert 1 == len(receiver.bodies)  # the engine did not release it a second time


def test_releasing_a_dry_run_exclusion_calls_nothing(
    tmp_path: Path, receiver: Receiver, capsys: pytest.CaptureFixture[str]
) -> None:
    """A dry-run exclusion changed nothing in the scheduler: its release only records it."""
    config, _ = _setup(tmp_path, receiver.url, dry_run=True)
    main(["actions", "--config", str(config)])
    assert "gpu-03  would exclude (dry run) since" in capsys.readouterr().out
    assert 0 == main(["actions", "--config", str(config), "release", "gpu-03"])
    assert "nothing to undo" in capsys.readouterr().out
    assert [] == receiver.bodies


def test_close_breaker_posts_a_request(
    tmp_path: Path, receiver: Receiver, capsys: pytest.CaptureFixture[str]
) -> None:
    """close-breaker reaches the engine through the inbox."""
    config, engine = _setup(tmp_path, receiver.url, dry_run=False)
    assert 0 == main(["actions", "--config", str(config), "--by", "bob", "close-breaker"])
    requests = drain_inbox(inbox_path(tmp_path / "state.npz"))
    assert [ActionRequest("close_breaker", "", "bob", requests[0].time)] == requests
    engine.apply_requests(requests, T0 + 100)
    assert None is engine.breaker


def test_without_a_state_file_the_command_says_what_to_set(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """No state.path and no --state: exit 2 naming the setting."""
    assert 2 == main(["actions"])
    assert "set state.path in the config" in capsys.readouterr().err


def test_metrics_show_decisions_exclusions_and_the_breaker() -> None:
    """detector_actions_total{action,result}, excluded nodes by dry_run, breaker open."""
    actions = load_config(None, {"DETECTOR_ACTIONS__ENABLED": "true"}).actions
    engine = ActionEngine(actions)
    for i in range(8):  # dry-run: 6 of 63 nodes, then the share cap opens the breaker
        t = T0 + 7200 * i
        engine.update(t, [Candidate.from_xid(XidEvent(t, f"gpu-{i}", None, 79))], n_nodes=63)
    exporter = Exporter(CollectorRegistry(), version="test")
    exporter.set_action_stats(engine.stats())
    body, _ = exporter.render()
    got = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(body.decode())
        if family.name.startswith("detector_actions")
        for s in family.samples
        if not s.name.endswith("_created")
    }
    assert {
        ("detector_actions_total", (("action", "exclude"), ("result", "dry_run"))): 6.0,
        ("detector_actions_total", (("action", "exclude"), ("result", "refused_share_cap"))): 1.0,
        (
            "detector_actions_total",
            (("action", "exclude"), ("result", "refused_breaker_open")),
        ): 1.0,
        ("detector_actions_excluded_nodes", (("dry_run", "false"),)): 0.0,
        ("detector_actions_excluded_nodes", (("dry_run", "true"),)): 6.0,
        ("detector_actions_breaker_open", ()): 1.0,
    } == got
