"""A node's ``localhost`` for agents under test: agent mode scrapes its exporters on localhost
(``targets.agent_ports``); this transport leads those ports to one simulated node's
exporters over real HTTP, as the host network of that node would."""

from __future__ import annotations

import httpx


class NodeLocalhost(httpx.AsyncBaseTransport):
    """One node's ``localhost``: the agent's exporter ports lead to that node's simulated
    dcgm-exporter and node-exporter (real HTTP), as the host network of its node would."""

    def __init__(self, dcgm_url: str, node_url: str) -> None:
        self.routes = {9400: httpx.URL(dcgm_url), 9100: httpx.URL(node_url)}
        self.inner = httpx.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        target = self.routes[request.url.port or 80]
        request.url = target
        request.headers["host"] = target.netloc.decode()
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()
