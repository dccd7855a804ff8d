"""``run`` and ``replay`` are one tick loop on two clocks: the daemon scores a simulated cluster
live (its exporters on loopback, a virtual clock, a kernel-log Xid line, a local Alertmanager)
while recording what it scraped (``record.dir``); ``detector replay`` of that recording with
the same config gives the same alerts, the same notifications, the same diagnoses and the same
accounting.

The clock is virtual: each tick is stamped 30 simulated seconds after the previous one
whatever the machine's load, and the exporters serve the page of that simulated time, so the
recording's ticks are the daemon's ticks exactly. A scrape that times out on a loaded machine
is missing from the recording as from the daemon's frame: both see the same data.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import astuple
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from detector.config import Config, load_config
from detector.diagnosis import Diagnosis
from detector.evaluation import RecoveryFigures
from detector.ingest import load_events
from detector.loop import FAILURE_ALERT, LoopTick, Notification, TickLoop
from detector.model import Alert
from detector.replay import Recovery, dump_frames, recovery_analysis, run_replay
from detector.series import LabelRules, SeriesIndex
from detector.service import Daemon, run_daemon
from detector.service.export import Exporter
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
    resolved, in order), the same diagnoses and the same live accounting (detections, FP/day)
    from ``run`` and from ``replay`` of its recording; the kernel-log XID forces its alert in
    both; Alertmanager gets each alert's failure_class, action and runbook_url as replay
    reports them, and /metrics the diagnoses and the recovery figures."""
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

    # The diagnosis is the loop's: run decided the same one for each alert as replay reports,
    # and Alertmanager got it as the failure_class and action labels and the class's runbook.
    run_diagnoses = {key: d for t in ticks for key, d in t.diagnoses.items()}
    assert _classes(run_diagnoses) == _classes(result.diagnoses)
    model = result.diagnosis_model
    assert model is not None
    expected = {
        (node, _iso(start)): (d.failure_class, d.action, model.runbook_url(d.failure_class))
        for (node, start), d in result.diagnoses.items()
    }
    node_alerts = [a for a in receiver.received if a["labels"]["alertname"] == FAILURE_ALERT]
    assert node_alerts
    for sent in node_alerts:
        labels, annotations = sent["labels"], sent["annotations"]
        klass, action, runbook = expected[(labels["node"], sent["startsAt"])]
        assert (klass, action) == (labels["failure_class"], labels["action"])
        if annotations:  # firing (a resolve carries none)
            assert runbook == annotations["runbook_url"]
    # /metrics: the diagnoses per class, each open alert's, and the recovery figures, which
    # follow the replay report's rules
    found = _samples(daemon.exporter)
    by_class = Counter(d.failure_class for d in run_diagnoses.values())
    assert {(("failure_class", c),): float(n) for c, n in by_class.items()} == {
        labels: v for (name, labels), v in found.items() if name == "detector_diagnoses_total"
    }
    open_now = {
        (a.node, d.failure_class): d.confidence
        for a in daemon.loop.open_alerts()
        if (d := daemon.loop.decisions.diagnosis_of(a)) is not None
    }
    assert open_now == {
        (dict(labels)["node"], dict(labels)["failure_class"]): v
        for (name, labels), v in found.items()
        if name == "detector_alert_diagnosis"
    }
    live = daemon.loop.decisions.recovery.figures(ticks[-1].time)
    replayed = recovery_analysis(result, None)
    assert _per_node(replayed, "failures") == _per_node(live, "failures")
    assert [(o.node, o.recommendation) for o in replayed.offenders] == [
        (o.node, o.recommendation) for o in live.offenders
    ]
    top3 = (("kind", "failures"), ("top_k", "3"))
    assert found[("detector_failure_concentration_ratio", top3)] == next(
        c.top_share(3) for c in live.concentration if c.what == "failures"
    )


def _classes(diagnoses: Mapping[tuple[str, float], Diagnosis]) -> dict[Any, tuple[Any, ...]]:
    return {
        key: (d.failure_class, d.action, d.basis, round(d.confidence, 9))
        for key, d in diagnoses.items()
    }


def _iso(t: float) -> str:
    """Alertmanager's startsAt of an alert that started at ``t``."""
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _samples(exporter: Exporter) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    body, _ = exporter.render()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(body.decode())
        for s in family.samples
    }


def _per_node(figures: Recovery | RecoveryFigures, what: str) -> tuple[tuple[str, int], ...]:
    return next(c.per_node for c in figures.concentration if c.what == what)
