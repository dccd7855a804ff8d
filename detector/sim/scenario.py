"""Every parameter of the simulated cluster, in one frozen record.

A ``Scenario`` plus its seed fully determines the simulated telemetry and ground truth: the
same scenario always yields the same series, frames and events. The CLI maps its flags onto
these fields one to one (``--nodes`` -> ``nodes``, ``--days`` -> ``days``, ...).

Nodes and GPUs are addressed by index in specs (node 0 is ``node-01``); times in specs are
seconds from ``start``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from ..errors import ConfigError
from .precursors import SHAPES
from .trace import KINDS

DcgmFields = Literal["default", "all"]
HostnameLabel = Literal["Hostname", "hostname"]


@dataclass(frozen=True, slots=True)
class FailureSpec:
    """One failure to plant. ``lead_s``: precursor lead time (0 = no precursor, None = drawn
    from the scenario's lead range); ``xid``: the final XID (None = the kind's usual mix);
    ``shape``, ``amplitude``: the precursor's (precursors.py), ``gap_s``: it stops that long
    before the XID (0: it runs into it)."""

    kind: str
    node: int
    gpu: int
    at_s: float
    lead_s: float | None = None
    xid: int | None = None
    shape: str = "ramp"
    amplitude: float = 1.0
    gap_s: float = 0.0


HostFaultKind = Literal["nfs", "memory"]


@dataclass(frozen=True, slots=True)
class HostFault:
    """A fault of one node's host, not of a GPU (no XID): from ``at_s`` on, ``nfs``: the
    node's NFS RPCs take 20x their round trip (a bad path to the server: its RTT and
    per-operation times, not the cluster's); ``memory``: the host leaks memory, its available
    memory falling to ~5% of RAM over ``ramp_s``."""

    kind: HostFaultKind
    node: int
    at_s: float
    ramp_s: float = 600.0


@dataclass(frozen=True, slots=True)
class JobSpec:
    """A training job on a fixed set of nodes (indices); disjoint from other jobs' nodes."""

    name: str
    nodes: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Scenario:
    """All knobs of the simulated cluster. Defaults: 63 x 8 B200 for one day, trace rates."""

    nodes: int = 63
    gpus: int = 8
    days: float = 1.0
    step_s: float = 30.0
    seed: int = 0
    start: float = 1_735_689_600.0  # 2025-01-01T00:00:00Z
    # Exposition shape.
    model_name: str = "NVIDIA B200"
    driver_version: str = "570.133.20"
    dcgm_fields: DcgmFields = "default"  # "all" also emits the fields shipped commented out
    hostname_label: HostnameLabel = "Hostname"  # newer dcgm-exporter builds: "hostname"
    kubernetes_labels: bool = True  # container/namespace/pod on GPUs that run a job pod
    # A label naming each node's training job on its node-exporter series, as Prometheus
    # relabelling from the scheduler would add it (spare nodes get none); None: no such label.
    job_label: str | None = None
    # With job_label: a new value for each run of a job ("<job>-<run>", as a scheduler's job
    # id), on the node's dcgm-exporter series too (both its targets relabelled, as file_sd
    # written by a scheduler does): every series comes back under a new identity at each run.
    job_label_runs: bool = False
    # Nodes shared by several workloads: on ``shared_nodes`` nodes (spread evenly) the last
    # ``shared_gpus`` GPUs are not in the node's job; they run short jobs of their own (each
    # run its own pod, idle gaps between), as a scheduler packing small jobs onto a partly
    # used node does. Their pod labels say so (``kubernetes_labels``).
    shared_nodes: int = 0
    shared_gpus: int = 2
    # Jobs run one pod per GPU (``<job>-worker-<rank>``, a rank per GPU, as a training operator
    # names them) instead of one pod per node; the pods are on the pages, in the dumps and
    # scheduled in a simulated replay (``kubernetes_labels``).
    pod_per_gpu: bool = False
    # Failures. Rates and type mix come from the InfiniteHBD trace (see trace.py).
    fault_trace: str | None = "auto"  # path, "auto" (the packaged trace) or None (constants)
    failure_rate_multiplier: float = 1.0
    failure_count: int | None = None  # draw exactly this many instead of Poisson(rate)
    failures: tuple[FailureSpec, ...] | None = None  # explicit list replaces drawn failures
    host_faults: tuple[HostFault, ...] = ()  # node-level faults (NFS path, memory leak)
    # Precursors (precursors.py): onset before the XID and amplitude, log-uniform in these
    # ranges; the share that stops before the XID (a quiet gap); the share that shows none.
    precursor_lead_s: tuple[float, float] = (300.0, 4 * 3600.0)
    precursor_amplitude: tuple[float, float] = (0.25, 1.5)
    precursor_gap_share: float = 0.25
    no_precursor_share: float = 0.2  # share of precursor-capable failures that show none
    repair_cap_s: float = 12 * 3600.0  # trace repair times are capped so nodes come back
    repeat_offenders: int = 1  # nodes with a boosted failure propensity
    offender_boost: float = 6.0
    # Workload.
    jobs: tuple[JobSpec, ...] | None = None  # None: the nodes split into four jobs + spares
    run_hours: tuple[float, float] = (4.0, 14.0)  # one job run between restarts
    idle_gap_s: tuple[float, float] = (600.0, 3600.0)  # between runs of a job
    init_s: tuple[float, float] = (300.0, 600.0)  # data/model load at run start
    checkpoint_interval_s: float = 1800.0
    checkpoint_duration_s: tuple[float, float] = (90.0, 240.0)
    hang_s: tuple[float, float] = (120.0, 600.0)  # NCCL timeout after a peer failed
    xid45_on_teardown: bool = True  # preemptive cleanup XID 45 on every GPU of a torn-down job
    # Noise and environment.
    noisy_nodes: int = 1  # flapping noisy nodes: noise, never a failure
    noise_scale: float = 1.0
    diurnal_amplitude_c: float = 3.0
    # Collection: the share of scrapes lost (timeouts), per target (a node's dcgm-exporter or
    # node-exporter) and tick; a lost scrape's series are absent from that tick's frame.
    scrape_loss: float = 0.0
    node_scrape_every: int = 1  # node-exporter scraped every k-th tick (exporters' cadences differ)
    # dcgm-exporter reads the GPUs every ``-c`` ms and serves its cache in between: a node's DCGM
    # values (XID gauge and windowed counts included) are refreshed every k-th tick, at a phase
    # of its own, and repeat byte for byte in between. ``dcgm_stale_share``: per node and tick,
    # the chance that a scrape lands just before that tick's collection (it serves the previous
    # one; the next scrape sees the new one).
    dcgm_collect_every: int = 1
    dcgm_stale_share: float = 0.0

    def __post_init__(self) -> None:
        def bad(name: str, why: str) -> ConfigError:
            return ConfigError(f"scenario field {name!r}: {why}")

        for name in ("nodes", "gpus", "node_scrape_every", "dcgm_collect_every"):
            if getattr(self, name) < 1:
                raise bad(name, "must be >= 1")
        for name in ("days", "step_s", "checkpoint_interval_s"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise bad(name, f"must be a positive number, got {value!r}")
        if self.dcgm_fields not in ("default", "all"):
            raise bad("dcgm_fields", f"must be 'default' or 'all', got {self.dcgm_fields!r}")
        if self.hostname_label not in ("Hostname", "hostname"):
            raise bad("hostname_label", "must be 'Hostname' or 'hostname'")
        if self.job_label is not None and (
            not self.job_label.isidentifier() or self.job_label in ("instance", "job")
        ):
            raise bad("job_label", "must be a label name other than instance and job")
        if self.job_label_runs and self.job_label is None:
            raise bad("job_label_runs", "needs job_label (the label that carries the run)")
        if not 0 <= self.shared_nodes <= self.nodes:
            raise bad("shared_nodes", f"must be within [0, nodes], got {self.shared_nodes!r}")
        if self.shared_nodes and not 1 <= self.shared_gpus < self.gpus:
            raise bad("shared_gpus", f"must be within [1, gpus), got {self.shared_gpus!r}")
        if self.shared_nodes and self.job_label_runs:
            raise bad("shared_nodes", "cannot be combined with job_label_runs")
        for fault in self.host_faults:
            if fault.kind not in ("nfs", "memory") or not 0 <= fault.node < self.nodes:
                raise bad("host_faults", f"kind nfs or memory on a node in [0, nodes): {fault}")
        if self.failure_rate_multiplier < 0:
            raise bad("failure_rate_multiplier", "must be >= 0")
        if self.failure_count is not None and self.failure_count < 0:
            raise bad("failure_count", "must be >= 0")
        for name in ("no_precursor_share", "precursor_gap_share"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise bad(name, "must be within [0, 1]")
        if not 0.0 <= self.scrape_loss < 1.0:
            raise bad("scrape_loss", f"must be within [0, 1), got {self.scrape_loss!r}")
        if not 0.0 <= self.dcgm_stale_share < 1.0:
            raise bad("dcgm_stale_share", f"must be within [0, 1), got {self.dcgm_stale_share!r}")
        for name in (
            "precursor_lead_s",
            "precursor_amplitude",
            "run_hours",
            "idle_gap_s",
            "init_s",
            "checkpoint_duration_s",
            "hang_s",
        ):
            low, high = getattr(self, name)
            if not 0 <= low <= high:
                raise bad(name, f"must be (low, high) with 0 <= low <= high, got {(low, high)}")
        for i, spec in enumerate(self.failures or ()):
            where = f"failures[{i}]"
            if spec.kind not in KINDS:
                raise bad(where, f"kind {spec.kind!r} not one of {', '.join(KINDS)}")
            if not (0 <= spec.node < self.nodes and 0 <= spec.gpu < self.gpus):
                raise bad(where, f"node {spec.node} / gpu {spec.gpu} outside the cluster")
            if not 0 <= spec.at_s < self.duration_s:
                raise bad(where, f"at_s {spec.at_s} outside [0, {self.duration_s})")
            if spec.shape not in SHAPES:
                raise bad(where, f"shape {spec.shape!r} not one of {', '.join(SHAPES)}")
            if not (math.isfinite(spec.amplitude) and spec.amplitude > 0):
                raise bad(where, f"amplitude must be a positive number, got {spec.amplitude!r}")
            if spec.gap_s and not (spec.lead_s is not None and 0 < spec.gap_s < spec.lead_s):
                raise bad(where, f"gap_s {spec.gap_s} needs a lead_s above it, got {spec.lead_s}")
        seen: set[int] = set()
        for job in self.jobs or ():
            for node in job.nodes:
                if not 0 <= node < self.nodes or node in seen:
                    raise bad("jobs", f"job {job.name!r}: node {node} unknown or in two jobs")
                seen.add(node)

    @property
    def duration_s(self) -> float:
        return self.days * 86400.0

    @property
    def ticks(self) -> int:
        return max(1, int(self.duration_s // self.step_s))

    def node_name(self, index: int) -> str:
        """``node-01`` style names, zero-padded to the cluster size."""
        width = max(2, len(str(self.nodes)))
        return f"node-{index + 1:0{width}d}"

    @classmethod
    def demo(cls) -> Scenario:
        """The built-in demo: 63 x 8 B200, 3 days, a dozen mixed failures, seed 7.

        Twelve failures in 189 node-days is ~35x the trace rate: a year of a cluster's bad luck
        compressed so that a three-day replay has something to find. Every DCGM field is on,
        so ECC/NVLink/violation precursors are visible."""
        return cls(days=3.0, seed=7, dcgm_fields="all", failure_count=12)
