"""A start that explains itself: a taken port or an unusable state path is a clean exit 2
naming it; readiness needs a successful scrape and says what still learns; Python warnings
(numpy's, where kernels run interpreted) are log lines, not raw stderr."""

from __future__ import annotations

import io
import json
import logging
import socket
import warnings
from pathlib import Path

import pytest
import yaml

from detector.logs import configure_logging
from detector.service import main_run
from detector.service.server import Readiness


def _config(tmp_path: Path, **doc: object) -> Path:
    path = tmp_path / "config.yaml"
    base = {"logging": {"format": "json"}, "kmsg": {"enabled": False}}
    path.write_text(yaml.safe_dump({**base, **doc}))
    return path


def test_a_taken_port_is_exit_2_naming_the_address(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Another program on server.listen's port: exit 2 and a line naming the address, not an
    internal error."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        path = _config(tmp_path, server={"listen": f"127.0.0.1:{port}"})
        assert 2 == main_run(path, env={})
    err = capsys.readouterr().err
    assert f"127.0.0.1:{port}: cannot listen" in err
    assert "internal error" not in err


def test_a_state_path_that_is_a_directory_is_exit_2_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """state.path naming a directory can never be read or written: exit 2 naming it."""
    state = tmp_path / "state"
    state.mkdir()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    path = _config(tmp_path, state={"path": str(state)}, server={"listen": f"127.0.0.1:{port}"})
    assert 2 == main_run(path, env={})
    assert f"state.path {state}: is a directory" in capsys.readouterr().err


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_readiness_fails_when_no_target_answers_for_three_intervals() -> None:
    """Ready while some target answered within 3 intervals; failing scrapes make it unready
    with the reason; a tick with nothing to scrape (remote write only) keeps it ready."""
    clock = Clock()
    ready = Readiness(15.0, clock=clock)
    assert (False, "no tick completed yet") == ready.status()
    ready.tick_done(scraped_ok=True)
    assert (True, "ready") == ready.status()
    for _ in range(3):
        clock.t += 15.0
        ready.tick_done(scraped_ok=False)
    assert ready.status()[0]  # 45 s: still within three intervals
    clock.t += 15.0
    ready.tick_done(scraped_ok=False)
    assert (False, "no target scraped successfully for > 3 intervals") == ready.status()
    clock.t += 15.0
    ready.tick_done(scraped_ok=None)
    assert ready.status()[0]


def test_readiness_says_what_still_learns() -> None:
    """While warming up the reason names it; the probe still passes (peers score already)."""
    ready = Readiness(15.0, clock=Clock())
    ready.warming = "warming up: rare-event counters learn their rate until 2026-01-01T01:00:00Z"
    ready.tick_done(scraped_ok=True)
    ok, reason = ready.status()
    assert ok
    assert reason.startswith("ready; warming up: rare-event counters")


def test_python_warnings_are_log_lines() -> None:
    """A RuntimeWarning (numpy's, in interpreted kernels) comes out as a JSON log line."""
    out = io.StringIO()
    configure_logging("info", "json", stream=out)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            warnings.warn("invalid value encountered in divide", RuntimeWarning, stacklevel=1)
    finally:
        logging.captureWarnings(False)
    [line] = [json.loads(line) for line in out.getvalue().splitlines() if "divide" in line]
    assert "invalid value encountered in divide" in line["event"]
    assert "warning" == line["level"]
