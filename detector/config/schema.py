"""Config models: every section of the daemon config with its production defaults.

Pure pydantic: no file or environment access (that is ``detector.config``, whose
``load_config`` returns a ``Config``). Import the section models from here. Unknown keys are
errors (``extra="forbid"``) and loaded configs are immutable. Cross-field rules:
``scrape.timeout_s < scrape.interval_s``, ``alerts.clear_ratio`` in (0, 1], shard ``i < N``
and only in fleet mode, TLS cert and key together. Secrets are ``SecretStr`` so repr and
summaries never show them.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    field_validator,
    model_validator,
)

__all__ = [
    "AgentPorts",
    "AlertsConfig",
    "CalibrationConfig",
    "Config",
    "EvaluationConfig",
    "KmsgConfig",
    "LabelsConfig",
    "LoggingConfig",
    "RulesConfig",
    "ScoringConfig",
    "ScrapeConfig",
    "ServerConfig",
    "Shard",
    "StateConfig",
    "StaticTarget",
    "StormConfig",
    "TargetsConfig",
]

MiB = 1024 * 1024
DEFAULT_THRESHOLD = 0.6
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
# bcrypt ($2a$/$2b$/$2y$, cost, 53 chars of salt+hash) or "sha256:<64 hex>"; never plain text.
_PASSWORD_HASH = re.compile(r"\$2[aby]\$\d{2}\$[./A-Za-z0-9]{53}|sha256:[0-9a-fA-F]{64}")


class _Section(BaseModel):
    """Every section: unknown keys are errors, values are immutable after load."""

    model_config = ConfigDict(extra="forbid", frozen=True)


# labels.drop's defaults: container network devices (veth pairs; Calico's cali*, Cilium's
# lxc*; the host-side veths of the AWS VPC, GKE and Azure CNIs, a prefix and 11 hex digits;
# Docker's user networks' bridges; the 15 hex digits of kube-prometheus-stack's netdev
# exclusion) and container mounts.
DEFAULT_DROP = {
    "device": r"veth.*|cali.*|lxc.*|(eni|gke|azv)[0-9a-f]{11}|br-[0-9a-f]{12}|[a-f0-9]{15}",
    "mountpoint": (
        r"/(var/lib/(kubelet|docker|containerd|containers/storage)|run/(containerd|k3s))/.+"
    ),
}


def _check_label_names(names: list[str]) -> list[str]:
    bad = [n for n in names if not _LABEL_NAME.fullmatch(n)]
    if bad:
        raise ValueError(f"not valid Prometheus label names: {bad}")
    return names


def _check_http_url(url: str) -> str:
    if not re.fullmatch(r"https?://[^/\s]+(/\S*)?", url):
        raise ValueError(f"must be an http:// or https:// URL (got {url!r})")
    return url


class Shard(_Section):
    """This process's share of the cohorts: ``index`` of ``count`` (written "i/N")."""

    index: int = Field(ge=0)
    count: int = Field(ge=1)

    @model_validator(mode="before")
    @classmethod
    def _parse_text(cls, value: Any) -> Any:
        if isinstance(value, str):
            match = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", value)
            if not match:
                raise ValueError(f"must be written 'i/N', e.g. '0/4' (got {value!r})")
            return {"index": int(match[1]), "count": int(match[2])}
        return value

    @model_validator(mode="after")
    def _index_below_count(self) -> Shard:
        if self.index >= self.count:
            raise ValueError(
                f"shard index must be < shard count (got {self.index}/{self.count}; "
                f"shards are numbered 0..{self.count - 1})"
            )
        return self

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


class StaticTarget(_Section):
    """One exporter to scrape. ``node`` overrides the node name found in its labels."""

    url: str
    node: str | None = None
    kind: Literal["dcgm", "node", "other"] = "other"
    labels: dict[str, str] = Field(default_factory=dict)

    _url = field_validator("url")(_check_http_url)

    @field_validator("labels")
    @classmethod
    def _label_names(cls, labels: dict[str, str]) -> dict[str, str]:
        _check_label_names(list(labels))
        return labels


class AgentPorts(_Section):
    """Ports of the exporters on the local node, scraped in agent mode."""

    dcgm: int = Field(default=9400, ge=1, le=65535)
    node: int = Field(default=9100, ge=1, le=65535)


class TargetsConfig(_Section):
    """Where to scrape: static targets, Prometheus file_sd files (reloaded on change)."""

    static: list[StaticTarget] = Field(default_factory=list)
    file_sd: list[Path] = Field(default_factory=list)
    file_sd_refresh_s: float = Field(default=30.0, gt=0)
    agent_ports: AgentPorts = Field(default_factory=AgentPorts)

    @field_validator("file_sd", mode="before")
    @classmethod
    def _one_or_many(cls, value: Any) -> Any:
        return [value] if isinstance(value, str | Path) else value


class ScrapeConfig(_Section):
    """Scrape timing and the limits that protect the daemon from one bad exporter."""

    interval_s: float = Field(default=15.0, gt=0)
    timeout_s: float = Field(default=5.0, gt=0)
    body_limit_bytes: int = Field(default=32 * MiB, gt=0)
    jitter_fraction: float = Field(default=0.1, ge=0, lt=1)
    max_series_per_target: int = Field(default=200_000, gt=0)
    # All targets together: past it, series not yet known are refused (label churn). A series
    # takes ~1.8 KB (bench/memory_bench.py). None: by mode (config.py), 250,000 for an agent
    # (its 1 GiB with room to spare; a GPU node publishes ~5,000), 2,000,000 for a fleet
    # (~3.7 GB); set it to the memory limit.
    max_series_total: int | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _timeout_below_interval(self) -> ScrapeConfig:
        if self.timeout_s >= self.interval_s:
            raise ValueError(
                f"timeout_s must be < interval_s so a slow target cannot overlap the next tick "
                f"(got timeout_s={self.timeout_s:g}, interval_s={self.interval_s:g})"
            )
        return self


class LabelsConfig(_Section):
    """Which labels name the node, the GPU and the cohort (peers a node is compared with)."""

    node_labels: list[str] = Field(
        default_factory=lambda: ["node", "hostname", "Hostname", "instance"], min_length=1
    )
    gpu_labels: list[str] = Field(default_factory=lambda: ["gpu"], min_length=1)
    cohort_labels: list[str] = Field(default_factory=list)  # empty: all nodes are one cohort
    # A GPU's workload: the first of these labels its series carry (dcgm-exporter's Slurm
    # job mapping, its Kubernetes pod mapping). A node's GPUs are peers only of the GPUs
    # running the same workload, so a node shared by several jobs is not a set of lone
    # deviants. GPUs with none of them are one workload. Empty: all GPUs of a node are peers.
    gpu_workload_labels: list[str] = Field(default_factory=lambda: ["hpc_job", "pod"])
    # A pod label names its owner's workload: the pod name without the suffixes Kubernetes
    # generates (a Job's or ReplicaSet's random suffix, a StatefulSet's ordinal, a worker
    # index) and a rank's role (-master, -worker), in its namespace, so a job that runs one
    # pod per GPU (train-master-0, train-worker-0 ... -6: train) keeps its GPU peers. False:
    # every pod is a workload of its own (series.pod_owner, series.group_value).
    gpu_workload_pod_owner: bool = True
    # Where no workload label names a GPU's job: the signal (a GPU signal of the rules) whose
    # co-movement tells the jobs of a node's GPUs apart. dcgm-exporter samples a node's GPUs at
    # once, so the GPUs of one synchronous job draw power up and down together; GPUs that
    # keep doing so apart from the rest, in groups of two or more, become peers of each other
    # only (detector/gpu_comovement.py). null (in the environment: empty): all unlabelled
    # GPUs of a node are peers.
    gpu_workload_comovement: str | None = "power_usage"
    # Where no workload label names a GPU's job: the GPU signal (its utilization, %) that
    # tells a node's GPUs at rest from its working ones, so that idle GPUs beside a job are
    # not its peers (detector/gpu_activity.py: GPUs change sides only several at a time, as a
    # job starts or ends; one GPU that stops alone stays its job's deviant). null (in the
    # environment: empty): off.
    gpu_activity_signal: str | None = "gpu_util"
    # Series never indexed: label -> regular expression, a series dropped when that label's
    # value matches in full (``__name__``: the metric name, as in Prometheus relabelling).
    # The defaults are what containers bring and take away with them: their virtual network
    # devices and their volume and runtime mounts (kube-prometheus-stack excludes much the
    # same at the exporter). Setting it replaces them; {} keeps every series.
    drop: dict[str, str] = Field(default_factory=lambda: dict(DEFAULT_DROP))

    _names = field_validator("node_labels", "gpu_labels", "cohort_labels", "gpu_workload_labels")(
        _check_label_names
    )

    @field_validator("gpu_workload_comovement", "gpu_activity_signal")
    @classmethod
    def _comovement_off_when_empty(cls, name: str | None) -> str | None:
        return name or None  # an environment variable cannot say null

    @field_validator("drop")
    @classmethod
    def _drop_patterns(cls, drop: dict[str, str]) -> dict[str, str]:
        _check_label_names(list(drop))
        for label, pattern in drop.items():
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"{label}: not a regular expression ({exc}): {pattern!r}") from exc
        return drop


class RulesConfig(_Section):
    """Signal and XID rule files; ``None`` uses the built-in rules shipped with the package."""

    signals: Path | None = None
    xid: Path | None = None
    default_rule: bool = True  # score metrics that no rule names with the generic rule


class ScoringConfig(_Section):
    """Scorer and fusion parameters. Times are seconds, converted to ticks by the scorers."""

    zscore_half_life_s: float = Field(default=3600.0, gt=0)
    changepoint_half_life_s: float = Field(default=21600.0, gt=0)
    # seconds a rare-event counter's rate is learnt before its bursts score (the other scorers
    # warm up over their first observations)
    warmup_s: float = Field(default=3600.0, ge=0)
    peer_min_peers: int = Field(default=3, ge=1)
    # A node whose cohort has fewer than peer_min_peers nodes (a single server, a node alone in
    # its job) is scored against its own past: its node-level signals that peers would score,
    # and its node-level metrics no rule names, by the own_past preset (scorers/own_past.py)
    own_past_when_peerless: bool = True
    common_mode_fraction: float = Field(default=0.05, gt=0, le=1)
    # seconds within which nodes' excursions on one signal must begin to be one group event
    common_mode_window_s: float = Field(default=300.0, ge=0)
    top_k: int = Field(default=5, ge=1)
    # seconds an exporter page repeated byte for byte counts as no observation (dcgm-exporter
    # serving its cached collection); past it the exporter is frozen (repeats.py). None: off
    repeat_hold_s: float | None = Field(default=60.0, ge=0)


class StormConfig(_Section):
    """Storm breaker: when more than ``fraction`` of entities fire within ``window_s``."""

    fraction: float = Field(default=0.2, gt=0, le=1)
    window_s: float = Field(default=300.0, gt=0)


class AlertsConfig(_Section):
    """Alert state machine and delivery. ``threshold`` None: calibration file, else 0.6."""

    threshold: float | None = Field(default=None, gt=0, le=1)
    clear_ratio: float = Field(default=0.8, gt=0, le=1)
    min_duration_s: float = Field(default=60.0, ge=0)
    min_observations: int = Field(default=3, ge=1)  # ticks with data before it fires, too
    cooldown_s: float = Field(default=900.0, ge=0)
    clear_duration_s: float = Field(default=60.0, ge=0)  # below the clear level this long to end
    alert_on_xid: bool = True
    xid_hold_s: float = Field(default=300.0, gt=0)  # how long a failure XID forces its alert
    shadow: bool = False  # evaluate and export, but send nothing to Alertmanager
    alertmanager_urls: list[str] = Field(default_factory=list)
    resend_interval_s: float = Field(default=60.0, gt=0)
    storm: StormConfig = Field(default_factory=StormConfig)
    suppress_xids: list[int] = Field(default_factory=list)
    suppress_signals: list[str] = Field(default_factory=list)
    maintenance_label: str | None = None  # a node carrying this label (any value) is silent
    runbook_url: str | None = None
    cluster: str | None = None

    @field_validator("alertmanager_urls")
    @classmethod
    def _urls(cls, urls: list[str]) -> list[str]:
        return [_check_http_url(u) for u in urls]

    @field_validator("suppress_xids")
    @classmethod
    def _xids(cls, xids: list[int]) -> list[int]:
        bad = [x for x in xids if x < 0]
        if bad:
            raise ValueError(f"XID codes are non-negative integers (got {bad})")
        return xids

    def resolve_threshold(self, calibrated: float | None) -> float:
        """The firing threshold: explicit config, else the calibration file's, else 0.6."""
        if self.threshold is not None:
            return self.threshold
        return calibrated if calibrated is not None else DEFAULT_THRESHOLD

    def clear_threshold(self, threshold: float) -> float:
        """Score below which a firing alert clears (hysteresis)."""
        return threshold * self.clear_ratio


class CalibrationConfig(_Section):
    """Calibration file written by ``detector calibrate``; None: no calibration."""

    path: Path | None = None


class EvaluationConfig(_Section):
    """Alert-to-failure matching window (ARCHITECTURE.md "Matching")."""

    horizon_s: float = Field(default=3600.0, gt=0)
    grace_s: float = Field(default=300.0, ge=0)


class StateConfig(_Section):
    """Scorer state persistence across restarts; ``path`` None: not persisted."""

    path: Path | None = None
    save_interval_s: float = Field(default=60.0, gt=0)


class ServerConfig(_Section):
    """The daemon's HTTP server (/metrics, /healthz, /readyz).

    ``basic_auth`` maps user name to a password hash: bcrypt (``$2b$12$...``) or
    ``sha256:<64 hex digits>``. Plain-text passwords are rejected; hashes are never logged.
    """

    listen: str = "0.0.0.0:9108"
    tls_cert: Path | None = None
    tls_key: Path | None = None
    basic_auth: dict[str, SecretStr] = Field(default_factory=dict)
    max_connections: int = Field(default=64, ge=1)
    request_timeout_s: float = Field(default=10.0, gt=0)
    max_request_bytes: int = Field(default=64 * 1024, gt=0)

    @field_validator("listen")
    @classmethod
    def _host_port(cls, listen: str) -> str:
        match = re.fullmatch(r"(\[[0-9a-fA-F:.]+\]|[^:\[\]\s]*):(\d{1,5})", listen)
        if not match or not 0 < int(match[2]) <= 65535:
            raise ValueError(
                f"must be 'host:port', e.g. '0.0.0.0:9108' or '[::]:9108' (got {listen!r})"
            )
        return listen

    @field_validator("basic_auth")
    @classmethod
    def _hashes(cls, users: dict[str, SecretStr]) -> dict[str, SecretStr]:
        bad = sorted(
            u for u, h in users.items() if not _PASSWORD_HASH.fullmatch(h.get_secret_value())
        )
        if bad:
            raise ValueError(
                f"users {bad}: password must be a bcrypt hash ('$2b$12$...') or "
                "'sha256:<64 hex digits>', never plain text"
            )
        return users

    @model_validator(mode="after")
    def _tls_pair(self) -> ServerConfig:
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError("tls_cert and tls_key must be set together (or neither)")
        return self

    @property
    def host(self) -> str:
        return self.listen.rsplit(":", 1)[0].strip("[]")

    @property
    def port(self) -> int:
        return int(self.listen.rsplit(":", 1)[1])


class KmsgConfig(_Section):
    """Kernel log source of NVRM Xid lines. ``enabled`` None: on in agent mode only."""

    enabled: bool | None = None
    path: Path = Path("/dev/kmsg")


class LoggingConfig(_Section):
    """Log level and format (JSON lines for machines, console for people)."""

    level: Literal["debug", "info", "warning", "error", "critical"] = "info"
    format: Literal["json", "console"] = "json"

    @field_validator("level", mode="before")
    @classmethod
    def _lower(cls, value: Any) -> Any:
        return value.lower() if isinstance(value, str) else value


class Config(_Section):
    """The whole daemon config. Fleet mode scrapes many nodes; agent mode its own node."""

    mode: Literal["agent", "fleet"] = "fleet"
    node_name: str | None = None
    shard: Shard | None = None
    targets: TargetsConfig = Field(default_factory=TargetsConfig)
    scrape: ScrapeConfig = Field(default_factory=ScrapeConfig)
    labels: LabelsConfig = Field(default_factory=LabelsConfig)
    rules: RulesConfig = Field(default_factory=RulesConfig)
    scoring: ScoringConfig = Field(default_factory=ScoringConfig)
    alerts: AlertsConfig = Field(default_factory=AlertsConfig)
    calibration: CalibrationConfig = Field(default_factory=CalibrationConfig)
    evaluation: EvaluationConfig = Field(default_factory=EvaluationConfig)
    state: StateConfig = Field(default_factory=StateConfig)
    server: ServerConfig = Field(default_factory=ServerConfig)
    kmsg: KmsgConfig = Field(default_factory=KmsgConfig)
    logging: LoggingConfig = Field(default_factory=LoggingConfig)

    def scrapes_nothing(self) -> bool:
        """Fleet mode with neither static targets nor file_sd (agent mode scrapes this node's
        own exporters): ``record`` refuses to start, ``run`` warns."""
        return self.mode != "agent" and not (self.targets.static or self.targets.file_sd)

    @model_validator(mode="after")
    def _shard_only_in_fleet(self) -> Config:
        if self.shard is not None and self.mode != "fleet":
            raise ValueError("shard is only meaningful in fleet mode (mode: fleet)")
        return self
