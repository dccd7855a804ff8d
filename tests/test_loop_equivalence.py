"""``run`` and ``replay`` are one tick loop on two clocks: the daemon scores a simulated cluster
live (its exporters on loopback, a virtual clock, a kernel-log Xid line, a local Alertmanager)
while recording what it scraped (``record.dir``); ``detector replay`` of that recording with
the same config gives the same alerts, the same notifications and the same accounting.

The clock is virtual: each tick is stamped 30 simulated seconds after the previous one
whatever the machine's load, and the exporters serve the page of that simulated time, so the
recording's ticks are the daemon's ticks exactly. A scrape that times out on a loaded machine
is missing from the recording as from the daemon's frame: both see the same data.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from dataclasses import astuple
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from detector.config import Config, load_config
from detector.ingest import load_events
from detector.loop import LoopTick, Notification, TickLoop
from detector.model import Alert
from detector.replay import dump_frames, run_replay
from detector.series import LabelRules, SeriesIndex
from detector.service import Daemon, run_daemon
from detector.sim import FailureSpec, Scenario, serve

STEP = 30.0  # simulated seconds per tick
TICKS = 130
KMSG_TICK = 80  # the kernel log's Xid line is written after this tick
KMSG_LINE = (
    "4,812,9000000,-;NVRM: Xid (PCI:0000:2a:00): 79, pid=1, name=p, GPU has fallen off the bus."
)
SCENARIO = Scenario(
    nodes=4,
    gpus=2,
    days=TICKS * STEP / 86400.0 + 0.01,
    fault_trace=None,
    noisy_nodes=0,
    seed=5,
    failures=(FailureSpec("thermal", node=0, gpu=1, at_s=2100.0, lead_s=1200.0, xid=79),),
    repair_cap_s=900.0,
)


class VirtualClock:
    """Simulated time: advanced by the test after each tick, read by the exporters and the
    daemon (ticks are stamped with it)."""

    def __init__(self, start: float) -> None:
        self.t = start

    def __call__(self) -> float:
        return self.t


class Receiver:
    """A local Alertmanager: POST /api/v2/alerts on loopback, every alert kept."""

    def __init__(self) -> None:
        self.received: list[dict[str, Any]] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.received.extend(json.loads(body))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: object) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(30)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    am = Receiver()
    yield am
    am.close()


def _config(tmp_path: Path, urls: dict[str, tuple[str, str]], am_url: str) -> Config:
    static = [
        {"url": url, "node": node, "kind": kind}
        for node, (dcgm, node_exp) in urls.items()
        for url, kind in ((dcgm, "dcgm"), (node_exp, "node"))
    ]
    doc: dict[str, Any] = {
        "node_name": SCENARIO.node_name(2),  # the kernel log is node-03's
        "targets": {"static": static},
        "scrape": {"interval_s": 0.3, "timeout_s": 0.25, "jitter_fraction": 0.0},
        "alerts": {"alertmanager_urls": [am_url]},
        "kmsg": {"enabled": True, "path": str(tmp_path / "kmsg")},
        "record": {"dir": str(tmp_path / "recorded")},
        "logging": {"level": "warning"},
    }
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(doc))
    return load_config(path, env={})


def _key(alert: Alert) -> tuple[Any, ...]:
    return (alert.node, alert.gpu, alert.start, alert.end, alert.signals)


def _note(note: Notification) -> tuple[Any, ...]:
    return astuple(note)


@pytest.mark.slow
async def test_replay_of_what_run_scraped_decides_exactly_what_run_decided(
    tmp_path: Path, receiver: Receiver
) -> None:
    """Same alerts (entity, start, end, evidence), the same notifications (firing and
    resolved, in order) and the same live accounting (detections, FP/day) from ``run`` and
    from ``replay`` of its recording; the kernel-log XID forces its alert in both."""
    clock = VirtualClock(SCENARIO.start)
    exporters = serve(SCENARIO, port=0, speed=1.0, clock=clock)
    (tmp_path / "kmsg").write_text("")
    config = _config(tmp_path, exporters.urls, receiver.url)
    ticks: list[LoopTick] = []
    stop = asyncio.Event()
    daemons: list[Daemon] = []

    def on_tick(daemon: Daemon, tick: LoopTick) -> None:
        daemons[:1] = [daemon]
        ticks.append(tick)
        if len(ticks) == KMSG_TICK:
            with (tmp_path / "kmsg").open("a") as fh:
                fh.write(KMSG_LINE + "\n")
        if len(ticks) >= TICKS:
            stop.set()
        clock.t += STEP

    try:
        await asyncio.wait_for(
            run_daemon(
                config, clock=clock, stop=stop, on_tick=on_tick, handle_signals=False, port=0
            ),
            600,
        )
    finally:
        exporters.close()
    [daemon] = daemons
    run_alerts = [a for t in ticks for a in t.ended_sent] + daemon.loop.open_sent_alerts()
    run_notes = [n for t in ticks for n in t.notifications]
    run_counts = daemon.loop.accounting.snapshot(ticks[-1].time)
    kernel = [e for t in ticks for e in t.xids if e.source == "kmsg"]
    assert [(SCENARIO.node_name(2), 79)] == [(e.node, e.xid) for e in kernel]

    # The kernel log's XID as an operator's export gives it: its time, node and code.
    events = tmp_path / "events.jsonl"
    events.write_text(
        "".join(
            json.dumps({"time": e.time, "node": e.node, "gpu": e.gpu, "xid": e.xid}) + "\n"
            for e in kernel
        )
    )
    index = SeriesIndex(LabelRules.from_config(config.labels))
    loop = TickLoop.from_config(config, index)
    files = sorted((tmp_path / "recorded").iterdir())
    result = run_replay(
        loop,
        dump_frames(files, index, None),
        events=load_events(events),
        horizon_s=config.evaluation.horizon_s,
        grace_s=config.evaluation.grace_s,
    )

    assert len(ticks) == result.ticks
    assert sorted(map(_key, run_alerts)) == sorted(map(_key, result.alerts))
    # a tick's notifications come in the order of its signals' columns, which the daemon
    # numbers as scraped and the replay as the dump lists them: compared as one sorted list
    assert sorted(map(_note, run_notes), key=repr) == sorted(
        map(_note, result.notifications), key=repr
    )
    assert result.accounting is not None
    assert astuple(run_counts) == astuple(result.accounting)
    # what was decided is what happened: the planted GPU and the kernel-log node alerted,
    # critical (a failure XID), and Alertmanager received those alerts
    nodes = {a.node for a in result.alerts}
    assert {SCENARIO.node_name(0), SCENARIO.node_name(2)} <= nodes
    got = {tuple(sorted(a["labels"].items())) for a in receiver.received}
    sent = {n.labels for n in run_notes}
    assert sent == got
    assert run_counts.failures >= 1  # the kernel log's (the gauge's XID goes with its GPU)
    assert run_counts.failures == run_counts.detected_before + run_counts.detected_after
