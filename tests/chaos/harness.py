"""The chaos cluster: the simulator's live exporters, some targets replaced by misbehaving ones,
and a daemon config over them. Shared by tests/test_chaos.py and bench/chaos_bench.py.

Clock: the simulator runs ``speed`` simulated seconds per wall second; ``SimClock`` gives the
daemon the same scaled time, so one tick of ``step_s / speed`` wall seconds sees one new
simulated step, as a real 30 s scrape interval would.
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog
import yaml

from detector.config.load import Config, load_config
from detector.sim import Scenario, serve

from .servers import KINDS, ChaosFarm

SPEED = 30.0  # one 30 s simulated step per 1 s tick
STEP_S = 30.0


class SimClock:
    """``start + (monotonic - origin) * speed``: the simulator's clock, for the daemon."""

    def __init__(self, start: float, speed: float) -> None:
        self.start, self.speed = start, speed
        self.origin = time.monotonic()

    def __call__(self) -> float:
        return self.start + (time.monotonic() - self.origin) * self.speed


def quiet_scenario(nodes: int = 63, gpus: int = 8, seed: int = 3, **extra: Any) -> Scenario:
    """A cluster with no planted failure and no noisy node: every alert would be false."""
    fields: dict[str, Any] = {
        "nodes": nodes,
        "gpus": gpus,
        "days": 0.5,
        "step_s": STEP_S,
        "seed": seed,
        "fault_trace": None,
        "failures": (),
        "noisy_nodes": 0,
    }
    return Scenario(**(fields | extra))


def bad_plan(nodes: Sequence[str], fraction: float = 0.2) -> dict[str, str]:
    """Node -> misbehaviour for ``fraction`` of the nodes (every kind used, round robin),
    spread over the cluster (every k-th node) so cohorts keep healthy peers."""
    if fraction <= 0:
        return {}
    count = max(len(KINDS), round(fraction * len(nodes)))
    stride = len(nodes) / count
    return {nodes[int(i * stride)]: KINDS[i % len(KINDS)] for i in range(count)}


@dataclass
class ChaosCluster:
    """Running exporters + chaos servers; ``targets`` is the daemon's static target list."""

    clock: SimClock
    urls: dict[str, tuple[str, str]]
    plan: dict[str, str]
    farm: ChaosFarm
    targets: list[dict[str, Any]] = field(default_factory=list)

    @property
    def healthy(self) -> list[str]:
        return [n for n in self.urls if n not in self.plan]


@contextmanager
def chaos_cluster(
    scenario: Scenario,
    *,
    fraction: float = 0.2,
    speed: float = SPEED,
    slow_s: float = 2.0,
    with_bad: bool = True,
    node_exporter: bool = False,
    clock: Callable[[], float] = time.monotonic,
) -> Iterator[ChaosCluster]:
    """Start the simulator and, for the planned bad nodes, a chaos server per target (both
    exporters of a bad node misbehave the same way). ``with_bad=False``: the bad nodes'
    targets are simply left out (the control run). One target per node (its dcgm-exporter:
    63 targets for 63 nodes) unless ``node_exporter``: the simulator renders every page in
    Python and on a shared 2-core machine 126 pages at once take longer than any sane scrape
    timeout, which would test the simulator instead of the daemon. ``clock``: what the
    exporters' simulated time runs on (``speed`` simulated seconds per second of it)."""
    exporters = serve(scenario, port=0, speed=speed, clock=clock)
    clock = SimClock(scenario.start, speed)
    farm = ChaosFarm(slow_s=slow_s)
    try:
        plan = bad_plan(list(exporters.urls), fraction)
        cluster = ChaosCluster(clock, exporters.urls, plan, farm)
        for node, (dcgm, node_url) in exporters.urls.items():
            pages = ((dcgm, "dcgm"), (node_url, "node")) if node_exporter else ((dcgm, "dcgm"),)
            for url, kind in pages:
                if node in plan:
                    if not with_bad:
                        continue
                    url = farm.add(plan[node], url).url
                cluster.targets.append({"url": url, "node": node, "kind": kind})
        yield cluster
    finally:
        farm.close()
        exporters.close()


@contextmanager
def restored_logging() -> Iterator[None]:
    """Undo ``configure_logging`` afterwards (structlog defaults, the root logger's handlers
    and level): a later test must not write into a stream this one closed."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        yield
    finally:
        structlog.reset_defaults()
        root.handlers[:] = handlers
        root.setLevel(level)


def free_port() -> int:
    """A loopback port free right now (for a subprocess daemon's listen address)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def write_config(path: Path, targets: list[dict[str, Any]], **sections: Any) -> Path:
    """A daemon config file: ``targets`` as static targets, ``sections`` merged over defaults
    (interval 1 s wall, timeout 0.7 s, 1 MiB body limit, 5-step warm-up, no kmsg)."""
    doc: dict[str, Any] = {
        "targets": {"static": targets},
        "scrape": {
            "interval_s": STEP_S / SPEED,
            "timeout_s": 0.7,
            "jitter_fraction": 0.0,
            "body_limit_bytes": 1024 * 1024,
        },
        "scoring": {"warmup_s": 5 * STEP_S},
        "alerts": {
            "min_duration_s": 0,
            "min_observations": 1,
            "cooldown_s": 0,
            "resend_interval_s": 60,
        },
        "kmsg": {"enabled": False},
        "server": {"listen": f"127.0.0.1:{free_port()}"},
        "logging": {"level": "warning"},
    }
    for key, value in sections.items():
        doc[key] = doc.get(key, {}) | value if isinstance(value, dict) else value
    path.write_text(yaml.safe_dump(doc))
    return path


def config(path: Path, targets: list[dict[str, Any]], **sections: Any) -> Config:
    return load_config(write_config(path, targets, **sections), env={})


def listen_url(path: Path) -> str:
    """The http:// base URL a config file's server listens on."""
    return "http://" + yaml.safe_load(path.read_text())["server"]["listen"]
