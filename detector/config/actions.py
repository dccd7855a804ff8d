"""The ``actions:`` section: excluding a node on a confirmed failure, off by default and safe.

Every default is written once, here; docs/actions.md explains the section for people. Read
with the rest of the config by ``load_config`` (``DETECTOR_ACTIONS__ENABLED=true`` works as
for every section). Cross-field rules: webhook ``url`` is required when ``kind`` is webhook and
actions are enabled; the taint key is a valid Kubernetes qualified name.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from .kubernetes import SERVICE_ACCOUNT_DIR, KubernetesApiConfig

__all__ = [
    "SERVICE_ACCOUNT_DIR",
    "ActionsConfig",
    "KubernetesActionConfig",
    "SlurmActionConfig",
    "WebhookActionConfig",
]

# A Kubernetes qualified name: an optional DNS-subdomain prefix and "/", then a name part.
_QUALIFIED = re.compile(
    r"([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
)


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class KubernetesActionConfig(KubernetesApiConfig):
    """How a node is excluded in Kubernetes: cordon, a taint, an annotation and a condition."""

    taint_key: str = Field(
        default="gpu-failure-detector/excluded",
        description="key of the taint put on an excluded node (its value is the failure class)",
    )
    taint_effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] = Field(
        default="NoSchedule",
        description="the taint's effect; NoExecute also evicts running pods without a toleration",
    )
    annotation_prefix: str = Field(
        default="gpu-failure-detector",
        description="prefix of the annotations carrying class, evidence and alert id "
        "(<prefix>/failure-class, /evidence, /alert-id, /excluded-at, /cordoned)",
    )
    condition_type: str | None = Field(
        default="GpuFailureDetected",
        description="node condition set True on exclusion and False on release through the "
        "nodes/status subresource; None: annotations only (no nodes/status RBAC needed)",
    )

    @field_validator("taint_key")
    @classmethod
    def _qualified(cls, key: str) -> str:
        if not _QUALIFIED.fullmatch(key):
            raise ValueError(f"not a Kubernetes qualified name ('prefix/name'): {key!r}")
        return key

    @field_validator("api_url")
    @classmethod
    def _url(cls, url: str | None) -> str | None:
        if url is not None and not re.fullmatch(r"https?://[^/\s]+/?", url):
            raise ValueError(f"must be http(s)://host[:port] (got {url!r})")
        return url


class SlurmActionConfig(_Section):
    """How a node is excluded in Slurm: ``scontrol update NodeName=N State=DRAIN Reason=...``."""

    scontrol: str = Field(default="scontrol", description="scontrol executable (name or path)")
    conf: Path | None = Field(
        default=None,
        description="slurm.conf scontrol reads (passed as SLURM_CONF); None: scontrol's own "
        "default (/etc/slurm/slurm.conf or configless)",
    )
    timeout_s: float = Field(default=30.0, gt=0, description="timeout of one scontrol call")


class WebhookActionConfig(_Section):
    """A JSON POST per exclusion and release, for any other system."""

    url: str | None = Field(default=None, description="URL to POST to (required for kind webhook)")
    timeout_s: float = Field(default=10.0, gt=0, description="timeout of one POST")
    attempts: int = Field(default=4, ge=1, description="POSTs before giving up on one event")
    backoff_s: float = Field(
        default=1.0, ge=0, description="wait before the first retry, doubled after each"
    )

    @field_validator("url")
    @classmethod
    def _url(cls, url: str | None) -> str | None:
        if url is not None and not re.fullmatch(r"https?://[^/\s]+(/\S*)?", url):
            raise ValueError(f"must be an http:// or https:// URL (got {url!r})")
        return url


class ActionsConfig(_Section):
    """Exclude a node on a confirmed failure. Off by default; on, dry-run by default."""

    enabled: bool = Field(default=False, description="decide actions at all")
    dry_run: bool = Field(
        default=True,
        description="log and count what would be done, change nothing in the scheduler",
    )
    kind: Literal["kubernetes", "slurm", "webhook"] = Field(
        default="kubernetes", description="the scheduler a node is excluded through"
    )
    on_failure_xid: bool = Field(
        default=True, description="a failure XID on a node (rules/xid.yaml) is a confirmed failure"
    )
    alert_classes: list[str] = Field(
        default_factory=list,
        description="failure classes whose firing alert, held, is a confirmed failure; '*' "
        "matches any alert (with or without a class); empty: alerts never trigger an action",
    )
    alert_min_score: float = Field(
        default=0.9, gt=0, le=1, description="score an alert must stay at or above"
    )
    alert_hold_s: float = Field(
        default=1800.0, ge=0, description="seconds the score must stay there before acting"
    )
    max_per_hour: int = Field(
        default=3, ge=1, description="exclusions started in any hour; one more opens the breaker"
    )
    max_excluded_fraction: float = Field(
        default=0.1,
        gt=0,
        le=1,
        description="share of the cluster's nodes excluded at once (at least one node); an "
        "exclusion past it opens the breaker",
    )
    release_after_s: float | None = Field(
        default=None,
        gt=0,
        description="release a node this long after its last confirmed failure; None: only a "
        "person releases (detector actions release NODE)",
    )
    kubernetes: KubernetesActionConfig = Field(default_factory=KubernetesActionConfig)
    slurm: SlurmActionConfig = Field(default_factory=SlurmActionConfig)
    webhook: WebhookActionConfig = Field(default_factory=WebhookActionConfig)

    @model_validator(mode="after")
    def _webhook_url(self) -> ActionsConfig:
        if self.enabled and self.kind == "webhook" and self.webhook.url is None:
            raise ValueError("kind webhook needs webhook.url")
        return self
