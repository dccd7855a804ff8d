"""Kubernetes executor: cordon, taint, annotate (and set a condition on) a node; undo it.

Contract:

- ``apply(decision)``: ``GET /api/v1/nodes/N``, then one JSON merge patch
  (``application/merge-patch+json``) of ``/api/v1/nodes/N`` that sets ``spec.unschedulable``,
  appends the taint ``<taint_key>=<class>:<effect>`` to the node's taints (a merge patch
  replaces the list, so it carries the ones read, and ``metadata.resourceVersion`` makes it
  conditional: a conflicting write answers 409 and the read-patch is retried once) and the
  annotations ``<prefix>/failure-class``, ``/evidence``, ``/alert-id``, ``/excluded-at``,
  ``/cordoned`` ("true" only if the node was schedulable before, so release never uncordons
  a node a person cordoned). With ``condition_type`` set, a strategic merge patch
  (``application/strategic-merge-patch+json``) of ``/api/v1/nodes/N/status`` sets that
  condition True with the class as reason and the evidence as message.
- ``release(decision)``: the same read-patch removing the taint and the annotations (and
  uncordoning if the detector cordoned), then the condition False.
- In-cluster by default: ``https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT``, the
  service account's token (read before each request: kubelet rotates it) and CA, set up by
  ``ingest.KubeApi`` (pod discovery's connection too). Every path, the environment and the
  httpx client are injectable.
- httpx errors and statuses other than 2xx become ``ActionError`` naming node, method, URL
  and status (this module is the one boundary for them).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

import httpx

from ..config import ActionsConfig
from ..errors import ActionError, ConfigError
from ..ingest import KubeApi
from ..loop import Decision

__all__ = ["KubernetesExecutor"]

MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"
# The patch body for a node as read (its JSON object).
_PatchBuilder = Callable[[dict[str, Any]], dict[str, Any]]
_ANNOTATIONS = ("failure-class", "evidence", "alert-id", "excluded-at", "cordoned")


class KubernetesExecutor:
    """See the module docstring."""

    def __init__(
        self,
        config: ActionsConfig,
        *,
        client: httpx.AsyncClient | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        k8s = config.kubernetes
        self.taint_key, self.taint_effect = k8s.taint_key, k8s.taint_effect
        self.prefix = k8s.annotation_prefix.rstrip("/")
        self.condition_type = k8s.condition_type
        try:
            self.api = KubeApi.from_config(
                k8s, setting="actions.kubernetes.api_url", client=client, env=env
            )
        except ConfigError as exc:
            raise ActionError(str(exc)) from None
        self.base_url = self.api.base_url

    async def apply(self, decision: Decision) -> None:
        """Cordon, taint and annotate ``decision.node`` (see the module docstring)."""
        reason = decision.failure_class or "failure"
        stamp = datetime.fromtimestamp(decision.time, UTC).isoformat().replace("+00:00", "Z")

        def patch(node: dict[str, Any]) -> dict[str, Any]:
            spec = node.get("spec") or {}
            taints = [t for t in spec.get("taints") or [] if t.get("key") != self.taint_key]
            taints.append(
                {"key": self.taint_key, "value": _label_value(reason), "effect": self.taint_effect}
            )
            ours = (node.get("metadata", {}).get("annotations") or {}).get(self._key("cordoned"))
            cordoned = ours == "true" or not spec.get("unschedulable", False)
            notes = {
                "failure-class": reason,
                "evidence": ", ".join(decision.evidence),
                "alert-id": decision.alert_id,
                "excluded-at": stamp,
                "cordoned": "true" if cordoned else "false",
            }
            return {
                "metadata": {
                    "resourceVersion": node.get("metadata", {}).get("resourceVersion"),
                    "annotations": {self._key(k): v for k, v in notes.items()},
                },
                "spec": {"unschedulable": True, "taints": taints},
            }

        await self._read_patch(decision.node, patch)
        await self._condition(decision, "True", reason, decision.reason, stamp)

    async def release(self, decision: Decision) -> None:
        """Remove the taint and annotations; uncordon only if the detector cordoned."""

        def patch(node: dict[str, Any]) -> dict[str, Any]:
            spec = node.get("spec") or {}
            taints = [t for t in spec.get("taints") or [] if t.get("key") != self.taint_key]
            notes = node.get("metadata", {}).get("annotations") or {}
            body: dict[str, Any] = {
                "metadata": {
                    "resourceVersion": node.get("metadata", {}).get("resourceVersion"),
                    "annotations": {self._key(k): None for k in _ANNOTATIONS},
                },
                "spec": {"taints": taints or None},
            }
            if notes.get(self._key("cordoned")) == "true":
                body["spec"]["unschedulable"] = None
            return body

        await self._read_patch(decision.node, patch)
        stamp = datetime.fromtimestamp(decision.time, UTC).isoformat().replace("+00:00", "Z")
        await self._condition(decision, "False", "Released", decision.reason, stamp)

    async def aclose(self) -> None:
        await self.api.aclose()

    # -- internals -----------------------------------------------------------------------
    def _key(self, name: str) -> str:
        return f"{self.prefix}/{name}"

    async def _read_patch(self, node: str, build: _PatchBuilder) -> None:
        url = f"{self.base_url}/api/v1/nodes/{node}"
        for attempt in (1, 2):
            current = await self._request("GET", url, node)
            response = await self._request(
                "PATCH", url, node, build(current), MERGE_PATCH, conflict_ok=attempt == 1
            )
            if response is not None:
                return

    async def _condition(
        self, decision: Decision, status: str, reason: str, message: str, stamp: str
    ) -> None:
        if self.condition_type is None:
            return
        condition = {
            "type": self.condition_type,
            "status": status,
            "reason": _camel(reason),
            "message": f"{message}; alert {decision.alert_id}",
            "lastHeartbeatTime": stamp,
            "lastTransitionTime": stamp,
        }
        url = f"{self.base_url}/api/v1/nodes/{decision.node}/status"
        body = {"status": {"conditions": [condition]}}
        await self._request("PATCH", url, decision.node, body, STRATEGIC_PATCH)

    async def _request(
        self,
        method: str,
        url: str,
        node: str,
        body: dict[str, Any] | None = None,
        content_type: str | None = None,
        conflict_ok: bool = False,
    ) -> Any:
        try:
            headers = self.api.headers()
        except OSError as exc:
            raise ActionError(
                f"kubernetes: node {node}: cannot read token {self.api.token_path}: {exc}"
            ) from exc
        content = None
        if body is not None:
            headers["Content-Type"] = content_type or MERGE_PATCH
            content = json.dumps(body).encode()
        try:
            response = await self.api.client.request(method, url, headers=headers, content=content)
        except httpx.HTTPError as exc:
            raise ActionError(
                f"kubernetes: {method} {url} for node {node}: {type(exc).__name__}: {exc}"
            ) from exc
        if response.status_code == 409 and conflict_ok:
            return None  # the node changed between our read and our patch: read again
        if not response.is_success:
            raise ActionError(
                f"kubernetes: {method} {url} for node {node}: HTTP {response.status_code}: "
                f"{response.text[:300]}"
            )
        try:
            return response.json()
        except ValueError as exc:
            raise ActionError(f"kubernetes: {method} {url}: not JSON: {exc}") from exc


def _label_value(text: str) -> str:
    """A taint value: at most 63 characters of [A-Za-z0-9-_.], alphanumeric at both ends."""
    cleaned = "".join(c if c.isalnum() or c in "-_." else "-" for c in text)[:63]
    return cleaned.strip("-_.")


def _camel(text: str) -> str:
    """A condition reason is CamelCase (e.g. 'memory/ECC' -> 'MemoryECC')."""
    words = "".join(c if c.isalnum() else " " for c in text).split()
    return "".join(w[:1].upper() + w[1:] for w in words) or "Failure"
