"""``detector run``: the live daemon. Scrape every target each interval, score the tick, send
alerts, count detections, export metrics, keep state across restarts.

One tick (every ``scrape.interval_s`` of wall time, started on a fixed schedule):
    targets -> scrape (whole round bounded by ``scrape.timeout_s``: one slow target never
    delays the tick) -> frame (with ``remote_write`` on, merged with the newest sample of each
    series Prometheus remote-wrote since the last tick: ingest.RemoteWriteSource) ->
    ``TickLoop.step`` with the kernel log's XIDs and the nodes
    under maintenance (scores, XIDs judged, alert episodes, the alert policy, accounting:
    the very loop ``replay`` and ``calibrate`` drive) -> its notifications queued for
    Alertmanager (``AlertSender.queue``; delivery runs in its own task) -> export.
A tick that overruns the interval skips the missed slots instead of bunching up.

Lifecycle: build the index and pipeline (threshold from ``calibration.path`` when set), restore
``state.path`` if usable (a bad file is a clean start, never a crash loop), start the HTTP
server, tick until ``stop`` is set (SIGTERM/SIGINT set it), then shut down within
``shutdown_timeout_s``: the running tick finishes, pending alerts get a last delivery attempt,
state is saved. State is also saved every ``state.save_interval_s`` and, write-ahead, after
every tick that queued alert updates, before they are delivered; a failed save is logged and
the daemon carries on (the alerts are then delivered anyway: a lost alert is worse than a
repeated one).

systemd: with ``NOTIFY_SOCKET`` set, ``READY=1`` is sent after the first tick and, with
``WATCHDOG_USEC`` set, ``WATCHDOG=1`` after every tick (``sd_notify``: a plain unix datagram,
no dependency). The clock (``clock``) stamps ticks; tests pass a fast one.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import signal
import socket
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import numpy as np

from .. import jit
from ..actions import ActionRunner, build_executor, drain_inbox, inbox_path
from ..alerting import AlertSender
from ..config import Config, load_calibration, load_config
from ..errors import DetectorError, StateError
from ..ingest import (
    KernelXids,
    KmsgFollower,
    PodDiscovery,
    RemoteWriteSource,
    RoundRecorder,
    Scraper,
    ScrapeRound,
    TargetSource,
)
from ..logs import configure_logging, get_logger
from ..loop import LoopTick, TickLoop
from ..model import Frame, Sample
from ..series import LabelRules, SeriesIndex, merge_frames
from .entity_stats import NodeScoreStats
from .export import Exporter
from .server import Readiness, Server, start_server
from .state import load_state, save_state
from .summary import Summary

__all__ = ["Daemon", "DaemonStats", "main_run", "run_daemon", "sd_notify"]

_log = get_logger(component="daemon")


def _public_url(url: str) -> str:
    """``url`` without its ``user:password@`` part: target URLs may carry credentials, and
    /metrics labels and logs must not (Prometheus shows targets the same way)."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


def sd_notify(message: str, environ: Mapping[str, str] | None = None) -> bool:
    """Send ``message`` to systemd's ``NOTIFY_SOCKET`` (abstract ``@name`` too); False when
    not under systemd or the socket is gone (never raises: notification is best effort)."""
    env = os.environ if environ is None else environ
    address = env.get("NOTIFY_SOCKET", "")
    if not address:
        return False
    if address.startswith("@"):
        address = "\0" + address[1:]
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            sock.connect(address)
            sock.sendall(message.encode())
    except OSError as exc:
        _log.warning("sd_notify failed", message=message, error=str(exc))
        return False
    return True


@dataclass(slots=True)
class DaemonStats:
    """Self metrics of the loop (export.py reads them)."""

    ticks: int = 0
    last_tick: float = float("nan")  # clock time of the last tick
    tick_duration_s: float = float("nan")  # wall time of the last tick's work
    scrape_duration_s: float = float("nan")
    overruns: int = 0  # ticks that took longer than the interval
    state_saves: int = 0
    state_save_errors: int = 0
    kmsg_xids: int = 0
    ready: bool = False
    tick_durations: list[float] = field(default_factory=list)  # since last export


class Daemon:
    """The daemon's parts and one tick; ``run_daemon`` drives it. See the module docstring."""

    def __init__(
        self,
        config: Config,
        *,
        clock: Callable[[], float] = time.time,
        client: Any = None,
        kmsg: KmsgFollower | None = None,
    ) -> None:
        self.config = config
        self.clock = clock
        self.calibration = (
            load_calibration(config.calibration.path) if config.calibration.path else None
        )
        self._fresh_loop()
        # agent mode in Kubernetes: this node's exporter pods (run_daemon follows them)
        self.pods = PodDiscovery.for_agent(config)
        self.targets = TargetSource(config, pods=self.pods)
        self.scraper = Scraper.from_config(config.scrape, client)
        self.alerts = AlertSender.from_config(config.alerts, client=client, clock=clock)
        self.alerts.write_ahead = config.state.path is not None
        self.stats = DaemonStats()
        self.exporter = Exporter(top_k=config.scoring.top_k)
        self.node_stats = NodeScoreStats()
        self.exporter.node_stats = self.node_stats
        self.summary = Summary()  # GET /summary: what a fleet reads of this process's nodes
        rec = config.record
        self.recorder = (
            RoundRecorder(rec.dir, rotate_bytes=rec.rotate_bytes, rotate_s=rec.rotate_s)
            if rec.dir is not None
            else None
        )
        engine = self.loop.decisions.actions
        # the executor that carries out the loop's exclusions (none while actions are off)
        self.actions = (
            ActionRunner(engine, build_executor(config.actions)) if engine is not None else None
        )
        self.kmsg = kmsg
        if kmsg is None and config.kmsg.enabled:
            self.kmsg = KmsgFollower(config.kmsg.path)
        self.server: Server | None = None  # set by run_daemon once listening
        self.last_round: ScrapeRound | None = None
        self.last_tick: LoopTick | None = None
        self._last_time = float("-inf")
        self._last_save = float("-inf")
        self._first_time: float | None = None  # the first tick of this process (warm-up)
        self._warm_until = float("-inf")
        self.warming = ""  # what still learns and until when (/readyz says it)
        self._cohorts_advised = False  # the cohort advice is logged once a process
        self._splits_told: set[str] = set()  # nodes logged as split by co-movement
        self._alone_told: set[str] = set()  # nodes logged with a GPU co-movement judged alone

    def _fresh_loop(self) -> None:
        self.index = SeriesIndex(
            LabelRules.from_config(self.config.labels),
            capacity=self.config.scrape.max_series_total,
        )
        self.loop = TickLoop.from_config(self.config, self.index, self.calibration)
        self.pipeline = self.loop.pipeline
        # remote_write: a second source of each tick's frame, fed by POST /api/v1/write
        self.remote_write = (
            RemoteWriteSource.from_config(
                self.config.remote_write, self.index, keep_series=self.config.record.dir is not None
            )
            if self.config.remote_write.enabled
            else None
        )
        self.kernel = KernelXids(self.index, self.config.node_name or socket.gethostname())

    def _advise_cohorts(self) -> None:
        """Once: a fleet whose GPUs run several jobs judges every node against all nodes
        unless cohort labels are set (gpu_teams.GpuTeams.cohort_advice). An agent sees one node,
        whose peers are its own GPUs: nothing to advise."""
        if self._cohorts_advised or self.config.mode == "agent":
            return
        advice = self.pipeline.teams().cohort_advice
        if advice:
            self._cohorts_advised = True
            _log.warning("nodes of different jobs share one cohort", advice=advice)

    def _tell_inferred_splits(self) -> None:
        """Once a process per node: its unlabelled GPUs were told apart into jobs by how their
        power moves (gpu_comovement.py), or one was judged alone, so the operator sees why
        its GPU peers changed."""
        teams = self.pipeline.teams()
        for nodes, told, what in (
            (teams.inferred_split_nodes, self._splits_told, "GPUs of different jobs told apart"),
            (teams.alone_nodes, self._alone_told, "GPUs moving with no job judged alone"),
        ):
            new = set(nodes) - told
            if new:
                told |= new
                _log.info(
                    f"{what} by their power's co-movement",
                    nodes=sorted(new),
                    setting="labels.gpu_workload_comovement",
                )

    # -- state ------------------------------------------------------------------------------
    def restore(self) -> bool:
        """Load ``state.path`` into the fresh loop; False (clean start) when unusable."""
        path = self.config.state.path
        loaded = load_state(path) if path is not None else None
        if loaded is None:
            return False
        arrays, meta = loaded
        try:
            self.loop.load_state_dict(arrays, meta["loop"])
        except (ValueError, KeyError, TypeError, IndexError) as exc:
            _log.warning(
                "state file does not fit this build, starting clean",
                path=str(path),
                reason=str(exc),
            )
            self._fresh_loop()  # a half-restored loop is worse than none
            return False
        delivery = meta.get("delivery")
        if isinstance(delivery, dict):
            try:
                self.alerts.load_state_dict(delivery)
            except (KeyError, TypeError, ValueError) as exc:  # resend from scratch
                _log.warning("alert delivery state unusable", path=str(path), reason=str(exc))
        daemon = meta.get("daemon", {})
        self._last_time = float(daemon.get("last_time", float("-inf")))
        self._first_time = float("-inf")  # the restored scorers have learnt: no warm-up
        _log.info(
            "state restored",
            path=str(path),
            series=len(self.index),
            open_alerts=len(self.loop.open_alerts()),
        )
        return True

    def save(self) -> bool:
        """Write the state file now; a failure is logged and counted, never raised."""
        return self.write_state(self.state_snapshot())

    def state_snapshot(self) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """The state to save. Take it on the event loop's thread: alert delivery runs there
        and changes the pending queues."""
        arrays, loop_meta = self.loop.state_dict()
        meta: dict[str, Any] = {
            "loop": loop_meta,
            "delivery": self.alerts.state_dict(),
            "daemon": {"last_time": self._last_time, "ticks": self.stats.ticks},
        }
        return arrays, meta

    def write_state(self, snapshot: tuple[dict[str, np.ndarray], dict[str, Any]]) -> bool:
        """Write ``state_snapshot()`` output to ``state.path`` (any thread); a failure is
        logged and counted, never raised."""
        path = self.config.state.path
        if path is None:
            return False
        arrays, meta = snapshot
        try:
            save_state(path, arrays, meta)
        except StateError as exc:
            self.stats.state_save_errors += 1
            _log.error("state not saved, will retry", path=str(path), error=str(exc))
            return False
        self.stats.state_saves += 1
        self._last_save = time.monotonic()
        return True

    def save_due(self) -> bool:
        return time.monotonic() - self._last_save >= self.config.state.save_interval_s

    # -- one tick ---------------------------------------------------------------------------
    async def tick(self) -> LoopTick:
        """Scrape, score, alert; returns the pipeline's result for this tick."""
        began = time.perf_counter()
        now = self.clock()
        if now <= self._last_time:  # the wall clock stepped back (NTP): keep time monotone
            _log.warning("clock went backwards", now=now, last=self._last_time)
            now = self._last_time + 1e-3
        self._last_time = now
        refused_before = self.index.refused
        round_ = await self.scraper.scrape_all(self.targets.current(), self.index, now)
        self.last_round = round_
        if self.index.refused > refused_before:
            _log.error(
                "series refused: the index is full (scrape.max_series_total)",
                refused=self.index.refused - refused_before,
                series=len(self.index),
            )
        for result in round_.targets:
            if result.error is not None:
                _log.warning(
                    "scrape failed",
                    target=_public_url(result.target.url),
                    node=result.target.node,
                    reason=result.error.reason,
                    detail=result.error.detail,
                )
        kernel = []
        if self.kmsg is not None:
            kernel = self.kernel.events(self.kmsg.poll(), now)
            self.stats.kmsg_xids += len(kernel)
        work_began = time.perf_counter()  # exported tick duration: scoring, scrape excluded
        frame = round_.frame
        if frame.values.shape[0] < len(self.index):  # kmsg never adds columns; scrape may have
            grown = np.full(len(self.index), np.nan)
            grown[: frame.values.shape[0]] = frame.values
            frame = Frame(frame.time, grown)
        written: list[Sample] = []
        if self.remote_write is not None:  # what Prometheus remote-wrote since the last tick
            top = self.remote_write.frame(now)
            frame = merge_frames(frame, top)
            if self.recorder is not None:
                written = self.remote_write.written(top)
        if self.recorder is not None:  # what this tick scores, for `detector replay`
            self.recorder.add(round_.targets, now, written)
        tick = self.loop.step(frame, xids=kernel, muted=self._muted_nodes())
        self.last_tick = tick
        if not self.loop.policy.shadow:
            self.alerts.queue(tick.notifications)
        if self.actions is not None:
            await self._act(tick, now)
        for alert in tick.notified:
            _log.warning(
                "alert firing",
                node=alert.node,
                gpu=alert.gpu,
                peak_score=round(alert.peak_score, 3),
                signals=list(alert.signals),
            )
        for alert in tick.ended_sent:
            _log.info("alert resolved", node=alert.node, gpu=alert.gpu)
        self._advise_cohorts()
        self._tell_inferred_splits()
        for node in self.node_stats.update(tick.scores.node_names, tick.scores.node_score):
            _log.info("node score level rose", node=node)
        self._warm_up(now)
        self._export(tick, round_, now, time.perf_counter() - work_began)
        elapsed = time.perf_counter() - began
        stats = self.stats
        stats.ticks += 1
        stats.last_tick = now
        stats.tick_duration_s = elapsed
        stats.scrape_duration_s = round_.duration_s
        stats.tick_durations.append(elapsed)
        if elapsed > self.config.scrape.interval_s:
            stats.overruns += 1
        _log.debug(
            "tick",
            time=now,
            duration_s=round(elapsed, 4),
            targets=len(round_.targets),
            series=len(self.index),
        )
        return tick

    def _warm_up(self, now: float) -> None:
        """What still learns and until when, in the log (once at the start, once when done),
        /metrics and /readyz's reason."""
        if self._first_time is None:
            self._first_time = now
            self._warm_until = now + self.config.scoring.warmup_s
            if self._warm_until > now:
                _log.info(
                    "warming up: GPU-against-peer comparisons score from this tick; rare-event "
                    "counters learn their rate first (scoring.warmup_s)",
                    until=_iso(self._warm_until),
                )
        remaining = max(0.0, self._warm_until - now)
        self.exporter.warmup_remaining_s = remaining
        if remaining > 0:
            self.warming = (
                "warming up: rare-event counters learn their rate until "
                f"{_iso(self._warm_until)} (scoring.warmup_s); peers score now"
            )
        elif self.warming:
            self.warming = ""
            _log.info("warm-up done: every scorer scores")

    async def _act(self, tick: LoopTick, now: float) -> None:
        """Carry out the loop's exclusions and a person's requests (``detector actions``)."""
        assert self.actions is not None
        decisions = list(tick.actions)
        if self.config.state.path is not None:
            requests = drain_inbox(inbox_path(self.config.state.path))
            decisions += self.actions.engine.apply_requests(requests, now)
        for decision in decisions:
            if decision.to_execute:
                await self.actions.carry_out(decision)
        self.exporter.set_action_stats(self.actions.engine.stats())

    def _export(self, tick: LoopTick, round_: ScrapeRound, now: float, work_s: float) -> None:
        exporter = self.exporter
        exporter.observe_tick(tick, work_s)
        self.summary.observe(tick, self.pipeline)
        exporter.observe_signals(self.pipeline.evidence(tick.scores))
        exporter.observe_scrapes(
            {
                _public_url(r.target.url): (
                    r.duration_s,
                    r.error.reason if r.error is not None else None,
                )
                for r in round_.targets
            }
        )
        exporter.observe_series(len(self.index), self.index.refused, self.index.dropped)
        if self.remote_write is not None:
            exporter.remote_write = self.remote_write.stats
        exporter.set_alert_stats(self.alerts.stats(self.loop.policy))
        exporter.set_accounting(self.loop.accounting.snapshot(now))
        decisions = self.loop.decisions
        exporter.set_alert_diagnoses(
            (a, d) for a in self.loop.open_alerts() if (d := decisions.diagnosis_of(a)) is not None
        )
        exporter.set_recovery(decisions.recovery.figures(now))

    def _muted_nodes(self) -> frozenset[str]:
        """Nodes whose target carries the maintenance label (any value): they send nothing."""
        label = self.config.alerts.maintenance_label
        if not label:
            return frozenset()
        return frozenset(
            t.node for t in self.targets.current() if any(k == label for k, _ in t.labels)
        )

    async def aclose(self) -> None:
        if self.pods is not None:
            await self.pods.aclose()
        if self.actions is not None:
            await self.actions.executor.aclose()
        if self.recorder is not None:
            self.recorder.close()
        await self.scraper.aclose()
        await self.alerts.aclose()
        if self.kmsg is not None:
            self.kmsg.close()


async def run_daemon(
    config: Config,
    *,
    clock: Callable[[], float] = time.time,
    stop: asyncio.Event | None = None,
    client: Any = None,
    environ: Mapping[str, str] | None = None,
    handle_signals: bool = True,
    shutdown_timeout_s: float = 10.0,
    kmsg: KmsgFollower | None = None,
    on_tick: Callable[[Daemon, LoopTick], None] | None = None,
    port: int | None = None,
) -> None:
    """Run until ``stop`` is set (or SIGTERM/SIGINT when ``handle_signals``); see the module
    docstring. ``environ`` (default os.environ) is where NOTIFY_SOCKET/WATCHDOG_USEC are read.
    ``on_tick`` is called after each tick (tests observe the daemon through it); ``port``
    overrides the server's listen port (0: any free port, see ``Daemon.server``)."""
    env = os.environ if environ is None else environ
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    signals: list[signal.Signals] = []
    if handle_signals:
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.add_signal_handler(sig, stop.set)
                signals.append(sig)
    watchdog = bool(env.get("WATCHDOG_USEC")) and env.get("WATCHDOG_PID", str(os.getpid())) == str(
        os.getpid()
    )
    interval = config.scrape.interval_s
    daemon = Daemon(config, clock=clock, client=client, kmsg=kmsg)
    delivery: asyncio.Task[None] | None = None
    discovery: asyncio.Task[None] | None = None
    delivery_stop = asyncio.Event()
    readiness = Readiness(interval)
    server: Server | None = None
    try:
        daemon.restore()
        server = daemon.server = await start_server(
            config,
            daemon.exporter,
            readiness,
            port=port,
            remote_write=daemon.remote_write,
            summary=daemon.summary,
        )
        delivery = asyncio.create_task(daemon.alerts.run(delivery_stop), name="alert-delivery")
        if daemon.pods is not None:
            discovery = asyncio.create_task(daemon.pods.run(), name="pod-discovery")
        _log_start(daemon)
        next_at = loop.time()
        while not stop.is_set():
            tick = await daemon.tick()
            await _after_tick(daemon, tick, readiness, env, watchdog, on_tick)
            next_at += interval
            if next_at < loop.time():  # overran: skip the missed slots
                next_at += interval * np.ceil((loop.time() - next_at) / interval)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=max(0.0, next_at - loop.time()))
    finally:
        sd_notify("STOPPING=1", env)
        _log.info("daemon stopping", ticks=daemon.stats.ticks)
        delivery_stop.set()
        if discovery is not None:
            discovery.cancel()
            await asyncio.gather(discovery, return_exceptions=True)
        await _flush_alerts(daemon, delivery, shutdown_timeout_s)
        daemon.save()
        if server is not None:
            await server.close()
        await daemon.aclose()
        for sig in signals:
            loop.remove_signal_handler(sig)
        _log.info("daemon stopped")


def _log_start(daemon: Daemon) -> None:
    """The start line, and warnings about a config that cannot work well."""
    config = daemon.config
    _log.info(
        "daemon started",
        interval_s=config.scrape.interval_s,
        mode=config.mode,
        state=str(config.state.path),
        kmsg=daemon.kmsg is not None,
        threshold=daemon.loop.threshold,
        signal_weights=len(daemon.pipeline.params.signal_weights),
        # interpreted: no executable memory for numba (MemoryDenyWriteExecute), ~300x slower
        scorer_kernels="compiled" if jit.COMPILED else "interpreted",
    )
    if config.scrapes_nothing() and not config.remote_write.enabled:
        _log.warning(
            "no targets: nothing will be scraped (set targets.static or targets.file_sd, "
            "or run in agent mode, which scrapes this node's own exporters)"
        )
    if not jit.COMPILED and config.mode != "agent":
        _log.warning(
            "scorer kernels run interpreted (no writable+executable memory), ~300x slower: "
            "allow it for fleet mode (systemd: the jit.conf drop-in)"
        )


async def _after_tick(
    daemon: Daemon,
    tick: LoopTick,
    readiness: Readiness,
    env: Mapping[str, str],
    watchdog: bool,
    on_tick: Callable[[Daemon, LoopTick], None] | None,
) -> None:
    """Save (write-ahead of delivery), release the tick's alerts, tell readiness and systemd."""
    # Write-ahead: alert updates of this tick are delivered only once the state that holds
    # them is saved (see alerting/sender.py), so a crash cannot re-send an episode.
    held = daemon.alerts.held
    if (held or daemon.save_due()) and daemon.config.state.path is not None:
        await asyncio.to_thread(daemon.write_state, daemon.state_snapshot())
    daemon.alerts.release()
    round_ = daemon.last_round
    readiness.warming = daemon.warming
    readiness.tick_done(
        any(r.error is None for r in round_.targets) if round_ and round_.targets else None
    )
    if on_tick is not None:
        on_tick(daemon, tick)
    if not daemon.stats.ready:
        daemon.stats.ready = True
        # The first tick built the long-lived index, pipeline and clients: keep the collector
        # from rescanning them every collection (-28% CPU per tick at 1,000 nodes in
        # bench/daemon_bench.py --gc-freeze).
        gc.freeze()
        sd_notify("READY=1", env)
    if watchdog:
        sd_notify("WATCHDOG=1", env)


async def _flush_alerts(
    daemon: Daemon, delivery: asyncio.Task[None] | None, timeout_s: float
) -> None:
    """At shutdown: let delivery finish, then one last attempt for what the final tick
    queued (write-ahead first), within ``timeout_s``."""
    try:
        async with asyncio.timeout(timeout_s):
            if delivery is not None:
                await delivery
            if daemon.alerts.held:  # the final tick's updates: write-ahead first
                daemon.save()
                daemon.alerts.release()
            await daemon.alerts.deliver()
    except TimeoutError:
        _log.warning("alert flush timed out", timeout_s=timeout_s)


def main_run(
    config_path: Path | None,
    env: Mapping[str, str] | None = None,
    *,
    clock: Callable[[], float] = time.time,
    on_tick: Callable[[Daemon, LoopTick], None] | None = None,
) -> int:
    """``detector run --config FILE``: 0 after a clean shutdown, 2 on bad input. ``clock``
    stamps ticks and ``on_tick`` follows them (tests run the real entry point in a subprocess
    on a simulator's clock, which their ``on_tick`` moves one interval a tick)."""
    environ = dict(os.environ if env is None else env)
    try:
        config = load_config(config_path, environ)
    except DetectorError as exc:
        configure_logging()
        _log.error("cannot start", error=str(exc))
        return 2
    configure_logging(config.logging.level, config.logging.format)
    try:
        _run(run_daemon(config, clock=clock, environ=environ, on_tick=on_tick))
    except DetectorError as exc:
        _log.error("daemon failed", error=str(exc))
        return 2
    return 0


def _run(coro: Any) -> None:
    """Run on uvloop when it is installed (faster sockets), else the stdlib loop."""
    try:
        import uvloop
    except ImportError:
        asyncio.run(coro)
        return
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(coro)


def _iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))
