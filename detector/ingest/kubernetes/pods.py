"""An agent's exporters found through the Kubernetes API, as Prometheus' kubernetes_sd role
pod finds them: the pods of one exporter on this node, followed as they come and go.

Contract
    :class:`ExporterPodWatch` (one exporter: dcgm or node) keeps the pods matching its
    ``label_selector`` (in ``namespace``, or every namespace) whose ``spec.nodeName`` is this
    node (a ``fieldSelector``, so the API server sends nothing else):

    - ``run()`` lists them (``GET /api/v1/[namespaces/NS/]pods``), then watches from the list's
      ``resourceVersion`` (``watch=1``, ``allowWatchBookmarks``, ``timeoutSeconds``): ADDED and
      MODIFIED replace a pod, DELETED removes it, BOOKMARK only moves the resourceVersion.
      A watch the server ends is resumed from the last resourceVersion seen (after 0.5 s if it
      brought no event: a proxy that ends watches at once never makes a tight loop). 410 Gone
      (the resourceVersion is too old: as an HTTP status or an ERROR event) starts again with
      a list, at once, unless the watch right after a list got it. Any other failure
      (connection, HTTP status, a body that is not the API's JSON) is logged and retried with
      a list after a backoff doubling from 0.5 s to ``backoff_max_s``, back to 0.5 s once a
      watch runs its course; what was known is kept meanwhile (the exporters still run).
      Runs until cancelled.
    - ``targets()``: one :class:`~detector.ingest.targets.Target` per pod that is Running,
      ready (condition Ready True), not being deleted and has an IP:
      ``<scheme>://<pod IP>:<port><path>``, where ``port`` is the container port's number, or
      its name looked up in the pod's containers (a pod without that named port is skipped
      and logged once). The target is named by this node (label ``node``; ``instance`` is the
      pod's address): a restarted exporter's series keep their columns, its pod name and IP
      being context, not identity. Sorted by URL. ``version`` counts changes of the list.

    :class:`PodDiscovery` runs the watches of ``targets.kubernetes`` (dcgm and node) over one
    :class:`~.api.KubeApi` connection: ``targets()`` is theirs, ``version`` changes with
    either.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import httpx

from ...config import Config, ExporterPods, KubernetesTargetsConfig
from ...errors import ConfigError
from ...logs import get_logger
from ..targets import Target, TargetKind, make_target
from .api import KubeApi

__all__ = ["ExporterPodWatch", "PodDiscovery"]

FIRST_BACKOFF_S = 0.5
_log = get_logger(component="pod-discovery")


def _exporters(config: KubernetesTargetsConfig) -> list[tuple[TargetKind, ExporterPods]]:
    return [("dcgm", config.dcgm), ("node", config.node)]


class _Gone(Exception):
    """410 Gone: the resourceVersion is too old to watch from; list again."""


class _Unusable(Exception):
    """The API's answer cannot be used (status, body); retried after a backoff."""


class ExporterPodWatch:
    """See the module docstring."""

    def __init__(
        self,
        kind: TargetKind,
        pods: ExporterPods,
        node: str,
        api: KubeApi,
        *,
        watch_timeout_s: int = 300,
        backoff_max_s: float = 30.0,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.kind, self.selector, self.node, self.api = kind, pods, node, api
        self.watch_timeout_s, self.backoff_max_s = watch_timeout_s, backoff_max_s
        self.sleep = sleep
        self.version = 0  # changes of targets()
        self.errors = 0  # failures retried after a backoff
        self.relists = 0  # lists after the first (410 Gone, errors)
        self._pods: dict[str, dict[str, Any]] = {}  # namespace/name -> the pod as last seen
        self._targets: list[Target] = []
        self._resource_version = ""
        self._unnamed: set[str] = set()  # pods logged as lacking the named port
        self._events = 0  # watch events taken
        ns = pods.namespace
        self._path = f"/api/v1/namespaces/{ns}/pods" if ns else "/api/v1/pods"
        self._params = {
            "labelSelector": pods.label_selector,
            "fieldSelector": f"spec.nodeName={node}",
        }

    def targets(self) -> list[Target]:
        return list(self._targets)

    async def run(self) -> None:
        """List and watch until cancelled (see the module docstring)."""
        backoff, listed = FIRST_BACKOFF_S, False
        while True:
            watched = 0  # watches completed since the last list
            try:
                if listed:
                    self.relists += 1
                await self._list()
                listed = True
                while True:
                    events = self._events
                    await self._watch()
                    watched += 1
                    backoff = FIRST_BACKOFF_S  # a watch ran its course: the API works
                    if self._events == events:  # it said nothing: never re-watch in a tight loop
                        await self.sleep(FIRST_BACKOFF_S)
            except _Gone:
                _log.info("pod watch expired (410 Gone), listing again", kind=self.kind)
                if watched == 0:  # the list's own resourceVersion is gone: back off
                    await self._back_off(backoff, "410 Gone from the list's resourceVersion")
                    backoff = min(2 * backoff, self.backoff_max_s)
            except (httpx.HTTPError, _Unusable, OSError) as exc:
                await self._back_off(backoff, f"{type(exc).__name__}: {exc}")
                backoff = min(2 * backoff, self.backoff_max_s)

    async def _back_off(self, wait_s: float, error: str) -> None:
        self.errors += 1
        _log.warning(
            "pod discovery failed, retrying", kind=self.kind, error=error, retry_in_s=wait_s
        )
        await self.sleep(wait_s)

    async def _list(self) -> None:
        url = self.api.base_url + self._path
        response = await self.api.client.get(url, params=self._params, headers=self.api.headers())
        body = _json(response, url)
        items, rv = body.get("items"), (body.get("metadata") or {}).get("resourceVersion")
        if not isinstance(items, list) or not isinstance(rv, str):
            raise _Unusable(f"GET {url}: not a PodList (items, metadata.resourceVersion)")
        self._pods = {_name(pod): pod for pod in items if isinstance(pod, dict)}
        self._resource_version = rv
        self._update()

    async def _watch(self) -> None:
        """One watch, until the server ends it; raises _Gone on 410."""
        url = self.api.base_url + self._path
        params = self._params | {
            "watch": "1",
            "allowWatchBookmarks": "true",
            "resourceVersion": self._resource_version,
            "timeoutSeconds": str(self.watch_timeout_s),
        }
        # the server holds the answer open for up to timeoutSeconds between events
        timeout = httpx.Timeout(self.api.client.timeout.connect, read=self.watch_timeout_s + 30)
        async with self.api.client.stream(
            "GET", url, params=params, headers=self.api.headers(), timeout=timeout
        ) as response:
            if response.status_code == 410:
                raise _Gone()
            if not response.is_success:
                await response.aread()
                raise _Unusable(f"watch {url}: HTTP {response.status_code}: {response.text[:300]}")
            async for line in response.aiter_lines():
                if line.strip():
                    self._event(line, url)

    def _event(self, line: str, url: str) -> None:
        try:
            event = json.loads(line)
            kind, obj = event["type"], event["object"]
        except (ValueError, KeyError, TypeError) as exc:
            raise _Unusable(f"watch {url}: not a watch event: {line[:200]!r}") from exc
        if not isinstance(obj, dict):
            raise _Unusable(f"watch {url}: not a watch event: {line[:200]!r}")
        if kind == "ERROR":
            if obj.get("code") == 410:
                raise _Gone()
            raise _Unusable(f"watch {url}: {obj.get('code')} {obj.get('message', '')}")
        self._events += 1
        rv = (obj.get("metadata") or {}).get("resourceVersion")
        if isinstance(rv, str):
            self._resource_version = rv
        if kind in ("ADDED", "MODIFIED"):
            self._pods[_name(obj)] = obj
        elif kind == "DELETED":
            self._pods.pop(_name(obj), None)
        else:  # BOOKMARK: only the resourceVersion moves
            return
        self._update()

    def _update(self) -> None:
        targets = sorted(
            (t for pod in self._pods.values() if (t := self._target(pod)) is not None),
            key=lambda t: t.url,
        )
        if targets != self._targets:
            _log.info(
                "exporter pods changed", kind=self.kind, targets=[t.instance for t in targets]
            )
            self._targets = targets
            self.version += 1

    def _target(self, pod: dict[str, Any]) -> Target | None:
        status, meta = pod.get("status") or {}, pod.get("metadata") or {}
        ready = any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in status.get("conditions") or []
        )
        ip = status.get("podIP")
        if status.get("phase") != "Running" or not ready or not ip or meta.get("deletionTimestamp"):
            return None
        port = self._port(pod)
        if port is None:
            return None
        host = f"[{ip}]" if ":" in ip else ip
        url = f"{self.selector.scheme}://{host}:{port}{self.selector.path}"
        return make_target(url, node=self.node, kind=self.kind)

    def _port(self, pod: dict[str, Any]) -> int | None:
        wanted = self.selector.port
        if isinstance(wanted, int):
            return wanted
        for container in (pod.get("spec") or {}).get("containers") or []:
            for port in container.get("ports") or []:
                if port.get("name") == wanted and isinstance(port.get("containerPort"), int):
                    return int(port["containerPort"])
        name = _name(pod)
        if name not in self._unnamed:
            self._unnamed.add(name)
            _log.warning("exporter pod has no such port", kind=self.kind, pod=name, port=wanted)
        return None


def _name(pod: dict[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def _json(response: httpx.Response, url: str) -> dict[str, Any]:
    if not response.is_success:
        raise _Unusable(f"GET {url}: HTTP {response.status_code}: {response.text[:300]}")
    try:
        body = response.json()
    except ValueError as exc:
        raise _Unusable(f"GET {url}: not JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise _Unusable(f"GET {url}: not a JSON object")
    return body


class PodDiscovery:
    """This node's exporter pods (``targets.kubernetes``): see the module docstring."""

    def __init__(self, api: KubeApi, watches: list[ExporterPodWatch]) -> None:
        self.api, self.watches = api, watches

    @classmethod
    def from_config(
        cls,
        config: KubernetesTargetsConfig,
        node: str | None,
        *,
        client: httpx.AsyncClient | None = None,
        env: Mapping[str, str] | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> PodDiscovery:
        if not node:
            raise ConfigError(
                "targets.kubernetes: the node's name is needed (node_name, or $NODE_NAME "
                "from the downward API's spec.nodeName)"
            )
        api = KubeApi.from_config(
            config, setting="targets.kubernetes.api_url", client=client, env=env
        )
        watches = [
            ExporterPodWatch(
                kind,
                pods,
                node,
                api,
                watch_timeout_s=config.watch_timeout_s,
                backoff_max_s=config.backoff_max_s,
                sleep=sleep,
            )
            for kind, pods in _exporters(config)
        ]
        return cls(api, watches)

    @classmethod
    def for_agent(cls, config: Config, **kwargs: Any) -> PodDiscovery | None:
        """The discovery ``config`` asks for: agent mode with ``targets.kubernetes.enabled``
        (else None: the agent scrapes localhost). ``kwargs`` go to ``from_config``."""
        k8s = config.targets.kubernetes
        if config.mode != "agent" or not k8s.enabled:
            return None
        return cls.from_config(k8s, config.node_name, **kwargs)

    @property
    def version(self) -> int:
        return sum(w.version for w in self.watches)

    def targets(self) -> list[Target]:
        return [t for w in self.watches for t in w.targets()]

    async def run(self) -> None:
        """Follow every exporter's pods until cancelled."""
        async with asyncio.TaskGroup() as group:
            for watch in self.watches:
                group.create_task(watch.run(), name=f"pods-{watch.kind}")

    async def aclose(self) -> None:
        await self.api.aclose()
