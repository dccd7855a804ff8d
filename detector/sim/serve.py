"""Live HTTP exporters for the simulated cluster (stdlib http.server, one thread per port).

Clock: the simulated time is ``scenario.start + (wall - wall_at_start) * speed``; a scrape
returns the page of the latest tick at or before that time (frames are produced lazily and
in order, so a fast-forwarded clock just advances the generator). Past the scenario's end the
last tick stays on display.

Layout: ``per_node_ports=True`` binds ``port + i`` for node i, each serving ``/metrics``
(dcgm-exporter page, like its :9400) and ``/node/metrics`` (node-exporter page); with
``per_node_ports=False`` one port serves ``/<node>/dcgm`` and ``/<node>/node`` for every node.
Unknown paths get 404.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from ..errors import ConfigError
from ..model import FloatArray
from .cluster import SimulatedCluster
from .scenario import Scenario


class _ClusterHTTPServer(ThreadingHTTPServer):
    # A scraper opens every node's connections at once (126 for 63 nodes on one port);
    # socketserver's default listen backlog of 5 would turn most of them into timeouts.
    request_queue_size = 1024
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A scraper that gave up (its timeout) closed the connection mid-page: that is the
        scraper's business, not an error of the exporter worth a traceback."""
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)


CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class LiveClock:
    """The simulated cluster advanced on a (scaled) clock; thread-safe ``current()``."""

    def __init__(
        self,
        cluster: SimulatedCluster,
        speed: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.cluster = cluster
        self.speed = speed
        self.clock = clock
        self._origin = clock()
        self._frames: Iterator[tuple[float, FloatArray]] = cluster.frames()
        self._lock = threading.Lock()
        self._now = next(self._frames)

    def current(self) -> tuple[float, FloatArray]:
        target = self.cluster.scenario.start + (self.clock() - self._origin) * self.speed
        with self._lock:
            while True:
                step = self.cluster.scenario.step_s
                if self._now[0] + step > target:
                    return self._now
                nxt = next(self._frames, None)
                if nxt is None:
                    return self._now
                self._now = nxt


@dataclass
class Exporters:
    """Running servers; ``urls`` maps node -> (dcgm url, node-exporter url); ``cluster`` is
    the one served (its ``failures`` are the plan) and ``started_at`` the wall time (unix
    seconds) at which its simulated clock stood at ``scenario.start``."""

    servers: list[_ClusterHTTPServer]
    urls: dict[str, tuple[str, str]]
    cluster: SimulatedCluster
    started_at: float
    threads: list[threading.Thread] = field(default_factory=list)

    def close(self) -> None:
        for server in self.servers:
            server.shutdown()
            server.server_close()
        for thread in self.threads:
            thread.join(timeout=5)


def _handler(live: LiveClock, routes: dict[str, tuple[str, int]]) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            route = routes.get(self.path.split("?", 1)[0])
            if route is None:
                self.send_error(404, "unknown path")
                return
            node, page = route
            t, values = live.current()
            body = live.cluster.exposition(node, t, values)[page].encode()
            self.send_response(200)
            self.send_header("Content-Type", CONTENT_TYPE)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            try:
                self.wfile.write(body)
            except (BrokenPipeError, ConnectionResetError):
                return  # the scraper gave up or stopped (a timeout, a daemon shut down)

        def log_message(self, format: str, *args: object) -> None:
            return  # scrapes every few seconds would flood stderr

    return Handler


def serve(
    scenario: Scenario,
    host: str = "127.0.0.1",
    port: int = 9400,
    per_node_ports: bool = False,
    speed: float = 1.0,
    clock: Callable[[], float] = time.monotonic,
) -> Exporters:
    """Start the exporters in background threads and return them (call ``close()``).
    ``port=0`` with ``per_node_ports=False`` picks a free port."""
    if scenario.job_label_runs:  # target labels are the printed config's, not the pages'
        raise ConfigError("serve: job_label_runs relabels a dump's series; it cannot be served")
    cluster = SimulatedCluster(scenario)
    started_at = time.time()
    live = LiveClock(cluster, speed, clock)
    names = [scenario.node_name(n) for n in range(scenario.nodes)]
    plans: list[tuple[int, dict[str, tuple[str, int]]]] = []
    if per_node_ports:
        for i, name in enumerate(names):
            plans.append(
                (port + i if port else 0, {"/metrics": (name, 0), "/node/metrics": (name, 1)})
            )
    else:
        routes = {f"/{name}/dcgm": (name, 0) for name in names}
        routes |= {f"/{name}/node": (name, 1) for name in names}
        plans.append((port, routes))
    exporters = Exporters([], {}, cluster, started_at)
    for bind_port, routes in plans:
        server = _ClusterHTTPServer((host, bind_port), _handler(live, routes))
        server.daemon_threads = True
        actual = server.server_address[1]
        base = f"http://{host}:{actual}"
        for path, (name, page) in routes.items():
            dcgm, node = exporters.urls.get(name, ("", ""))
            exporters.urls[name] = (base + path, node) if page == 0 else (dcgm, base + path)
        thread = threading.Thread(
            target=server.serve_forever, name=f"sim-exporter-{actual}", daemon=True
        )
        thread.start()
        exporters.servers.append(server)
        exporters.threads.append(thread)
    return exporters
