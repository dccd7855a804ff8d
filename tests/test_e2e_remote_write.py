"""End to end with the real Debian Prometheus remote-writing to ``detector run``.

The simulator's live exporters (tests/e2e/stack.py's scenario with the failure later: node-02's
GPU 1 falls off the bus 40 s after every process is up, so that both daemons have watched a
while before, and is back 15 s later) are watched two ways at once, each by a
``detector run`` subprocess on loopback:

- directly: the daemon scrapes the exporters itself (``targets.static``), as in test_e2e.py;
- through Prometheus: Prometheus scrapes the same exporters every second and remote-writes,
  with basic auth, what the rules read (``write_relabel_configs`` keeping
  ``detector export-selector --regex``, as docs/deploy.md says) to a daemon that has no
  targets and ``remote_write.enabled``.

Both must alert on the failed node and on nothing else; the remote-written daemon must have
taken Prometheus' requests (``detector_remote_write_requests_total{result="ok"}``) and
refused none. Alerts are read from each daemon's JSON log ("alert firing").

A missing prometheus binary skips this on a developer machine and fails it under CI.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from string import Template
from typing import Any

import httpx
import pytest
import yaml
from e2e.procs import Proc, free_port, require_tool, stop_all, wait_http, wait_until
from e2e.stack import FAILED_NODE, HERE, REPO, SCENARIO, SPEED, HeldClock, sim_targets

from detector.ingest.parse import parse_exposition
from detector.sim import serve

FAILURE_AT_S = 4800.0  # simulated seconds: 40 wall seconds after every process is up
(_PCIE,) = SCENARIO.failures
LATER = dataclasses.replace(SCENARIO, failures=(dataclasses.replace(_PCIE, at_s=FAILURE_AT_S),))

PASSWORD = "e2e-remote-write"
RESOLVE_TIMEOUT_S = 120.0  # the failure resolves ~55 s after the processes are up; a ceiling


@dataclass
class Runs:
    direct: Proc
    remote: Proc
    remote_metrics: dict[str, float]
    procs: list[Proc]


def _selector() -> str:
    out = subprocess.run(
        [sys.executable, "-m", "detector.cli", "export-selector", "--regex"],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
    )
    return out.stdout.strip()


def _daemon(tmp: Path, name: str, port: int, **sections: Any) -> Proc:
    """``detector run`` with the alert settings of tests/e2e/stack.py (statistical alerts
    only, resolve on the first tick below the clear level), nothing sent anywhere."""
    config = {
        "scrape": {"interval_s": 1.0, "timeout_s": 0.8, "jitter_fraction": 0.0},
        "alerts": {
            "alert_on_xid": False,
            "xid_hold_s": 5,  # a vanished GPU's forced alert, shortened as in tests/e2e/stack.py
            # two ticks: the vanished GPU's score and its definitive evidence (confirmed on its
            # second tick) open one critical alert, as at the defaults
            "min_duration_s": 1,
            "min_observations": 1,
            "cooldown_s": 0,
            "clear_duration_s": 0,
        },
        "server": {"listen": f"127.0.0.1:{port}"},
        "kmsg": {"enabled": False},
        "logging": {"level": "info", "format": "json"},
    } | sections
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("DETECTOR_") and k not in ("NOTIFY_SOCKET", "WATCHDOG_USEC")
    }
    argv = [sys.executable, "-m", "detector.cli", "run", "--config", str(path)]
    return Proc(name, argv, tmp / "logs", cwd=REPO, env=env)


def _events(proc: Proc, event: str) -> list[dict[str, Any]]:
    out = []
    for line in proc.log_path.read_text(errors="replace").splitlines():
        with contextlib.suppress(ValueError):
            record = json.loads(line)
            if isinstance(record, dict) and record.get("event") == event:
                out.append(record)
    return out


def alerted(proc: Proc) -> set[tuple[str, str | None]]:
    """(node, gpu) of every alert the daemon fired."""
    return {(r["node"], r.get("gpu")) for r in _events(proc, "alert firing")}


def _resolved(proc: Proc) -> bool:
    return any(r.get("node") == FAILED_NODE for r in _events(proc, "alert resolved"))


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runs]:
    prometheus = require_tool("prometheus")
    tmp = tmp_path_factory.mktemp("e2e-rw")
    (tmp / "logs").mkdir()
    procs: list[Proc] = []
    exporters = None
    try:
        selector = _selector()
        ports: set[int] = set()
        while len(ports) < 3:
            ports.add(free_port())
        direct_port, remote_port, prom_port = sorted(ports)
        clock = HeldClock()
        exporters = serve(LATER, port=0, speed=SPEED, clock=clock)
        static = [
            {"url": url, "node": node, "kind": kind}
            for node, (dcgm, node_url) in exporters.urls.items()
            for url, kind in ((dcgm, "dcgm"), (node_url, "node"))
        ]
        direct = _daemon(tmp, "direct", direct_port, targets={"static": static})
        procs.append(direct)
        digest = "sha256:" + hashlib.sha256(PASSWORD.encode()).hexdigest()
        remote = _daemon(
            tmp,
            "remote",
            remote_port,
            remote_write={"enabled": True},
            server={"listen": f"127.0.0.1:{remote_port}", "basic_auth": {"prometheus": digest}},
        )
        procs.append(remote)
        config = tmp / "prometheus.yml"
        config.write_text(
            Template((HERE / "prometheus_remote_write.yml").read_text()).substitute(
                detector_port=remote_port,
                password=PASSWORD,
                selector=json.dumps(selector),
                dcgm_targets=sim_targets(exporters, 0),
                node_sim_targets=sim_targets(exporters, 1),
            )
        )
        # Prometheus at once (it retries until the daemon listens): a loaded CI machine takes
        # seconds to start each process
        prom = Proc(
            "prometheus",
            [
                prometheus,
                f"--config.file={config}",
                f"--storage.tsdb.path={tmp / 'prom-data'}",
                f"--web.listen-address=127.0.0.1:{prom_port}",
            ],
            tmp / "logs",
        )
        procs.append(prom)
        wait_http(direct, f"http://127.0.0.1:{direct_port}/readyz", timeout_s=30.0)
        wait_http(remote, f"http://127.0.0.1:{remote_port}/readyz", timeout_s=30.0)
        wait_http(prom, f"http://127.0.0.1:{prom_port}/-/ready")
        clock.release()
        wait_until(
            lambda: _resolved(direct) and _resolved(remote),
            RESOLVE_TIMEOUT_S,
            f"both daemons to alert on {FAILED_NODE} (failure at {FAILURE_AT_S / SPEED:g} s) "
            "and resolve it",
            procs,
        )
        response = httpx.get(
            f"http://127.0.0.1:{remote_port}/metrics", auth=("prometheus", PASSWORD), timeout=5.0
        )
        response.raise_for_status()
        page = parse_exposition(response.content, "remote daemon /metrics")
        metrics = dict(zip(page.keys, page.values, strict=True))
        yield Runs(direct, remote, metrics, procs)
    finally:
        stop_all(reversed(procs))
        if exporters is not None:
            with contextlib.suppress(Exception):
                exporters.close()


@pytest.mark.tools
@pytest.mark.slow
def test_remote_written_data_finds_the_failure_direct_scraping_finds(runs: Runs) -> None:
    """The daemon fed by Prometheus' remote write alerts on the failed node, as the daemon
    scraping the exporters itself does, and on nothing else."""
    remote = alerted(runs.remote)
    assert {FAILED_NODE} == {node for node, _ in remote}, remote
    assert alerted(runs.direct) == remote


@pytest.mark.tools
@pytest.mark.slow
def test_prometheus_requests_are_all_taken(runs: Runs) -> None:
    """Every remote-write request of Prometheus (with basic auth) was taken, and every sample
    in it: none out of order, repeated, too old or kept out."""
    metrics = runs.remote_metrics
    requests = {
        key: value for key, value in metrics.items() if key.startswith("detector_remote_write_req")
    }
    assert requests.get('detector_remote_write_requests_total{result="ok"}', 0) > 0, requests
    assert {'detector_remote_write_requests_total{result="ok"}'} == set(requests), requests
    assert metrics['detector_remote_write_samples_total{result="accepted"}'] > 0
    late = {
        result: metrics[f'detector_remote_write_samples_total{{result="{result}"}}']
        for result in ("out_of_order", "duplicate", "too_old", "dropped")
    }
    # Prometheus sends each series in order, once, and (200 ms batches) well within a minute
    assert {"out_of_order": 0, "duplicate": 0, "too_old": 0, "dropped": 0} == late
