"""Agent mode in Kubernetes: this node's exporter pods found and followed through the API
(ingest/kubernetes/pods.py), against a local API server on real sockets.

``FakeApiServer`` answers the two requests discovery makes as the API server does: the pod
list (label and field selectors applied, a resourceVersion) and the watch from a
resourceVersion (events as JSON lines, held open; an ERROR event with code 410 when that
resourceVersion was compacted away). It checks the bearer token. Pods are on loopback
addresses (127.0.0.x), each served by a small exporter, so what is scraped is checked too.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from detector.config import Config, KubernetesTargetsConfig
from detector.errors import ConfigError
from detector.ingest import PodDiscovery, Scraper, TargetSource
from detector.loop import LoopTick
from detector.service import Daemon, run_daemon

NODE = "gpu-01"
TOKEN = "sa-token-1"
HANG_GUARD_S = 120.0  # bounds a hang; never a timing assertion


class FakeApiServer:
    """The pod list and watch of a Kubernetes API server (module docstring)."""

    def __init__(self) -> None:
        self.rv = 1000
        self.pods: dict[str, dict[str, Any]] = {}  # namespace/name -> pod
        self.events: list[tuple[int, str, dict[str, Any]]] = []  # (rv, type, pod)
        self.compacted = 0  # watches from a resourceVersion below this get 410
        self.fail_next = 0  # answer this many requests 500
        self.requests: list[dict[str, str]] = []
        self.cond = threading.Condition()
        self.generation = 0  # bumped to end every open watch (the server's timeout)
        self.watching = 0  # watches open now
        api = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                api.handle(self)

            def log_message(self, format: str, *args: object) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    # -- what the test does to the cluster ------------------------------------------------
    def put(self, pod: dict[str, Any]) -> None:
        with self.cond:
            key = f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"
            kind = "MODIFIED" if key in self.pods else "ADDED"
            self._record(kind, pod)
            self.pods[key] = pod

    def delete(self, namespace: str, name: str) -> None:
        with self.cond:
            self._record("DELETED", self.pods.pop(f"{namespace}/{name}"))

    def end_watches(self) -> None:
        """End the open watches, as the server does at their timeoutSeconds."""
        with self.cond:
            self.generation += 1
            self.cond.notify_all()

    def _record(self, kind: str, pod: dict[str, Any]) -> None:
        self.rv += 1
        pod["metadata"]["resourceVersion"] = str(self.rv)
        self.events.append((self.rv, kind, json.loads(json.dumps(pod))))
        self.cond.notify_all()

    # -- the API ---------------------------------------------------------------------------
    def handle(self, request: BaseHTTPRequestHandler) -> None:
        parts = urlsplit(request.path)
        query = {k: v[0] for k, v in parse_qs(parts.query).items()}
        with self.cond:
            self.requests.append({"path": parts.path, **query})
            failing = self.fail_next > 0
            self.fail_next -= failing
        if request.headers.get("Authorization") != f"Bearer {TOKEN}":
            self._answer(request, 401, {"kind": "Status", "code": 401})
        elif failing:
            self._answer(request, 500, {"kind": "Status", "code": 500})
        else:
            namespace = parts.path.split("/")[4] if "/namespaces/" in parts.path else None
            wanted = self._selector(query, namespace)
            if query.get("watch") == "1":
                self._watch(request, int(query["resourceVersion"]), wanted)
                return
            with self.cond:
                items = [p for p in self.pods.values() if wanted(p)]
                body = {"kind": "PodList", "metadata": {"resourceVersion": str(self.rv)}}
            self._answer(request, 200, body | {"items": items})

    def _selector(
        self, query: dict[str, str], namespace: str | None
    ) -> Callable[[dict[str, Any]], bool]:
        label, value = query["labelSelector"].split("=")
        field, node = query["fieldSelector"].split("=")
        assert "spec.nodeName" == field

        def wanted(pod: dict[str, Any]) -> bool:
            return (
                pod["metadata"]["labels"].get(label) == value
                and pod["spec"]["nodeName"] == node
                and namespace in (None, pod["metadata"]["namespace"])
            )

        return wanted

    def _watch(
        self, request: BaseHTTPRequestHandler, since: int, wanted: Callable[[dict[str, Any]], bool]
    ) -> None:
        request.send_response(200)
        request.send_header("Content-Type", "application/json")
        request.end_headers()
        with self.cond:
            if since < self.compacted:
                gone = {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"}
                request.wfile.write(json.dumps({"type": "ERROR", "object": gone}).encode() + b"\n")
                return
            generation = self.generation
            self.watching += 1
            try:
                while True:
                    for rv, kind, pod in self.events:
                        if rv > since and wanted(pod):
                            line = json.dumps({"type": kind, "object": pod}).encode() + b"\n"
                            request.wfile.write(line)
                    since = max([since] + [rv for rv, _, _ in self.events])
                    self.cond.wait(0.5)
                    if self.generation != generation:
                        return
            finally:
                self.watching -= 1

    @staticmethod
    def _answer(request: BaseHTTPRequestHandler, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        request.send_response(status)
        request.send_header("Content-Type", "application/json")
        request.send_header("Content-Length", str(len(data)))
        request.end_headers()
        request.wfile.write(data)

    def close(self) -> None:
        self.end_watches()
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(30)


class Exporter:
    """A dcgm-exporter or node-exporter page on one loopback address (a pod's IP)."""

    def __init__(self, host: str, port: int, page: str) -> None:
        body = page.encode()

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                return

        self.server = ThreadingHTTPServer((host, port), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def pod(
    name: str,
    ip: str,
    *,
    app: tuple[str, str] = ("app", "nvidia-dcgm-exporter"),
    node: str = NODE,
    port: tuple[str, int] = ("metrics", 9400),
    ready: bool = True,
    namespace: str = "gpu-operator",
) -> dict[str, Any]:
    """A pod object as the API returns it (the fields discovery reads)."""
    return {
        "metadata": {"name": name, "namespace": namespace, "labels": dict([app])},
        "spec": {
            "nodeName": node,
            "containers": [
                {"name": "exporter", "ports": [{"name": port[0], "containerPort": port[1]}]}
            ],
        },
        "status": {
            "phase": "Running" if ready else "Pending",
            "podIP": ip,
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


NODE_APP = ("app.kubernetes.io/name", "prometheus-node-exporter")


@pytest.fixture
def api() -> Iterator[FakeApiServer]:
    server = FakeApiServer()
    yield server
    server.close()


def _config(api: FakeApiServer, tmp_path: Path, node_port: int) -> Config:
    """An agent on NODE: dcgm-exporter pods by port name (metrics), node-exporter pods in
    monitoring by number."""
    token = tmp_path / "token"
    token.write_text(TOKEN + "\n")
    return Config.model_validate(
        {
            "mode": "agent",
            "node_name": NODE,
            "targets": {
                "kubernetes": {
                    "enabled": True,
                    "api_url": api.url,
                    "token_path": str(token),
                    "dcgm": {"label_selector": "app=nvidia-dcgm-exporter", "port": "metrics"},
                    "node": {
                        "label_selector": "app.kubernetes.io/name=prometheus-node-exporter",
                        "namespace": "monitoring",
                        "port": node_port,
                    },
                    "backoff_max_s": 4,
                }
            },
        }
    )


class Waits:
    """The backoff waits discovery asked for (a virtual sleep: nothing waits)."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)
        await asyncio.sleep(0)


async def _until(check: Callable[[], bool], what: str) -> None:
    """Poll until ``check()``: the bound guards against a hang, it asserts no timing."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + HANG_GUARD_S
    while not check():
        assert loop.time() < deadline, f"never happened: {what}"
        await asyncio.sleep(0.02)


@pytest.fixture
async def following(
    api: FakeApiServer, tmp_path: Path
) -> AsyncIterator[tuple[TargetSource, PodDiscovery, Waits, dict[str, Exporter]]]:
    dcgm_a = Exporter("127.0.0.2", 0, 'DCGM_FI_DEV_GPU_TEMP{gpu="0"} 41\n')
    dcgm_b = Exporter("127.0.0.3", dcgm_a.port, 'DCGM_FI_DEV_GPU_TEMP{gpu="0"} 42\n')
    node = Exporter("127.0.0.4", 0, "node_load1 0.5\n")
    exporters = {"dcgm-a": dcgm_a, "dcgm-b": dcgm_b, "node": node}
    waits = Waits()
    config = _config(api, tmp_path, node.port)
    discovery = PodDiscovery.for_agent(config, sleep=waits)
    assert discovery is not None
    task = asyncio.create_task(discovery.run())
    try:
        yield TargetSource(config, pods=discovery), discovery, waits, exporters
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await discovery.aclose()
        for exporter in exporters.values():
            exporter.close()


def _urls(source: TargetSource) -> list[str]:
    return [t.url for t in source.current()]


async def test_the_agent_scrapes_its_nodes_ready_exporter_pods_and_follows_them(
    api: FakeApiServer,
    following: tuple[TargetSource, PodDiscovery, Waits, dict[str, Exporter]],
) -> None:
    """Only this node's Running and ready pods of each selector are targets, named by the
    node; a restarted dcgm-exporter (new pod, new IP) is scraped at its new address once
    ready, the old one no longer; a deleted node-exporter pod stops being scraped."""
    source, discovery, _, exporters = following
    dcgm_port, node_port = exporters["dcgm-a"].port, exporters["node"].port
    api.put(pod("dcgm-a", "127.0.0.2", port=("metrics", dcgm_port)))
    api.put(pod("dcgm-other-node", "127.0.0.9", node="gpu-02", port=("metrics", dcgm_port)))
    api.put(pod("node-exp", "127.0.0.4", app=NODE_APP, port=("http-metrics", node_port),
                namespace="monitoring"))  # fmt: skip
    api.put(pod("node-exp-elsewhere", "127.0.0.8", app=NODE_APP, namespace="default"))
    first = [f"http://127.0.0.2:{dcgm_port}/metrics", f"http://127.0.0.4:{node_port}/metrics"]
    await _until(lambda: first == _urls(source), "the first pods")
    targets = source.current()
    assert [("dcgm", NODE), ("node", NODE)] == [(t.kind, t.node) for t in targets]
    assert [("instance", f"127.0.0.2:{dcgm_port}"), ("node", NODE)] == list(targets[0].labels)

    async with Scraper(timeout_s=5.0) as scraper:
        scraped = await scraper.scrape_targets(source.current())
    assert [41.0, 0.5] == [r.exposition.values[0] for r in scraped if r.exposition]

    # the dcgm-exporter restarts: the old pod goes, a new one comes, not ready at first
    api.delete("gpu-operator", "dcgm-a")
    api.put(pod("dcgm-b", "127.0.0.3", port=("metrics", dcgm_port), ready=False))
    node_only = [f"http://127.0.0.4:{node_port}/metrics"]
    await _until(lambda: node_only == _urls(source), "the old dcgm pod gone")
    api.put(pod("dcgm-b", "127.0.0.3", port=("metrics", dcgm_port)))
    restarted = [f"http://127.0.0.3:{dcgm_port}/metrics", *node_only]
    await _until(lambda: restarted == _urls(source), "the new dcgm pod ready")
    async with Scraper(timeout_s=5.0) as scraper:
        scraped = await scraper.scrape_targets(source.current())
    assert [42.0, 0.5] == [r.exposition.values[0] for r in scraped if r.exposition]

    api.delete("monitoring", "node-exp")
    await _until(lambda: restarted[:1] == _urls(source), "the node-exporter pod deleted")
    assert 0 == sum(w.errors for w in discovery.watches)


async def test_a_watch_expired_with_410_gone_lists_again_and_catches_up(
    api: FakeApiServer,
    following: tuple[TargetSource, PodDiscovery, Waits, dict[str, Exporter]],
) -> None:
    """A change made while the watch's resourceVersion expired (410 Gone) is found by the
    list that follows: the targets catch up without an error backoff."""
    source, discovery, _, exporters = following
    port = exporters["dcgm-a"].port
    api.put(pod("dcgm-a", "127.0.0.2", port=("metrics", port)))
    await _until(lambda: 1 == len(_urls(source)), "the first pod")
    await _until(lambda: 2 == api.watching, "both watches open")
    dcgm = discovery.watches[0]
    events_before = len(api.events)
    lists_before = sum(1 for r in api.requests if "watch" not in r)
    with api.cond:  # the restart happens while no watch can see it, then is compacted
        api.end_watches()
        del api.pods["gpu-operator/dcgm-a"]
        api.rv += 1
        api.pods["gpu-operator/dcgm-b"] = pod("dcgm-b", "127.0.0.3", port=("metrics", port))
        api.pods["gpu-operator/dcgm-b"]["metadata"]["resourceVersion"] = str(api.rv)
        api.compacted = api.rv  # every resourceVersion before this one: 410 Gone
    assert events_before == len(api.events)  # no event tells of it: only a new list can
    await _until(lambda: [f"http://127.0.0.3:{port}/metrics"] == _urls(source), "the relisted pod")
    assert 1 <= dcgm.relists
    assert lists_before < sum(1 for r in api.requests if "watch" not in r)
    assert 0 == sum(w.errors for w in discovery.watches)


async def test_api_errors_are_retried_with_a_doubling_backoff_keeping_the_targets(
    api: FakeApiServer,
    following: tuple[TargetSource, PodDiscovery, Waits, dict[str, Exporter]],
) -> None:
    """HTTP 500s back off 0.5, 1, 2, 4 s (capped at backoff_max_s) while the targets already
    found stay; once the API answers again the changes are picked up."""
    source, discovery, waits, exporters = following
    port = exporters["dcgm-a"].port
    api.put(pod("dcgm-a", "127.0.0.2", port=("metrics", port)))
    await _until(lambda: 1 == len(_urls(source)), "the first pod")
    api.fail_next = 10  # more than both watchers' retries of the 5 below need
    api.end_watches()  # both watchers reconnect and meet the failures
    await _until(lambda: api.fail_next == 0, "the failing requests")
    assert [f"http://127.0.0.2:{port}/metrics"] == _urls(source)
    api.put(pod("dcgm-b", "127.0.0.3", port=("metrics", port)))
    await _until(lambda: 2 == len(_urls(source)), "the change after the failures")
    # both watchers' waits, interleaved: each doubles from 0.5 s and stops at 4 s
    for watch in discovery.watches:
        assert watch.errors >= 1
    assert sorted(set(waits.waits)) <= [0.5, 1.0, 2.0, 4.0]
    assert 4.0 in waits.waits
    assert 10 == sum(w.errors for w in discovery.watches)


def test_outside_a_cluster_without_api_url_is_a_config_error_naming_the_key() -> None:
    """No KUBERNETES_SERVICE_HOST and no api_url: a ConfigError naming
    targets.kubernetes.api_url, at start."""
    config = Config.model_validate(
        {"mode": "agent", "node_name": NODE, "targets": {"kubernetes": {"enabled": True}}}
    )
    with pytest.raises(ConfigError, match=r"targets\.kubernetes\.api_url not set"):
        PodDiscovery.for_agent(config, env={})


def test_discovery_is_off_unless_enabled_in_agent_mode() -> None:
    """Fleet mode, or an agent without targets.kubernetes.enabled, scrapes as before."""
    on = {"kubernetes": {"enabled": True, "api_url": "http://127.0.0.1:1"}}
    assert PodDiscovery.for_agent(Config.model_validate({"targets": on})) is None
    agent = Config.model_validate({"mode": "agent", "node_name": NODE})
    assert PodDiscovery.for_agent(agent) is None
    assert ["http://localhost:9400/metrics", "http://localhost:9100/metrics"] == [
        t.url for t in TargetSource(agent).current()
    ]


@pytest.mark.parametrize(
    ("section", "complaint"),
    [
        ({"dcgm": {"label_selector": "app=a=b", "port": 9400}}, "label selector requirement"),
        ({"dcgm": {"label_selector": "app=x", "port": "Metrics_Port"}}, "container port name"),
        ({"node": {"label_selector": "app=x", "port": 70000}}, "1-65535"),
        ({"node": {"label_selector": "app=x", "port": 9100, "path": "metrics"}}, "start with"),
    ],
)
def test_a_bad_exporter_pod_setting_is_refused_naming_it(
    section: dict[str, Any], complaint: str
) -> None:
    """Selectors, ports and paths are checked when the config loads."""
    with pytest.raises(ValueError, match=complaint):
        KubernetesTargetsConfig.model_validate(section)


def test_the_defaults_select_the_gpu_operator_and_kube_prometheus_stack_exporters() -> None:
    """dcgm-exporter: app=nvidia-dcgm-exporter on 9400; node-exporter:
    app.kubernetes.io/name=prometheus-node-exporter on 9100; off by default; setting one key
    of an exporter keeps the other defaults."""
    k8s = KubernetesTargetsConfig()
    assert (False, "app=nvidia-dcgm-exporter", 9400) == (
        k8s.enabled,
        k8s.dcgm.label_selector,
        k8s.dcgm.port,
    )
    assert ("app.kubernetes.io/name=prometheus-node-exporter", 9100) == (
        k8s.node.label_selector,
        k8s.node.port,
    )
    partly = KubernetesTargetsConfig.model_validate({"node": {"namespace": "monitoring"}})
    assert ("app.kubernetes.io/name=prometheus-node-exporter", 9100, "monitoring") == (
        partly.node.label_selector,
        partly.node.port,
        partly.node.namespace,
    )


async def test_the_agent_daemon_scrapes_and_scores_the_exporter_pod_the_api_names(
    api: FakeApiServer, tmp_path: Path
) -> None:
    """``detector run`` in agent mode with targets.kubernetes follows the API while it ticks:
    it scrapes the dcgm-exporter pod at the pod's address and scores its GPUs under the
    node's name (not the pod's Hostname)."""
    page = "".join(
        f'DCGM_FI_DEV_GPU_TEMP{{gpu="{g}",UUID="GPU-{g}",Hostname="nvidia-dcgm-exporter-x7"}} '
        f"{40 + g}\n"
        for g in range(2)
    )
    exporter = Exporter("127.0.0.2", 0, page)
    api.put(pod("dcgm-a", "127.0.0.2", port=("metrics", exporter.port)))
    doc = _config(api, tmp_path, 9100).model_dump(mode="json")
    doc |= {
        "scrape": {"interval_s": 0.2, "timeout_s": 0.15},
        "kmsg": {"enabled": False},
        "logging": {"level": "warning"},
    }
    config = Config.model_validate(doc)
    url = f"http://127.0.0.2:{exporter.port}/metrics"
    stop = asyncio.Event()
    seen: list[tuple[str, ...]] = []

    def on_tick(daemon: Daemon, tick: LoopTick) -> None:
        assert daemon.last_round is not None
        scraped = [r.target.url for r in daemon.last_round.targets if r.error is None]
        if url in scraped:
            seen.append(tick.node_names)
            stop.set()

    try:
        await asyncio.wait_for(
            run_daemon(config, stop=stop, on_tick=on_tick, handle_signals=False, port=0),
            HANG_GUARD_S,
        )
    finally:
        exporter.close()
    assert [(NODE,)] == seen
