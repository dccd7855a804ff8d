"""The Kubernetes executor against a fake API server: a real local HTTP server implementing
exactly the node endpoints the executor calls (GET a node, PATCH it with a JSON merge patch,
PATCH its status subresource with a strategic merge patch), checking the bearer token, the
content types, the bodies and resourceVersion preconditions as the API server does."""

from __future__ import annotations

import copy
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from detector.actions import (
    STATE_KEY,
    ActionEngine,
    ActionRunner,
    Candidate,
    Decision,
    KubernetesExecutor,
)
from detector.config import ActionsConfig
from detector.errors import ActionError
from detector.model import XidEvent
from detector.service import load_state, save_state

T0 = 1_750_000_000.0
TOKEN = "sa-token-for-tests"
TAINT_KEY = "gpu-failure-detector/excluded"
NVIDIA_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


def _merge(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch (null deletes a key; lists are replaced whole)."""
    if not isinstance(patch, dict):
        return patch
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = _merge(out.get(key), value)
    return out


class FakeApiServer:
    """Nodes in memory behind the node endpoints; ``requests`` logs what was called."""

    def __init__(self, nodes: dict[str, dict[str, Any]]) -> None:
        self.nodes = nodes
        self.requests: list[str] = []
        self.conflicts_to_inject = 0  # writes by "someone else" between our GET and PATCH
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._lock = threading.Lock()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        api = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                return None

            def _reply(self, code: int, body: Any) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _status(self, code: int, message: str) -> None:
                self._reply(
                    code, {"kind": "Status", "status": "Failure", "message": message, "code": code}
                )

            def _node(self) -> tuple[str | None, bool]:
                parts = self.path.split("/")
                if parts[:4] != ["", "api", "v1", "nodes"] or len(parts) not in (5, 6):
                    return None, False
                if len(parts) == 6 and parts[5] != "status":
                    return None, False
                return parts[4], len(parts) == 6

            def _authorized(self) -> bool:
                if self.headers.get("Authorization") != f"Bearer {TOKEN}":
                    self._status(401, "Unauthorized")
                    return False
                return True

            def do_GET(self) -> None:
                name, status = self._node()
                api.requests.append(f"GET {self.path}")
                if not self._authorized():
                    return
                with api._lock:
                    if name is None or status or name not in api.nodes:
                        self._status(404, f"nodes {name!r} not found")
                        return
                    node = copy.deepcopy(api.nodes[name])
                    if api.conflicts_to_inject:
                        api.conflicts_to_inject -= 1
                        api._bump(name)
                self._reply(200, node)

            def do_PATCH(self) -> None:
                name, status = self._node()
                kind = self.headers.get("Content-Type", "")
                api.requests.append(f"PATCH {self.path} {kind}")
                if not self._authorized():
                    return
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with api._lock:
                    if name is None or name not in api.nodes:
                        self._status(404, f"nodes {name!r} not found")
                        return
                    node = api.nodes[name]
                    if status:
                        if kind != "application/strategic-merge-patch+json":
                            self._status(415, f"unsupported media type {kind}")
                            return
                        if set(body) != {"status"} or set(body["status"]) != {"conditions"}:
                            self._status(422, f"status patch must set conditions only: {body}")
                            return
                        by_type = {c["type"]: c for c in node["status"]["conditions"]}
                        for condition in body["status"]["conditions"]:
                            by_type[condition["type"]] = condition
                        node["status"]["conditions"] = list(by_type.values())
                    else:
                        if kind != "application/merge-patch+json":
                            self._status(415, f"unsupported media type {kind}")
                            return
                        if "status" in body:
                            self._status(422, "status goes through nodes/status")
                            return
                        wanted = body.get("metadata", {}).get("resourceVersion")
                        current = node["metadata"]["resourceVersion"]
                        if wanted is not None and wanted != current:
                            self._status(409, "the object has been modified")
                            return
                        patched = _merge(node, body)
                        api.nodes[name] = node = patched
                    api._bump(name)
                    self._reply(200, copy.deepcopy(node))

        return Handler

    def _bump(self, name: str) -> None:
        meta = self.nodes[name]["metadata"]
        meta["resourceVersion"] = str(int(meta["resourceVersion"]) + 1)

    def node(self, name: str) -> dict[str, Any]:
        with self._lock:
            return copy.deepcopy(self.nodes[name])


def _node(name: str, unschedulable: bool = False) -> dict[str, Any]:
    spec: dict[str, Any] = {"taints": [dict(NVIDIA_TAINT)]}
    if unschedulable:
        spec["unschedulable"] = True
    return {
        "kind": "Node",
        "apiVersion": "v1",
        "metadata": {"name": name, "resourceVersion": "100", "annotations": {"keep": "me"}},
        "spec": spec,
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }


@pytest.fixture
def api() -> Iterator[FakeApiServer]:
    server = FakeApiServer({"gpu-01": _node("gpu-01"), "gpu-02": _node("gpu-02", True)})
    thread = threading.Thread(target=server.server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.server.shutdown()
        server.server.server_close()
        thread.join()


def _config(api: FakeApiServer, tmp_path: Path, token: str = TOKEN) -> ActionsConfig:
    token_path = tmp_path / "token"
    token_path.write_text(token + "\n")
    return ActionsConfig(
        enabled=True,
        dry_run=False,
        kubernetes={"api_url": api.url, "token_path": token_path, "ca_path": tmp_path / "no-ca"},
    )


def _failure(node: str, t: float) -> Candidate:
    event = XidEvent(time=t, node=node, gpu="3", xid=79)
    return Candidate.from_xid(event, failure_class="pcie/fallen off the bus")


def _condition(node: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in node["status"]["conditions"] if c["type"] == "GpuFailureDetected")


async def test_cordons_taints_survives_a_restart_and_releases(
    api: FakeApiServer, tmp_path: Path
) -> None:
    """Cordon + taint + annotations + condition; after a state save and restore the same
    failure makes no request; the release undoes exactly what the detector did."""
    config = _config(api, tmp_path)
    runner = ActionRunner(ActionEngine(config), KubernetesExecutor(config))
    await runner.step(T0, [_failure("gpu-01", T0)], n_nodes=63)
    await runner.executor.aclose()

    node = api.node("gpu-01")
    assert True is node["spec"]["unschedulable"]
    taint = {"key": TAINT_KEY, "value": "pcie-fallen-off-the-bus", "effect": "NoSchedule"}
    assert [NVIDIA_TAINT, taint] == node["spec"]["taints"]
    notes = node["metadata"]["annotations"]
    assert "pcie/fallen off the bus" == notes["gpu-failure-detector/failure-class"]
    assert "xid_79" == notes["gpu-failure-detector/evidence"]
    assert "xid79:gpu-01/3@1750000000" == notes["gpu-failure-detector/alert-id"]
    assert "true" == notes["gpu-failure-detector/cordoned"]
    assert "me" == notes["keep"]
    condition = _condition(node)
    assert ("True", "PcieFallenOffTheBus") == (condition["status"], condition["reason"])
    assert [
        "GET /api/v1/nodes/gpu-01",
        "PATCH /api/v1/nodes/gpu-01 application/merge-patch+json",
        "PATCH /api/v1/nodes/gpu-01/status application/strategic-merge-patch+json",
    ] == api.requests

    # Restart: the engine's state goes through the daemon's state file.
    state_file = tmp_path / "state.npz"
    save_state(state_file, {}, {STATE_KEY: runner.engine.state_dict()})
    loaded = load_state(state_file)
    assert loaded is not None
    engine = ActionEngine(config)
    engine.load_state_dict(loaded[1][STATE_KEY])
    restarted = ActionRunner(engine, KubernetesExecutor(config))
    before = len(api.requests)
    decisions = await restarted.step(T0 + 15, [_failure("gpu-01", T0)], n_nodes=63)
    assert [] == decisions
    assert before == len(api.requests)

    released = await restarted.release("gpu-01", T0 + 3600, by="alice")
    await restarted.executor.aclose()
    assert released is not None
    node = api.node("gpu-01")
    assert "unschedulable" not in node["spec"]
    assert [NVIDIA_TAINT] == node["spec"]["taints"]
    assert {"keep": "me"} == node["metadata"]["annotations"]
    assert ("False", "Released") == (_condition(node)["status"], _condition(node)["reason"])
    assert {("exclude", "done"): 1, ("release", "done"): 1} == dict(engine.stats().decisions)


async def test_release_keeps_a_node_that_a_person_had_cordoned_cordoned(
    api: FakeApiServer, tmp_path: Path
) -> None:
    """The detector uncordons only what it cordoned."""
    config = _config(api, tmp_path)
    runner = ActionRunner(ActionEngine(config), KubernetesExecutor(config))
    await runner.step(T0, [_failure("gpu-02", T0)], n_nodes=63)
    assert "false" == api.node("gpu-02")["metadata"]["annotations"]["gpu-failure-detector/cordoned"]
    await runner.release("gpu-02", T0 + 60, by="alice")
    await runner.executor.aclose()
    node = api.node("gpu-02")
    assert True is node["spec"]["unschedulable"]
    assert [NVIDIA_TAINT] == node["spec"]["taints"]


async def test_a_concurrent_write_is_read_again_and_patched(
    api: FakeApiServer, tmp_path: Path
) -> None:
    """A 409 (the node changed between GET and PATCH) makes one fresh read and patch."""
    api.conflicts_to_inject = 1
    config = _config(api, tmp_path)
    runner = ActionRunner(ActionEngine(config), KubernetesExecutor(config))
    await runner.step(T0, [_failure("gpu-01", T0)], n_nodes=63)
    await runner.executor.aclose()
    assert True is api.node("gpu-01")["spec"]["unschedulable"]
    patches = [r for r in api.requests if r.startswith("PATCH /api/v1/nodes/gpu-01 ")]
    assert 2 == len(patches)


async def test_a_refused_token_is_a_failed_action_naming_the_node(
    api: FakeApiServer, tmp_path: Path
) -> None:
    """HTTP 401 becomes an ActionError naming the node (counted as failed, not recorded)."""
    config = _config(api, tmp_path, token="wrong")
    executor = KubernetesExecutor(config)
    runner = ActionRunner(ActionEngine(config), executor)
    await runner.step(T0, [_failure("gpu-01", T0)], n_nodes=63)
    assert {("exclude", "failed"): 1} == dict(runner.engine.stats().decisions)
    assert {} == dict(runner.engine.excluded)
    decision = Decision(action="exclude", node="gpu-01", time=T0, reason="test", alert_id="a")
    with pytest.raises(ActionError, match=r"GET .*/api/v1/nodes/gpu-01 for node gpu-01: HTTP 401"):
        await executor.apply(decision)
    await executor.aclose()
    assert "unschedulable" not in api.node("gpu-01")["spec"]


def test_in_cluster_address_comes_from_the_service_environment(tmp_path: Path) -> None:
    """Without api_url: https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT (IPv6 too)."""
    config = ActionsConfig(kubernetes={"ca_path": tmp_path / "ca.crt"})
    env4 = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    env6 = {"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "6443"}
    assert "https://10.96.0.1:443" == KubernetesExecutor(config, env=env4).base_url
    assert "https://[fd00::1]:6443" == KubernetesExecutor(config, env=env6).base_url
    with pytest.raises(ActionError, match="KUBERNETES_SERVICE_HOST unset"):
        KubernetesExecutor(config, env={})
