"""The Kubernetes API settings: the connection pod discovery (``targets.kubernetes``) and the
node-action executor (``actions.kubernetes``) share, and which exporter pods an agent scrapes.

Every default is written once, here. In cluster the connection needs no setting: the API
server is ``https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT``, authenticated with
the pod's service-account token and CA.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = [
    "SERVICE_ACCOUNT_DIR",
    "DcgmExporterPods",
    "ExporterPods",
    "KubernetesApiConfig",
    "KubernetesTargetsConfig",
    "NodeExporterPods",
]

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
# One requirement of a label selector as the API takes it: key=value, key==value, key!=value,
# key, !key, key in (a,b), key notin (a,b); requirements joined by commas outside parentheses.
_REQUIREMENT = re.compile(
    r"\s*(!?[A-Za-z0-9][-A-Za-z0-9_./]*\s*"
    r"(?:(?:==?|!=)\s*[-A-Za-z0-9_.]*|\s+(?:in|notin)\s*\([-A-Za-z0-9_.,\s]*\))?)\s*"
)


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class KubernetesApiConfig(_Section):
    """How the API server is reached: in-cluster unless ``api_url`` is set."""

    api_url: str | None = Field(
        default=None,
        description="API server URL; None: in-cluster, https://$KUBERNETES_SERVICE_HOST:"
        "$KUBERNETES_SERVICE_PORT with the service account's token and CA",
    )
    token_path: Path = Field(
        default=SERVICE_ACCOUNT_DIR / "token",
        description="bearer token file, read before every request (kubelet rotates it)",
    )
    ca_path: Path = Field(
        default=SERVICE_ACCOUNT_DIR / "ca.crt",
        description="CA bundle that signs the API server's certificate (https only)",
    )
    timeout_s: float = Field(default=10.0, gt=0, description="timeout of one API request")


class ExporterPods(_Section):
    """Which pods on the agent's node are one exporter, and where their metrics are."""

    label_selector: str = Field(
        description="label selector of the exporter's pods, as kubectl -l takes it "
        "(e.g. app=nvidia-dcgm-exporter)"
    )
    namespace: str | None = Field(
        default=None, description="namespace of the pods; null: every namespace"
    )
    port: int | str = Field(
        description="the container port: its number, or its name in the pod spec (e.g. metrics)"
    )
    path: str = Field(default="/metrics", description="the metrics path")
    scheme: Literal["http", "https"] = Field(default="http", description="http or https")

    @field_validator("label_selector")
    @classmethod
    def _selector(cls, text: str) -> str:
        depth, part, parts = 0, "", []
        for char in text:
            depth += {"(": 1, ")": -1}.get(char, 0)
            if char == "," and depth == 0:
                parts.append(part)
                part = ""
            else:
                part += char
        parts.append(part)
        for requirement in parts:
            if not _REQUIREMENT.fullmatch(requirement) or not requirement.strip():
                raise ValueError(f"not a label selector requirement: {requirement.strip()!r}")
        return text

    @field_validator("port")
    @classmethod
    def _port(cls, port: int | str) -> int | str:
        if isinstance(port, str) and port.isdigit():
            port = int(port)  # '9400' written quoted is the number
        if isinstance(port, int) and not 1 <= port <= 65535:
            raise ValueError(f"a port number is 1-65535 (got {port})")
        if isinstance(port, str) and not re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", port):
            raise ValueError(f"not a container port name (IANA_SVC_NAME): {port!r}")
        return port

    @field_validator("path")
    @classmethod
    def _path(cls, path: str) -> str:
        if not path.startswith("/"):
            raise ValueError(f"must start with '/' (got {path!r})")
        return path


class DcgmExporterPods(ExporterPods):
    """dcgm-exporter's pods; the defaults are the NVIDIA GPU Operator's DaemonSet."""

    label_selector: str = Field(
        default="app=nvidia-dcgm-exporter",
        description="label selector of dcgm-exporter's pods, as kubectl -l takes it",
    )
    port: int | str = Field(
        default=9400, description="the container port: its number, or its name in the pod spec"
    )


class NodeExporterPods(ExporterPods):
    """node-exporter's pods; the defaults are kube-prometheus-stack's DaemonSet."""

    label_selector: str = Field(
        default="app.kubernetes.io/name=prometheus-node-exporter",
        description="label selector of node-exporter's pods, as kubectl -l takes it",
    )
    port: int | str = Field(
        default=9100, description="the container port: its number, or its name in the pod spec"
    )


class KubernetesTargetsConfig(KubernetesApiConfig):
    """Agent mode in Kubernetes: find this node's dcgm-exporter and node-exporter pods through
    the API (pods matching each selector with ``spec.nodeName`` this node, Running and ready),
    follow them as they restart (list, then watch), and scrape them instead of the localhost
    ports. Needs get/list/watch on pods (the Helm chart's ``agent.discovery``). Off by default."""

    enabled: bool = Field(
        default=False,
        description="agent mode: discover this node's exporter pods through the Kubernetes "
        "API instead of scraping localhost (targets.agent_ports)",
    )
    dcgm: DcgmExporterPods = Field(
        default_factory=DcgmExporterPods,
        description="dcgm-exporter's pods (default: the NVIDIA GPU Operator's)",
    )
    node: NodeExporterPods = Field(
        default_factory=NodeExporterPods,
        description="node-exporter's pods (default: kube-prometheus-stack's)",
    )
    watch_timeout_s: int = Field(
        default=300,
        ge=1,
        description="a watch is ended by the API server after this long and resumed from its "
        "last resourceVersion (timeoutSeconds)",
    )
    backoff_max_s: float = Field(
        default=30.0,
        gt=0,
        description="longest wait before retrying after an API error (doubling from 0.5 s)",
    )
