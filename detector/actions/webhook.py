"""Webhook executor: one JSON POST per exclusion and release, retried with backoff.

Contract:

- ``apply``/``release`` POST ``{"event": "exclude"|"release", "node", "time" (RFC 3339),
  "reason", "failure_class", "evidence", "alert_id", "by"}`` to ``webhook.url``.
- A transport error, a 5xx, 408 or 429 is retried up to ``webhook.attempts`` POSTs in all,
  waiting ``backoff_s``, then twice that, ... (``sleep`` is injectable: tests pass a virtual
  one). Another 4xx is not retried: the receiver will never take that body. Giving up raises
  ``ActionError`` naming the node, the URL and the last status or error.
- httpx errors are translated here (the one boundary for this executor).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import httpx

from ..config import ActionsConfig
from ..errors import ActionError
from ..loop import Decision

__all__ = ["WebhookExecutor", "webhook_payload"]

_RETRYABLE = (408, 429)


def webhook_payload(event: str, decision: Decision) -> dict[str, Any]:
    """The JSON body POSTed for one decision."""
    return {
        "event": event,
        "node": decision.node,
        "time": datetime.fromtimestamp(decision.time, UTC).isoformat().replace("+00:00", "Z"),
        "reason": decision.reason,
        "failure_class": decision.failure_class,
        "evidence": list(decision.evidence),
        "alert_id": decision.alert_id,
        "by": decision.by,
    }


class WebhookExecutor:
    """See the module docstring."""

    def __init__(
        self,
        config: ActionsConfig,
        *,
        client: httpx.AsyncClient | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        hook = config.webhook
        if hook.url is None:
            raise ActionError("webhook: actions.webhook.url is not set")
        self.url = hook.url
        self.attempts, self.backoff_s = hook.attempts, hook.backoff_s
        self._client = client or httpx.AsyncClient(timeout=hook.timeout_s)
        self._sleep = sleep

    async def apply(self, decision: Decision) -> None:
        await self._post(webhook_payload("exclude", decision), decision.node)

    async def release(self, decision: Decision) -> None:
        await self._post(webhook_payload("release", decision), decision.node)

    async def aclose(self) -> None:
        await self._client.aclose()

    async def _post(self, body: dict[str, Any], node: str) -> None:
        wait, last = self.backoff_s, ""
        for attempt in range(1, self.attempts + 1):
            try:
                response = await self._client.post(self.url, json=body)
            except httpx.HTTPError as exc:
                last = f"{type(exc).__name__}: {exc}"
            else:
                if response.is_success:
                    return
                last = f"HTTP {response.status_code}: {response.text[:200]}"
                code = response.status_code
                if 400 <= code < 500 and code not in _RETRYABLE:
                    break  # the receiver refuses this body for good
            if attempt < self.attempts:
                await self._sleep(wait)
                wait *= 2
        raise ActionError(
            f"webhook: {body['event']} node {node}: POST {self.url} failed after {attempt} "
            f"attempt(s): {last}"
        )
