"""The Kubernetes API server as this process reaches it: the one connection set-up that pod
discovery (pods.py) and the node-action executor (actions/kubernetes.py) share.

Contract
    ``KubeApi.from_config(config, setting=...)``: the base URL is ``config.api_url`` when set
    (e.g. ``kubectl proxy``), else in-cluster ``https://$KUBERNETES_SERVICE_HOST:
    $KUBERNETES_SERVICE_PORT`` (an IPv6 host bracketed); neither is a ConfigError naming
    ``setting`` (the config key to set). The httpx client verifies https against
    ``config.ca_path`` when that file exists (the service account's CA), else the system's.
    ``headers()`` reads the bearer token before every request (kubelet rotates it); no token
    file means no Authorization header (an ``api_url`` through a proxy), another read error
    is an OSError the caller translates (it knows what the request was for). The environment
    and the client are injectable. Requests and their httpx errors are the callers'.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import httpx

from ...config import KubernetesApiConfig
from ...errors import ConfigError

__all__ = ["KubeApi"]


@dataclass
class KubeApi:
    """See the module docstring."""

    base_url: str
    token_path: Path
    client: httpx.AsyncClient

    @classmethod
    def from_config(
        cls,
        config: KubernetesApiConfig,
        *,
        setting: str,
        client: httpx.AsyncClient | None = None,
        env: Mapping[str, str] | None = None,
    ) -> KubeApi:
        base_url = config.api_url.rstrip("/") if config.api_url else _in_cluster_url(env, setting)
        if client is None:
            verify: ssl.SSLContext | bool = True
            if base_url.startswith("https://") and Path(config.ca_path).exists():
                verify = ssl.create_default_context(cafile=str(config.ca_path))
            client = httpx.AsyncClient(timeout=config.timeout_s, verify=verify)
        return cls(base_url, Path(config.token_path), client)

    def headers(self) -> dict[str, str]:
        """Accept JSON, and the bearer token when there is a token file (read now)."""
        headers = {"Accept": "application/json"}
        try:
            token = self.token_path.read_text().strip()
        except FileNotFoundError:
            token = ""  # out of cluster (api_url over a proxy): no token
        if token:
            headers["Authorization"] = f"Bearer {token}"
        return headers

    async def aclose(self) -> None:
        await self.client.aclose()


def _in_cluster_url(env: Mapping[str, str] | None, setting: str) -> str:
    env = os.environ if env is None else env
    host, port = env.get("KUBERNETES_SERVICE_HOST"), env.get("KUBERNETES_SERVICE_PORT", "443")
    if not host:
        raise ConfigError(
            f"kubernetes: not in a cluster (KUBERNETES_SERVICE_HOST unset) and {setting} not set"
        )
    if ":" in host:
        host = f"[{host}]"  # IPv6
    return f"https://{host}:{port}"
