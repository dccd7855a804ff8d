"""The end-to-end stack: real Alertmanager, Prometheus and node-exporter, the simulator's live
exporters with one planted failure, and ``detector run`` as a subprocess, all on loopback.

``Stack(tmp).start()`` starts, in dependency order: the webhook receiver, Alertmanager,
node-exporter, Prometheus (rules from rules/prometheus/, shortened: see ``shorten_rules``),
the simulated exporters and the detector daemon; then a ``Poller`` that snapshots
Alertmanager's and Prometheus' alert lists. ``close()`` stops all of it in reverse order
(Alertmanager last: nothing posts to a stopped one) and never raises; every process is reaped.

Timeline (wall seconds after every process is up, at ``SPEED`` simulated seconds per second;
the exporters' clock is held at the scenario's start until then, ``HeldClock``):
the PCIe failure of ``FAILED_NODE`` GPU ``FAILED_GPU`` (the GPU falls off the bus: its series
vanish) at ``FAILURE_AT_S / SPEED`` = 20 s, repaired ``REPAIR_S / SPEED`` = 15 s later. The
daemon scores the vanished GPU (telemetry health) above the threshold while it is gone and
below it once it is back, so its alert fires and resolves within the test.

The daemon's config turns ``alerts.alert_on_xid`` off: the XID 79 of this failure shows in
the DCGM gauge when the GPU comes back, and an XID-forced alert is held for 300 s of the
daemon's (wall) clock, longer than the test. The statistical alert is what is tested here;
XID forcing is covered in-process by tests/test_daemon.py on a fast clock. The GPU's vanishing
is definitive evidence, which forces the alert for ``alerts.xid_hold_s`` too: 5 s here,
shortened with the other durations, so the alert resolves once the GPU is back.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
import time
from pathlib import Path
from string import Template
from typing import Any

import yaml

from detector.sim import Exporters, FailureSpec, Scenario, serve

from .observe import Poller, WebhookReceiver
from .procs import Proc, dump, free_port, require_tool, stop_all, wait_http


class HeldClock:
    """``time.monotonic`` held still until ``release``: the exporters serve their first minute
    until every process is up, however long a loaded machine takes to start them."""

    def __init__(self) -> None:
        self.start = time.monotonic()
        self.offset: float | None = None

    def release(self) -> None:
        self.offset = time.monotonic() - self.start

    def __call__(self) -> float:
        return self.start if self.offset is None else time.monotonic() - self.offset


REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "rules" / "prometheus" / "detector.rules.yaml"
HERE = Path(__file__).resolve().parent

SPEED = 120.0  # simulated seconds per wall second
FAILURE_AT_S = 2400.0  # simulated seconds after the start: 20 wall seconds
REPAIR_S = 1800.0  # the repair cap: the GPU is back 15 wall seconds later
FAILED_NODE, FAILED_GPU = "node-02", "1"
SCENARIO = Scenario(
    nodes=4,
    gpus=4,
    days=0.25,
    fault_trace=None,
    noisy_nodes=0,
    seed=3,
    failures=(FailureSpec("pcie", node=1, gpu=1, at_s=FAILURE_AT_S, lead_s=0.0, xid=79),),
    repair_cap_s=REPAIR_S,
)
REAL_HOST = "e2e-host"  # the node name the daemon gives the real node-exporter
INTERVAL_S = 1.0  # the daemon's scrape interval
# Prometheus rule durations are divided by this (2m -> 2s); group intervals become 1s.
RULE_TIME_FACTOR = 60.0

_DURATION = re.compile(r"(\d+)(ms|s|m|h|d|w|y)")
_UNIT_S = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}


def duration_s(text: str) -> float:
    """Seconds of a Prometheus duration such as ``2m`` or ``1h30m``."""
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"not a Prometheus duration: {text!r}")
    return sum(int(n) * _UNIT_S[u] for n, u in parts)


def shorten_rules(src: Path, dst: Path, factor: float = RULE_TIME_FACTOR) -> dict[str, Any]:
    """Copy the project's rule file with every alert's ``for`` divided by ``factor`` (at least
    1 s) and every group's ``interval`` set to 1 s; expressions, labels and range windows are
    unchanged. The production ``for: 2m`` would otherwise keep the test waiting minutes."""
    doc: dict[str, Any] = yaml.safe_load(src.read_text())
    for group in doc["groups"]:
        if "interval" in group:
            group["interval"] = "1s"
        for rule in group["rules"]:
            if "for" in rule:
                rule["for"] = f"{max(1, round(duration_s(rule['for']) / factor))}s"
    dst.write_text(yaml.safe_dump(doc, sort_keys=False))
    return doc


def sim_targets(exporters: Exporters, page: int) -> str:
    """Prometheus static_configs (YAML flow) of the simulated exporters' ``page`` (0 dcgm,
    1 node-exporter): one target a node, named by a ``node`` target label as relabelling
    does in a real cluster, its path in ``__metrics_path__``."""
    configs = []
    for node, urls in sorted(exporters.urls.items()):
        address, path = re.match(r"http://([^/]+)(/.*)", urls[page]).groups()  # type: ignore[union-attr]
        configs.append({"targets": [address], "labels": {"__metrics_path__": path, "node": node}})
    return json.dumps(configs)


def _render(template: str, dst: Path, **values: object) -> Path:
    dst.write_text(Template((HERE / template).read_text()).substitute(values))
    return dst


class Stack:
    """See the module docstring. Attributes are set by ``start``."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.procs: list[Proc] = []
        self.webhook: WebhookReceiver | None = None
        self.exporters: Exporters | None = None
        self.poller: Poller | None = None
        self.rules: dict[str, Any] = {}
        self.sim_started = float("nan")  # time.monotonic() when the simulated clock started
        self.sim_started_wall = float("nan")  # the same moment in unix seconds
        self.tsdb = tmp / "prom-data"  # Prometheus' data directory

    # -- addresses --------------------------------------------------------------------------
    @property
    def alertmanager(self) -> str:
        return f"http://127.0.0.1:{self.am_port}"

    @property
    def prometheus(self) -> str:
        return f"http://127.0.0.1:{self.prom_port}"

    @property
    def detector(self) -> str:
        return f"http://127.0.0.1:{self.detector_port}"

    @property
    def node_exporter(self) -> str:
        return f"http://127.0.0.1:{self.ne_port}/metrics"

    def proc(self, name: str) -> Proc:
        return next(p for p in self.procs if p.name == name)

    # -- lifecycle --------------------------------------------------------------------------
    def start(self) -> None:
        alertmanager = require_tool("prometheus-alertmanager")
        prometheus = require_tool("prometheus")
        node_exporter = require_tool("prometheus-node-exporter")
        ports: set[int] = set()
        while len(ports) < 4:
            ports.add(free_port())
        self.am_port, self.prom_port, self.ne_port, self.detector_port = sorted(ports)
        logs = self.tmp / "logs"
        logs.mkdir()
        self.webhook = WebhookReceiver()

        am_config = _render("alertmanager.yml", self.tmp / "am.yml", webhook_url=self.webhook.url)
        am = self._start(
            "alertmanager",
            alertmanager,
            f"--config.file={am_config}",
            f"--storage.path={self.tmp / 'am-data'}",
            f"--web.listen-address=127.0.0.1:{self.am_port}",
            "--cluster.listen-address=",  # no gossip: a single instance
        )
        # Debian enables the systemd collector, which fails (and logs it every scrape) where
        # no systemd bus is reachable, as in CI containers.
        ne = self._start(
            "node-exporter",
            node_exporter,
            f"--web.listen-address=127.0.0.1:{self.ne_port}",
            "--no-collector.systemd",
        )
        wait_http(am, f"{self.alertmanager}/-/ready")
        wait_http(ne, self.node_exporter)

        clock = HeldClock()
        self.exporters = serve(SCENARIO, port=0, speed=SPEED, clock=clock)
        daemon = self._start_daemon()
        wait_http(daemon, f"{self.detector}/readyz", timeout_s=30.0)
        # Prometheus last: its first scrape of the detector finds it up, so the detector
        # health rules (down, absent) have no reason to fire.
        self.rules = shorten_rules(RULES, self.tmp / "detector.rules.yaml")
        prom_config = _render(
            "prometheus.yml",
            self.tmp / "prometheus.yml",
            alertmanager_port=self.am_port,
            rules_file=self.tmp / "detector.rules.yaml",
            detector_port=self.detector_port,
            node_exporter_port=self.ne_port,
            dcgm_targets=self._sim_targets(0),
            node_sim_targets=self._sim_targets(1),
        )
        prom = self._start(
            "prometheus",
            prometheus,
            f"--config.file={prom_config}",
            f"--storage.tsdb.path={self.tsdb}",
            f"--web.listen-address=127.0.0.1:{self.prom_port}",
            "--web.enable-lifecycle",
        )
        wait_http(prom, f"{self.prometheus}/-/ready")
        # Everything watches before the simulated clock runs: the failure comes FAILURE_AT_S /
        # SPEED after this, however long a loaded machine took to start the stack.
        clock.release()
        self.sim_started = time.monotonic()
        self.sim_started_wall = time.time()
        self.poller = Poller(
            {
                "alertmanager": f"{self.alertmanager}/api/v2/alerts",
                "prometheus": f"{self.prometheus}/api/v1/alerts",
            }
        )
        self.poller.start()

    def _sim_targets(self, page: int) -> str:
        assert self.exporters is not None
        return sim_targets(self.exporters, page)

    def _start(self, name: str, *argv: str, cwd: Path | None = None, **kw: Any) -> Proc:
        proc = Proc(name, argv, self.tmp / "logs", cwd=cwd, **kw)
        self.procs.append(proc)
        return proc

    def _start_daemon(self) -> Proc:
        assert self.exporters is not None
        static: list[dict[str, str]] = [
            {"url": url, "node": node, "kind": kind}
            for node, (dcgm, node_url) in self.exporters.urls.items()
            for url, kind in ((dcgm, "dcgm"), (node_url, "node"))
        ]
        static.append({"url": self.node_exporter, "node": REAL_HOST, "kind": "node"})
        config = {
            "targets": {"static": static},
            "scrape": {"interval_s": INTERVAL_S, "timeout_s": 0.8, "jitter_fraction": 0.0},
            "alerts": {
                "alert_on_xid": False,  # see the module docstring
                "xid_hold_s": 5,  # the vanished GPU's forced alert: see the module docstring
                # two ticks: the vanished GPU's score and its definitive evidence (confirmed on its
                # second tick) open one critical alert, as at the defaults
                "min_duration_s": 1,
                "min_observations": 1,
                "cooldown_s": 0,
                "clear_duration_s": 0,  # resolve on the first tick below the clear level
                # Firing alerts carry endsAt = now + 4 x 60 s: Alertmanager cannot expire one
                # within the test, so a resolve it notifies came from the daemon.
                "resend_interval_s": 60,
                "alertmanager_urls": [self.alertmanager],
            },
            "server": {"listen": f"127.0.0.1:{self.detector_port}"},
            "state": {"path": str(self.tmp / "detector-state.npz"), "save_interval_s": 10},
            "kmsg": {"enabled": False},
            "logging": {"level": "info", "format": "json"},
        }
        path = self.tmp / "detector.yaml"
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        # The config file alone decides: no DETECTOR_* overrides or systemd socket leak in.
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith("DETECTOR_") and k not in ("NOTIFY_SOCKET", "WATCHDOG_USEC")
        }
        argv = [sys.executable, "-m", "detector.cli", "run", "--config", str(path)]
        return self._start("detector", *argv, cwd=REPO, env=env)

    def close(self) -> None:
        """Stop everything started so far, last started first; never raises."""
        if self.poller is not None:
            self.poller.close()
        stop_all(reversed(self.procs))
        if self.exporters is not None:
            with contextlib.suppress(Exception):
                self.exporters.close()
        if self.webhook is not None:
            with contextlib.suppress(Exception):
                self.webhook.close()

    def logs(self) -> str:
        """Every process's command line, state and log tail (for failure messages)."""
        return dump(self.procs)
