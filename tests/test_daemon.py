"""The live daemon, in-process: the simulator's live exporters (planted failure), a local fake
Alertmanager, kernel-log XIDs from a file, systemd notifications, restarts.

The exporters and the daemon read one step clock (tests/step_clock.py) that moves one
scrape interval (one 30 s simulated step) after each tick, so every run is the same sequence
of ticks on a quiet or a loaded machine; the waits only bound a hang."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
import yaml
from step_clock import StepClock
from structlog.testing import capture_logs

from detector.config.load import Config, load_config
from detector.ingest.parse import parse_exposition
from detector.loop import LoopTick as TickResult
from detector.model import Alert, XidEvent
from detector.service.daemon import Daemon, main_run, run_daemon, sd_notify
from detector.sim import FailureSpec, JobSpec, Scenario, serve

SPEED = 200.0  # simulated seconds per clock second: one 30 s sim step per 0.15 s tick
INTERVAL = 0.15
HANG_GUARD_S = 300.0  # a run takes seconds; this only turns a hang into a failure
SCENARIO = Scenario(
    nodes=3,
    gpus=2,
    days=0.1,
    fault_trace=None,
    noisy_nodes=0,
    seed=1,
    failures=(FailureSpec("gsp", node=1, gpu=0, at_s=600.0, lead_s=0.0, xid=119),),
    repair_cap_s=1200.0,
)


@dataclass
class FakeAlertmanager:
    """POST /api/v2/alerts on loopback; keeps every alert it was sent."""

    received: list[dict[str, Any]] = field(default_factory=list)
    server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def alerts(self, **labels: str) -> list[dict[str, Any]]:
        return [a for a in list(self.received) if labels.items() <= a["labels"].items()]

    def resolved(self, **labels: str) -> list[dict[str, Any]]:
        # A resolve carries an end time in the past of its arrival (firing: 4 resends ahead).
        return [a for a in self.alerts(**labels) if a["endsAt"] <= a["arrived"]]


@pytest.fixture
def alertmanager() -> Iterator[FakeAlertmanager]:
    am = FakeAlertmanager()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            arrived = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(sim_clock()))
            for alert in json.loads(body):
                alert["arrived"] = arrived + ".999Z"
                am.received.append(alert)
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:
            return

    am.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=am.server.serve_forever, daemon=True)
    thread.start()
    yield am
    am.server.shutdown()
    am.server.server_close()
    thread.join(5)


_CLOCK = [StepClock()]  # the current test's clock (a new one per exporters fixture)


def sim_clock() -> float:
    """The simulated cluster's time (the exporters serve on the same step clock)."""
    return SCENARIO.start + _CLOCK[0]() * SPEED


def serve_on_a_step_clock(scenario: Scenario) -> Any:
    """The scenario's live exporters on a fresh step clock, which ``run_until`` moves."""
    _CLOCK[0] = StepClock()
    return serve(scenario, port=0, speed=SPEED, clock=_CLOCK[0])


@pytest.fixture
def exporters() -> Iterator[dict[str, tuple[str, str]]]:
    running = serve_on_a_step_clock(SCENARIO)
    yield running.urls
    running.close()


def daemon_config(
    tmp_path: Path, urls: dict[str, tuple[str, str]], am_url: str, **extra: Any
) -> Config:
    static = [
        {"url": url, "node": node, "kind": kind}
        for node, (dcgm, node_exp) in urls.items()
        for url, kind in ((dcgm, "dcgm"), (node_exp, "node"))
    ]
    doc: dict[str, Any] = {
        "targets": {"static": static},
        "scrape": {"interval_s": INTERVAL, "timeout_s": 0.12, "jitter_fraction": 0.0},
        # Statistical alerts out of the way: the planted failure's XID forces its alert.
        "alerts": {
            "threshold": 0.99,
            "min_duration_s": 0,
            "min_observations": 1,
            "cooldown_s": 0,
            "alertmanager_urls": [am_url],
            "resend_interval_s": 60,
        },
        "state": {"path": str(tmp_path / "state.npz"), "save_interval_s": 0.5},
        "kmsg": {"enabled": False},
        "logging": {"level": "warning"},
    }
    for key, value in extra.items():
        doc[key] = doc.get(key, {}) | value if isinstance(value, dict) else value
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(doc))
    return load_config(path, env={})


async def run_until(
    config: Config,
    done: Callable[[Daemon, TickResult], bool],
    *,
    timeout_s: float = HANG_GUARD_S,
    **kwargs: Any,
) -> list[Daemon]:
    """Run the daemon until ``done`` says so after a tick; returns the daemon (for asserts).
    Each tick moves the step clock one interval on."""
    stop = asyncio.Event()
    seen: list[Daemon] = []

    def on_tick(daemon: Daemon, tick: TickResult) -> None:
        if not seen:
            seen.append(daemon)
        _CLOCK[0].advance(INTERVAL)
        if done(daemon, tick):
            stop.set()

    kwargs.setdefault("handle_signals", False)
    kwargs.setdefault("port", 0)
    await asyncio.wait_for(
        run_daemon(config, clock=sim_clock, stop=stop, on_tick=on_tick, **kwargs), timeout_s
    )
    return seen


def metrics(daemon: Daemon) -> dict[str, float]:
    """The daemon's /metrics page as {series: value}."""
    body, _ = daemon.exporter.render()
    page = parse_exposition(body, "detector /metrics")
    assert [] == page.errors
    return dict(zip(page.keys, page.values, strict=True))


FAILURE = {"alertname": "GPUFailureSuspected", "node": "node-02"}


async def test_planted_failure_fires_then_resolves_at_alertmanager(
    tmp_path: Path, exporters: dict[str, tuple[str, str]], alertmanager: FakeAlertmanager
) -> None:
    """The simulated XID 119 reaches Alertmanager as a critical firing alert, then resolved;
    live accounting counts one failure, detected (at the XID: no precursor was planted)."""
    config = daemon_config(tmp_path, exporters, alertmanager.url)
    early: list[dict[str, float]] = []
    pending: list[threading.Thread] = []

    served: list[int] = []

    def done(daemon: Daemon, tick: TickResult) -> bool:
        if not early:
            early.append(metrics(daemon))
        if daemon.stats.ticks == 2:
            assert daemon.server is not None
            base = f"http://127.0.0.1:{daemon.server.port}"
            fetch = threading.Thread(
                target=lambda: served.extend(
                    httpx.get(f"{base}{path}", timeout=HANG_GUARD_S).status_code
                    for path in ("/readyz", "/metrics")
                )
            )
            fetch.start()
            pending.append(fetch)
        # the server must outlive the fetch: on a loaded machine the alert can resolve first
        return bool(alertmanager.resolved(**FAILURE)) and not any(t.is_alive() for t in pending)

    [daemon] = await run_until(config, done)
    for thread in pending:
        thread.join(HANG_GUARD_S)
    # /readyz and /metrics answered over HTTP while running. Readiness itself is decided in
    # wall time (the last tick's age, a target scraped within the 0.12 s timeout) and tested on
    # a virtual clock (test_startup, test_server): on a loaded machine it rightly says 503 here.
    assert [True, 200] == [served[0] in (200, 503), served[1]], served
    late = metrics(daemon)
    for name in ("detector_alerts_total", "detector_true_positives_total"):
        assert (0.0, 1.0) == (early[0][name], late[name])
    assert 1.0 == late['detector_xid_events_total{xid="119"}']
    sent = f'detector_alertmanager_sent_alerts_total{{alertmanager="{alertmanager.url}"}}'
    assert late[sent] >= 2  # the firing and the resolve
    counts = daemon.loop.accounting.snapshot(sim_clock())
    assert (1, 1, 1) == (counts.failures, counts.true_positives, counts.detected_after)
    firing = [a for a in alertmanager.alerts(**FAILURE) if a not in alertmanager.resolved()]
    assert firing, alertmanager.received
    assert {"severity": "critical", "gpu": "0", "signal": "xid_119"}.items() <= firing[0][
        "labels"
    ].items()
    assert {a["startsAt"] for a in alertmanager.alerts(**FAILURE)} == {firing[0]["startsAt"]}
    assert (tmp_path / "state.npz").exists()


async def test_restart_restores_state_without_a_second_alert(
    tmp_path: Path, exporters: dict[str, tuple[str, str]], alertmanager: FakeAlertmanager
) -> None:
    """Stopped while the alert fires, restarted from the state file: the same episode goes on
    and resolves; the sticky XID gauge is not taken for a new failure."""
    config = daemon_config(tmp_path, exporters, alertmanager.url)
    [first] = await run_until(config, lambda d, t: bool(alertmanager.alerts(**FAILURE)))
    assert first.loop.open_alerts()
    restored_open: list[int] = []
    new_xids: list[str] = []

    def resolved(daemon: Daemon, tick: TickResult) -> bool:
        if not restored_open:
            restored_open.append(len(daemon.loop.open_alerts()))
        new_xids.extend(e.node for e in tick.xids if e.xid == 119)
        return bool(alertmanager.resolved(**FAILURE))

    [second] = await run_until(config, resolved)
    assert first is not second
    assert restored_open[0] >= 1  # the firing episode came back from the state file
    starts = {a["startsAt"] for a in alertmanager.alerts(**FAILURE)}
    assert 1 == len(starts), alertmanager.received
    assert [] == new_xids
    assert 1 == second.loop.accounting.snapshot(sim_clock()).failures  # restored, not recounted


async def test_kernel_log_xid_forces_an_alert_on_its_gpu(
    tmp_path: Path, exporters: dict[str, tuple[str, str]], alertmanager: FakeAlertmanager
) -> None:
    """An NVRM Xid 79 line appended to the followed kernel log alerts on that node's GPU."""
    log = tmp_path / "kern.log"
    log.write_text("")
    config = daemon_config(
        tmp_path,
        exporters,
        alertmanager.url,
        node_name="node-03",
        kmsg={"enabled": True, "path": str(log)},
    )
    wrote: list[bool] = []

    def step(daemon: Daemon, tick: TickResult) -> bool:
        if daemon.stats.ticks == 3 and not wrote:
            with log.open("a") as fh:  # GPU 1 of the simulated HGX sits at bus 0x2A
                fh.write(
                    "[ 9.1] NVRM: Xid (PCI:0000:2a:00): 79, pid=77, name=python, GPU has "
                    "fallen off the bus.\n"
                )
            wrote.append(True)
        return bool(alertmanager.alerts(node="node-03"))

    [daemon] = await run_until(config, step)
    [alert] = alertmanager.alerts(node="node-03")[:1]
    assert {"gpu": "1", "signal": "xid_79", "severity": "critical"}.items() <= alert[
        "labels"
    ].items()
    assert 1 == daemon.stats.kmsg_xids


async def test_systemd_gets_ready_watchdog_and_stopping(
    tmp_path: Path, exporters: dict[str, tuple[str, str]], alertmanager: FakeAlertmanager
) -> None:
    """NOTIFY_SOCKET set: READY=1 once after the first tick, WATCHDOG=1 every tick, STOPPING=1."""
    path = str(tmp_path / "notify.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    sock.setblocking(False)
    try:
        env = {"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "30000000", "WATCHDOG_PID": str(os.getpid())}
        config = daemon_config(tmp_path, exporters, alertmanager.url)
        await run_until(config, lambda d, t: d.stats.ticks == 3, environ=env)
        messages = []
        while True:
            try:
                messages.append(sock.recv(256).decode())
            except BlockingIOError:
                break
    finally:
        sock.close()
    assert ["READY=1", "WATCHDOG=1", "WATCHDOG=1", "WATCHDOG=1", "STOPPING=1"] == messages


def test_sd_notify_is_a_no_op_outside_systemd() -> None:
    """Without NOTIFY_SOCKET nothing is sent; a vanished socket is reported, not raised."""
    assert sd_notify("READY=1", {}) is False
    assert sd_notify("READY=1", {"NOTIFY_SOCKET": "/nonexistent/notify.sock"}) is False


async def test_sigterm_stops_gracefully_and_saves_state(
    tmp_path: Path, exporters: dict[str, tuple[str, str]], alertmanager: FakeAlertmanager
) -> None:
    """SIGTERM mid-run: the tick finishes, the loop ends, the state file is written."""
    config = daemon_config(tmp_path, exporters, alertmanager.url, state={"save_interval_s": 3600})

    def terminate(daemon: Daemon, tick: TickResult) -> bool:
        if daemon.stats.ticks == 2:
            os.kill(os.getpid(), signal.SIGTERM)
        return daemon.stats.ticks >= 20  # never reached unless SIGTERM is ignored

    [daemon] = await run_until(config, terminate, handle_signals=True)
    assert daemon.stats.ticks < 20
    assert 2 == daemon.stats.state_saves  # the first tick's save and the shutdown save
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL


async def test_state_save_failure_is_survived(
    tmp_path: Path, exporters: dict[str, tuple[str, str]], alertmanager: FakeAlertmanager
) -> None:
    """A state path that cannot be written: errors counted and logged, ticks go on."""
    (tmp_path / "file").write_text("")
    config = daemon_config(
        tmp_path,
        exporters,
        alertmanager.url,
        state={"path": str(tmp_path / "file" / "state.npz"), "save_interval_s": 0.1},
    )
    [daemon] = await run_until(config, lambda d, t: d.stats.ticks == 4)
    assert 4 == daemon.stats.ticks
    assert 0 == daemon.stats.state_saves
    assert daemon.stats.state_save_errors >= 2


def test_main_run_refuses_a_bad_config_with_exit_2(tmp_path: Path) -> None:
    """`detector run --config FILE` with an invalid file: exit code 2, no daemon started."""
    path = tmp_path / "config.yaml"
    path.write_text("scrape:\n  timeot_s: 1\n")
    assert 2 == main_run(path, env={})


async def test_full_series_index_is_exported_as_refused_series(
    tmp_path: Path, exporters: dict[str, tuple[str, str]], alertmanager: FakeAlertmanager
) -> None:
    """With scrape.max_series_total below what the exporters publish, the index stops at the
    cap (plus scrape-health series, which are never refused) and /metrics counts the rest in
    detector_series_refused_total, so operators see it, not only a log line."""
    config = daemon_config(tmp_path, exporters, alertmanager.url, scrape={"max_series_total": 200})
    (daemon,) = await run_until(config, lambda d, t: d.stats.ticks >= 3)
    got = metrics(daemon)
    assert 200 <= got["detector_series"] < 230
    assert got["detector_series"] == len(daemon.index)
    assert got["detector_series_refused_total"] == daemon.index.refused > 0


async def test_series_matching_labels_drop_are_kept_out_and_counted(
    tmp_path: Path, exporters: dict[str, tuple[str, str]], alertmanager: FakeAlertmanager
) -> None:
    """labels.drop from the config reaches the daemon's index: the simulated nodes' second
    NIC (eth1) is never indexed, eth0 is, and /metrics counts the dropped series once each."""
    config = daemon_config(
        tmp_path, exporters, alertmanager.url, labels={"drop": {"device": "eth1"}}
    )
    (daemon,) = await run_until(config, lambda d, t: d.stats.ticks >= 3)
    devices = [dict(info.labels).get("device") for info in daemon.index.infos]
    assert "eth0" in devices
    assert "eth1" not in devices
    got = metrics(daemon)
    dropped = got["detector_series_dropped_total"]
    assert dropped == daemon.index.dropped > 0
    assert dropped == devices.count("eth0")  # the same families on both NICs, each once


async def test_a_node_that_file_sd_moves_to_another_job_keeps_its_signal_columns(
    tmp_path: Path, exporters: dict[str, tuple[str, str]], alertmanager: FakeAlertmanager
) -> None:
    """file_sd targets carry each node's job, the cohort label. After 4 ticks the scheduler
    rewrites the file to move node-03 to job "b-2": its series come back with the new label,
    keep their index columns (the index does not grow with each job) and their signal columns,
    and move to cohort "b-2" while the other nodes stay in "a-1". (Alone in "b-2", node-03
    would also get columns for its unnamed node-level series, scored against their own past:
    tests/test_peerless.py; turned off here.)"""
    sd = tmp_path / "targets.json"

    def write(jobs: dict[str, str]) -> None:
        groups = []
        for node, pair in exporters.items():
            for url, kind in zip(pair, ("dcgm", "node"), strict=True):
                parts = urlsplit(url)
                labels = {
                    "job": kind,
                    "node": node,
                    "training_job": jobs[node],
                    "__metrics_path__": parts.path,
                }
                groups.append({"targets": [parts.netloc], "labels": labels})
        sd.write_text(json.dumps(groups))

    write(dict.fromkeys(exporters, "a-1"))
    config = daemon_config(
        tmp_path,
        {},
        alertmanager.url,
        targets={"file_sd": [str(sd)], "file_sd_refresh_s": 0.01},
        labels={"cohort_labels": ["training_job"]},
        scoring={"own_past_when_peerless": False},
    )
    before: dict[str, int] = {}

    def node03_columns(daemon: Daemon) -> list[int]:
        signals = daemon.pipeline.signal_map
        node = signals.node_names.index("node-03")
        return [i for i in range(len(signals)) if signals.columns.node[i] == node]

    def done(daemon: Daemon, tick: TickResult) -> bool:
        if daemon.stats.ticks == 4:
            before.update(series=len(daemon.index), columns=len(node03_columns(daemon)))
            write(dict.fromkeys(exporters, "a-1") | {"node-03": "b-2"})
        return daemon.stats.ticks >= 9

    (daemon,) = await run_until(config, done)
    signals = daemon.pipeline.signal_map
    columns = node03_columns(daemon)
    assert before["series"] == len(daemon.index)
    assert before["columns"] == len(columns)
    read = [signals.column_names(i)[3] for i in columns]
    jobs = {dict(daemon.index.infos[s].labels).get("training_job") for s in read if s >= 0}
    assert {"b-2"} == jobs
    assert {"b-2"} == {signals.cohort_names[signals.columns.cohort[i]] for i in columns}
    node03 = signals.node_names.index("node-03")
    others = [i for i in range(len(signals)) if signals.columns.node[i] != node03]
    assert {"a-1"} == {signals.cohort_names[signals.columns.cohort[i]] for i in others}


async def test_node_score_statistics_reach_metrics(
    tmp_path: Path, exporters: dict[str, tuple[str, str]], alertmanager: FakeAlertmanager
) -> None:
    """Every scored node has its score distribution (count of ticks scored) and rise counter
    on /metrics, fed by the daemon's ticks."""
    config = daemon_config(tmp_path, exporters, alertmanager.url)
    (daemon,) = await run_until(config, lambda d, t: d.stats.ticks >= 4)
    got = metrics(daemon)
    for node in ("node-01", "node-02", "node-03"):
        count = got[f'detector_node_score_distribution_count{{node="{node}"}}']
        assert 1 <= count <= daemon.stats.ticks
        assert 0 == got[f'detector_node_score_rises_total{{node="{node}"}}']


async def test_a_daemon_without_targets_warns_that_nothing_will_be_scraped(
    tmp_path: Path,
) -> None:
    """Fleet mode with neither static targets nor file_sd: one warning at start, then it runs;
    with a target (even one that does not answer) no such warning."""

    async def start(static: list[dict[str, str]]) -> list[dict[str, Any]]:
        doc = {"targets": {"static": static}, "kmsg": {"enabled": False}}
        path = tmp_path / "config.yaml"
        path.write_text(yaml.safe_dump(doc))
        stop = asyncio.Event()
        with capture_logs() as logs:
            await asyncio.wait_for(
                run_daemon(
                    load_config(path, env={}),
                    stop=stop,
                    on_tick=lambda daemon, tick: stop.set(),
                    handle_signals=False,
                    port=0,
                ),
                HANG_GUARD_S,
            )
        return [e for e in logs if str(e["event"]).startswith("no targets: nothing")]

    assert 1 == len(await start([]))
    assert [] == await start([{"url": "http://127.0.0.1:9/metrics", "node": "n1"}])


async def test_a_fleet_whose_gpus_run_two_jobs_is_told_once_which_cohort_label_to_set(
    tmp_path: Path, alertmanager: FakeAlertmanager
) -> None:
    """Jobs a (node-01, node-02) and b (node-03), a pod per GPU on dcgm-exporter's page: the
    fleet logs once that every node is judged against all nodes and names ``pod``; with
    ``cohort_labels: [pod]`` it says nothing."""
    jobs = (JobSpec("a", (0, 1)), JobSpec("b", (2,)))
    # seed 4: both jobs run from the sixth step on (the other seeds start them later)
    scenario = dataclasses.replace(SCENARIO, seed=4, failures=(), pod_per_gpu=True, jobs=jobs)
    running = serve_on_a_step_clock(scenario)
    try:
        told = {}
        for name, labels in (("all nodes", {}), ("pod", {"cohort_labels": ["pod"]})):
            own = tmp_path / name.replace(" ", "-")  # a state file each
            own.mkdir()
            config = daemon_config(own, running.urls, alertmanager.url, labels=labels)
            with capture_logs() as logs:
                await run_until(config, lambda daemon, tick: daemon.stats.ticks >= 20)
            told[name] = [
                e for e in logs if e["event"] == "nodes of different jobs share one cohort"
            ]
    finally:
        running.close()
    [advice] = told["all nodes"]
    assert "up to 2 jobs at once (pod)" in advice["advice"]
    assert "labels.cohort_labels: [pod]" in advice["advice"]
    assert [] == told["pod"]


T_GAP = 1_700_000_000.0


def test_live_accounting_keeps_the_span_of_an_xid_seen_after_a_gap(tmp_path: Path) -> None:
    """The gauge's XID after a gap is stamped at the gap's start with ``end`` when seen
    (xids.py): the daemon's failure keeps that span, so an alert raised during the gap
    matches it in the live accounting, as in a replay."""
    daemon = Daemon(daemon_config(tmp_path, {}, "http://127.0.0.1:9"))
    seen = XidEvent(T_GAP, "node-01", "0", 79, end=T_GAP + 1800.0, source="dcgm-after-gap")
    [failure] = daemon.loop.decisions._new_failures((seen,), T_GAP + 1800.0)
    assert (failure.time, failure.end) == (T_GAP, T_GAP + 1800.0)
    raised = Alert("node-01", None, T_GAP + 1200.0, None, 0.9, ("gpu_temp",))
    daemon.loop.accounting.update(T_GAP + 1200.0, started=[raised])
    [found] = daemon.loop.accounting.update(T_GAP + 1800.0, failures=[failure])
    assert found.lead_time_s == -1200.0  # matched, not before the XID


def test_nodes_split_by_co_movement_are_logged_once_each(tmp_path: Path) -> None:
    """A node whose unlabelled GPUs co-movement tells apart is logged when it is first split,
    naming the setting, and so is a node with a GPU judged alone; a node already told is not
    told again."""
    daemon = Daemon(daemon_config(tmp_path, {}, "http://127.0.0.1:9"))
    teams = daemon.pipeline.signal_map.teams
    told = []
    for split in ({"node-02"}, {"node-02"}, {"node-02", "node-05"}):
        teams.inferred_split_nodes |= split
        with capture_logs() as logs:
            daemon._tell_inferred_splits()
        told += [e for e in logs if "co-movement" in str(e["event"])]
    assert [["node-02"], ["node-05"]] == [e["nodes"] for e in told]
    assert all("told apart" in e["event"] for e in told)
    teams.alone_nodes |= {"node-02"}  # a node with a GPU judged alone is told once, too
    for _ in range(2):
        with capture_logs() as logs:
            daemon._tell_inferred_splits()
        told += [e for e in logs if "co-movement" in str(e["event"])]
    assert [["node-02"], ["node-05"], ["node-02"]] == [e["nodes"] for e in told]
    assert "judged alone" in told[-1]["event"]
    assert {"labels.gpu_workload_comovement"} == {e["setting"] for e in told}
