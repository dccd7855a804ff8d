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

from .actions import ActionsConfig
from .kubernetes import ExporterPods, KubernetesApiConfig, KubernetesTargetsConfig

__all__ = [
    "ActionsConfig",
    "AgentPorts",
    "AlertsConfig",
    "CalibrationConfig",
    "Config",
    "EvaluationConfig",
    "ExporterPods",
    "KmsgConfig",
    "KubernetesApiConfig",
    "KubernetesTargetsConfig",
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

    index: int = Field(ge=0, description="this process's shard, 0 .. count - 1")
    count: int = Field(ge=1, description="how many shards the cohorts are spread over")

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

    url: str = Field(description="the exporter's metrics URL (http:// or https://)")
    node: str | None = Field(
        default=None,
        description="the node these series belong to; null: taken from the series' node labels "
        "(labels.node_labels)",
    )
    kind: Literal["dcgm", "node", "other"] = Field(
        default="other",
        description="which exporter it is: dcgm (dcgm-exporter), node (node-exporter), other",
    )
    labels: dict[str, str] = Field(
        default_factory=dict,
        description="labels added to every series of this target (e.g. a cohort label such as "
        "rack or training_job), as Prometheus target labels are",
    )

    _url = field_validator("url")(_check_http_url)

    @field_validator("labels")
    @classmethod
    def _label_names(cls, labels: dict[str, str]) -> dict[str, str]:
        _check_label_names(list(labels))
        return labels


class AgentPorts(_Section):
    """Ports of the exporters on the local node, scraped in agent mode."""

    dcgm: int = Field(default=9400, ge=1, le=65535, description="dcgm-exporter's port")
    node: int = Field(default=9100, ge=1, le=65535, description="node-exporter's port")


class TargetsConfig(_Section):
    """Where to scrape: static targets, Prometheus file_sd files (reloaded on change), and in
    agent mode this node's exporters (localhost ports, or pods found through Kubernetes)."""

    static: list[StaticTarget] = Field(
        default_factory=list, description="exporters to scrape, one entry each (fleet mode)"
    )
    file_sd: list[Path] = Field(
        default_factory=list,
        description="Prometheus file_sd files (JSON or YAML; globs in the file name), reloaded "
        "when they change; a single path is taken as a list of one",
    )
    file_sd_refresh_s: float = Field(
        default=30.0, gt=0, description="seconds between checks of the file_sd files for changes"
    )
    agent_ports: AgentPorts = Field(
        default_factory=AgentPorts, description="agent mode: the local exporters' ports"
    )
    kubernetes: KubernetesTargetsConfig = Field(
        default_factory=KubernetesTargetsConfig,
        description="agent mode in Kubernetes: this node's exporter pods found through the API "
        "(config/kubernetes.py)",
    )

    @field_validator("file_sd", mode="before")
    @classmethod
    def _one_or_many(cls, value: Any) -> Any:
        return [value] if isinstance(value, str | Path) else value


class ScrapeConfig(_Section):
    """Scrape timing and the limits that protect the daemon from one bad exporter."""

    interval_s: float = Field(default=15.0, gt=0, description="seconds between ticks (scrapes)")
    timeout_s: float = Field(
        default=5.0,
        gt=0,
        description="seconds a target may take to answer; must be < interval_s, so a slow "
        "target cannot overlap the next tick",
    )
    body_limit_bytes: int = Field(
        default=32 * MiB, gt=0, description="a larger page is refused, not parsed"
    )
    jitter_fraction: float = Field(
        default=0.1, ge=0, lt=1, description="spread the targets' start over this share of a tick"
    )
    max_series_per_target: int = Field(
        default=200_000,
        gt=0,
        description="series kept from one page; the rest are dropped, with a warning",
    )
    # A series takes ~1.8 KB (bench/memory_bench.py); a GPU node publishes ~5,000.
    max_series_total: int | None = Field(
        default=None,
        gt=0,
        description="series of all targets together; past it, series not yet known are "
        "refused (label churn; detector_series_refused_total). null: 250,000 in agent mode "
        "(its 1 GiB), 2,000,000 in fleet mode (~3.7 GB); ~1.8 KB a series, so set it with the "
        "memory limit",
    )

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
        default_factory=lambda: ["node", "hostname", "Hostname", "instance"],
        min_length=1,
        description="the first of these labels a series carries names its node (instance: its "
        "host part)",
    )
    gpu_labels: list[str] = Field(
        default_factory=lambda: ["gpu"],
        min_length=1,
        description="the first of these labels a series carries names its GPU",
    )
    cohort_labels: list[str] = Field(
        default_factory=list,
        description="a node is compared with the nodes sharing the first of these labels it "
        "carries (e.g. [training_job, rack]; [pod]: its GPUs' pods' owner, i.e. their job); "
        "nodes with none form one cohort; empty: all nodes are one cohort. A new value moves "
        "the node (its next job) and its relabelled series keep their history",
    )
    gpu_workload_labels: list[str] = Field(
        default_factory=lambda: ["hpc_job", "pod"],
        description="a GPU's workload is the first of these labels its series carry "
        "(dcgm-exporter's Slurm job mapping, its Kubernetes pod mapping): a node's GPUs are "
        "peers only of the GPUs running the same one, so a node shared by several jobs is not "
        "a set of lone deviants; GPUs with none are one workload; empty: all GPUs of a node "
        "are peers",
    )
    gpu_workload_pod_owner: bool = Field(
        default=True,
        description="a pod's workload is its owner: the pod name without the suffixes "
        "Kubernetes generates, trailing indices and a rank's role (train-worker-3, "
        "train-master-0: train), in its namespace, so one job's per-GPU pods are peers; false: "
        "every pod is a workload of its own",
    )
    gpu_workload_comovement: str | None = Field(
        default="power_usage",
        description="where no workload label names a GPU's job: the GPU signal whose "
        "co-movement tells a node's jobs apart (GPUs whose power moves together, apart from "
        "the rest, become peers of each other only); null (in the environment: empty): off",
    )
    gpu_activity_signal: str | None = Field(
        default="gpu_util",
        description="where no workload label names a GPU's job: the GPU signal (utilization, "
        "%) that tells a node's GPUs at rest (< 5) from its working ones (>= 20), peers only "
        "within a side; GPUs change sides two or more at a time (a job starting or ending), so "
        "one that stops alone stays its job's deviant; null (in the environment: empty): off",
    )
    drop: dict[str, str] = Field(
        default_factory=lambda: dict(DEFAULT_DROP),
        description="series never indexed: label -> regular expression matching the whole "
        "value (`__name__`: the metric name). The defaults are containers' virtual network "
        "devices and mounts, which come and go and would hold memory for good; setting it "
        "replaces them; {} keeps every series",
    )

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

    signals: Path | None = Field(
        default=None, description="signal rules YAML; null: the built-in rules/signals.yaml"
    )
    xid: Path | None = Field(
        default=None, description="XID rules YAML; null: the built-in rules/xid.yaml"
    )
    default_rule: bool = Field(
        default=True, description="score GPU metrics that no rule names with the generic rule"
    )


class ScoringConfig(_Section):
    """Scorer and fusion parameters. Times are seconds, converted to ticks by the scorers."""

    zscore_half_life_s: float = Field(
        default=3600.0, gt=0, description="half-life of the robust z-score's baselines"
    )
    changepoint_half_life_s: float = Field(
        default=21600.0, gt=0, description="half-life of the changepoint statistic's baseline"
    )
    warmup_s: float = Field(
        default=3600.0,
        ge=0,
        description="seconds a rare-event counter's rate is learnt before its bursts score (the "
        "other scorers warm up over their first observations)",
    )
    peer_min_peers: int = Field(
        default=3, ge=1, description="fewest peers a GPU or node is compared with"
    )
    own_past_when_peerless: bool = Field(
        default=True,
        description="a node whose cohort has fewer than peer_min_peers nodes (a single server, "
        "a node alone in its job) is scored against its own past: its node-level signals that "
        "peers would score and its node-level metrics no rule names, by the own_past preset",
    )
    common_mode_fraction: float = Field(
        default=0.05,
        gt=0,
        le=1,
        description="share of the nodes reporting a signal that, moving on it together, make a "
        "cluster incident instead of node alerts",
    )
    common_mode_window_s: float = Field(
        default=300.0,
        ge=0,
        description="seconds within which nodes' excursions on one signal must begin to be one "
        "group event",
    )
    top_k: int = Field(default=5, ge=1, description="signals reported with each score")
    repeat_hold_s: float | None = Field(
        default=60.0,
        ge=0,
        description="seconds an exporter page repeated byte for byte counts as no observation "
        "(dcgm-exporter serving its cached collection); past it the exporter is frozen; "
        "null: off",
    )


class StormConfig(_Section):
    """Storm breaker: when more than ``fraction`` of entities fire within ``window_s``."""

    fraction: float = Field(
        default=0.2,
        gt=0,
        le=1,
        description="share of the nodes with data (at least 3) that, starting to alert within "
        "window_s, become one GPUClusterIncident instead of node alerts",
    )
    window_s: float = Field(
        default=300.0,
        gt=0,
        description="seconds in which the nodes' alerts must start; a cluster incident closes "
        "after this long with nothing moving cluster-wide",
    )


class AlertsConfig(_Section):
    """Alert state machine and delivery. ``threshold`` None: calibration file, else 0.6."""

    threshold: float | None = Field(
        default=None,
        gt=0,
        le=1,
        description="fused score at which an alert starts pending; null: the calibration "
        "file's threshold, else 0.6",
    )
    clear_ratio: float = Field(
        default=0.8, gt=0, le=1, description="a firing alert clears below clear_ratio x threshold"
    )
    min_duration_s: float = Field(
        default=60.0, ge=0, description="seconds pending above the threshold before it fires"
    )
    min_observations: int = Field(
        default=3, ge=1, description="ticks with data above the threshold before it fires, too"
    )
    cooldown_s: float = Field(
        default=900.0, ge=0, description="seconds after a resolve before the entity fires again"
    )
    clear_duration_s: float = Field(
        default=60.0,
        ge=0,
        description="seconds below the clear level before a firing alert resolves (one low "
        "tick does not end it)",
    )
    alert_on_xid: bool = Field(
        default=True, description="a failure XID (rules/xid.yaml) fires its alert at once"
    )
    xid_hold_s: float = Field(
        default=300.0,
        gt=0,
        description="seconds a failure XID, or a GPU gone from the page its node's exporter still "
        "serves (definitive evidence, no minimum duration), holds its alert firing",
    )
    page_after_s: float | None = Field(
        default=600.0,
        ge=0,
        description="seconds an alert stays firing (its score held above the threshold, with "
        "the clear_ratio hysteresis) before it escalates from severity warning to critical "
        "(pages); a failure XID pages at once; null: only failure XIDs page",
    )
    shadow: bool = Field(
        default=False,
        description="evaluate and export alerts, send nothing to Alertmanager (a first "
        "deployment's setting: the examples in deploy/ turn it on)",
    )
    alertmanager_urls: list[str] = Field(
        default_factory=list,
        description="Alertmanagers to send to (API v2), e.g. [http://alertmanager:9093]",
    )
    resend_interval_s: float = Field(
        default=60.0, gt=0, description="seconds between resends of a firing alert"
    )
    storm: StormConfig = Field(default_factory=StormConfig, description="the storm breaker")
    suppress_xids: list[int] = Field(
        default_factory=list, description="XID codes that never alert, e.g. [43]"
    )
    suppress_signals: list[str] = Field(
        default_factory=list, description="signals whose evidence never alerts"
    )
    maintenance_label: str | None = Field(
        default=None, description="a node carrying this label (any value) sends no alert"
    )
    runbook_url: str | None = Field(
        default=None,
        description="runbook_url annotation on every alert, overriding a diagnosed alert's "
        "link to its failure class (docs_url)",
    )
    docs_url: str = Field(
        default="docs",
        min_length=1,
        description="where the project's docs/ folder is served: a diagnosed alert's "
        "runbook_url is <docs_url>/diagnosis.md#<failure_class>; the default names the "
        "repository's folder (docs/diagnosis.md#pcie_bus), set the URL of your copy (a git "
        "host's view of this repository, an internal wiki) to make it a link",
    )
    cluster: str | None = Field(default=None, description="cluster label on every alert")

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

    path: Path | None = Field(
        default=None, description="calibration JSON written by detector calibrate; null: none"
    )


class EvaluationConfig(_Section):
    """Alert-to-failure matching window (ARCHITECTURE.md "Matching")."""

    horizon_s: float = Field(
        default=3600.0,
        gt=0,
        description="an alert starting up to this many seconds before a failure detects it",
    )
    grace_s: float = Field(
        default=300.0,
        ge=0,
        description="an alert starting up to this many seconds after a failure (or its end) "
        "still matches it",
    )


class StateConfig(_Section):
    """Scorer state persistence across restarts; ``path`` None: not persisted."""

    path: Path | None = Field(
        default=None,
        description="directory for scorer and alert state, saved atomically and restored at "
        "start; null: not persisted",
    )
    save_interval_s: float = Field(
        default=60.0, gt=0, description="seconds between saves (and at SIGTERM)"
    )


class ServerConfig(_Section):
    """The daemon's HTTP server (/metrics, /healthz, /readyz).

    ``basic_auth`` maps user name to a password hash: bcrypt (``$2b$12$...``) or
    ``sha256:<64 hex digits>``. Plain-text passwords are rejected; hashes are never logged.
    """

    listen: str = Field(
        default="0.0.0.0:9108", description="host:port to serve on ([::]:9108 for IPv6)"
    )
    tls_cert: Path | None = Field(
        default=None, description="TLS certificate (PEM); set with tls_key, or neither"
    )
    tls_key: Path | None = Field(default=None, description="TLS private key (PEM)")
    basic_auth: dict[str, SecretStr] = Field(
        default_factory=dict,
        description="user -> password hash: bcrypt ($2b$12$...) or sha256:<64 hex digits>, "
        "never plain text; empty: no authentication",
    )
    max_connections: int = Field(default=64, ge=1, description="connections served at once")
    request_timeout_s: float = Field(
        default=10.0, gt=0, description="seconds a client may take to send its request"
    )
    max_request_bytes: int = Field(
        default=64 * 1024, gt=0, description="a larger request is refused"
    )

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


class RemoteWriteConfig(_Section):
    """Prometheus remote-write 1.0 in: ``POST /api/v1/write`` on the daemon's HTTP server
    (its TLS and basic auth apply). Samples join the series index and frame of each tick like
    scraped ones (ingest/remote_write/source.py). ``max_body_bytes`` caps the snappy body
    (413 over it), ``max_decoded_bytes`` its declared decompressed size (checked before
    decompressing); a sample older than ``max_sample_age_s`` before the last tick is dropped
    as too old."""

    enabled: bool = Field(default=False, description="accept POST /api/v1/write")
    max_body_bytes: int = Field(
        default=16 * MiB, gt=0, description="largest snappy-compressed request body (413 above)"
    )
    max_decoded_bytes: int = Field(
        default=64 * MiB,
        gt=0,
        description="largest declared decompressed size, checked before decompressing (413)",
    )
    max_sample_age_s: float = Field(
        default=60.0, gt=0, description="a sample this much older than the last tick is too old"
    )


class KmsgConfig(_Section):
    """Kernel log source of NVRM Xid lines. ``enabled`` None: on in agent mode only."""

    enabled: bool | None = Field(
        default=None, description="read kernel-log XIDs; null: on in agent mode, off in fleet mode"
    )
    path: Path = Field(
        default=Path("/dev/kmsg"), description="the kernel log device, or a file to follow"
    )


class RecordConfig(_Section):
    """What ``detector run`` scraped and was remote-written, written as it scored it: the
    dumps ``detector replay`` reads back (the same files ``detector record`` writes).
    ``dir`` None: not written."""

    dir: Path | None = Field(
        default=None,
        description="directory for OpenMetrics dumps of every tick run scored (the scrape "
        "round and the remote-written samples, stamped with the tick); null: none written",
    )
    rotate_bytes: int = Field(
        default=256 * 1024 * 1024, gt=0, description="a dump file is closed at this size"
    )
    rotate_s: float = Field(
        default=3600.0, gt=0, description="a dump file is closed this long after its first scrape"
    )


class LoggingConfig(_Section):
    """Log level and format (JSON lines for machines, console for people)."""

    level: Literal["debug", "info", "warning", "error", "critical"] = Field(
        default="info", description="least severe level logged (any case)"
    )
    format: Literal["json", "console"] = Field(
        default="json", description="json: one JSON object a line; console: for people"
    )

    @field_validator("level", mode="before")
    @classmethod
    def _lower(cls, value: Any) -> Any:
        return value.lower() if isinstance(value, str) else value


class Config(_Section):
    """The whole daemon config. Fleet mode scrapes many nodes; agent mode its own node."""

    mode: Literal["agent", "fleet"] = Field(
        default="fleet",
        description="fleet: one process scrapes many nodes; agent: one process per GPU node "
        "scrapes its own exporters on localhost (or, with targets.kubernetes, its node's "
        "exporter pods)",
    )
    node_name: str | None = Field(
        default=None,
        description="agent mode: this node's name; null: $NODE_NAME, else the host name",
    )
    shard: Shard | None = Field(
        default=None,
        description="fleet mode: handle only the cohorts hashing to shard i of N, written "
        "'i/N' (e.g. '0/4'); null: all",
    )
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
    remote_write: RemoteWriteConfig = Field(default_factory=RemoteWriteConfig)
    kmsg: KmsgConfig = Field(default_factory=KmsgConfig)
    record: RecordConfig = Field(default_factory=RecordConfig)
    logging: LoggingConfig = Field(default_factory=LoggingConfig)
    actions: ActionsConfig = Field(default_factory=ActionsConfig)  # config/actions.py

    def scrapes_nothing(self) -> bool:
        """Fleet mode with neither static targets nor file_sd (agent mode scrapes this node's
        own exporters): ``record`` refuses to start, ``run`` warns."""
        return self.mode != "agent" and not (self.targets.static or self.targets.file_sd)

    @model_validator(mode="after")
    def _shard_only_in_fleet(self) -> Config:
        if self.shard is not None and self.mode != "fleet":
            raise ValueError("shard is only meaningful in fleet mode (mode: fleet)")
        return self
