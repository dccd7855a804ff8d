"""Small records the stages exchange. No behaviour beyond trivial helpers; no I/O.

Times are unix seconds (float) everywhere. Labels are sorted tuples of (name, value) pairs so
they are hashable and canonical.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

Labels = tuple[tuple[str, str], ...]
FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]
BoolArray = NDArray[np.bool_]

# dcgm-exporter writes values near 2**63 (e.g. 9223372036854775794) for "blank / not supported".
DCGM_BLANK_THRESHOLD = 9.2e18

# The group key co-movement gives a GPU it judges alone, without GPU peers (gpu_comovement.py;
# gpu_teams.py gives such a GPU a team of its own).
GPU_ALONE = -2


@dataclass(frozen=True, slots=True)
class Sample:
    """One fully parsed sample: used by tests, differential checks and writers."""

    name: str
    labels: Labels
    value: float
    timestamp: float | None = None  # seconds


@dataclass(slots=True)
class Exposition:
    """One parsed payload in columnar form: what ingest/parse.py returns.

    ``keys[i]`` is the series text of sample i exactly as written on the wire (``name`` or
    ``name{labels}``, surrounding blanks stripped). Raw keys repeat verbatim across scrapes of
    the same exporter, so the series index maps them to columns with one dict lookup; a key is
    only split into name and labels the first time it is seen.
    """

    source: str
    keys: list[str] = field(default_factory=list)
    values: list[float] = field(default_factory=list)
    timestamps: list[float | None] = field(default_factory=list)  # seconds, None if absent
    types: dict[str, str] = field(default_factory=dict)  # metric family -> declared type
    errors: list[Exception] = field(default_factory=list)  # ParseError per rejected line
    lines: int = 0  # lines read, including comments and blanks


@dataclass(frozen=True, slots=True)
class SeriesInfo:
    """What a column of the series index stands for, after label normalization."""

    column: int
    metric: str
    labels: Labels  # normalized labels, node/gpu included
    node: str  # "" when no node identity could be found
    gpu: str  # "" for node-level series
    context: Labels = ()  # labels kept aside, not part of identity (uuid, pci_bus_id, pod, ...)


@dataclass(frozen=True, slots=True)
class SampleBatch:
    """A chunk of samples in non-decreasing time order, columns from one SeriesIndex."""

    times: FloatArray
    columns: IntArray
    values: FloatArray

    def __len__(self) -> int:
        return int(self.times.shape[0])


@dataclass(frozen=True, slots=True)
class Frame:
    """The values of one tick, aligned to the series index (NaN = not observed this tick)."""

    time: float
    values: FloatArray


@dataclass(frozen=True, slots=True)
class XidEvent:
    """One XID episode on a node (and GPU when known)."""

    time: float
    node: str
    gpu: str | None
    xid: int
    end: float | None = None
    source: str = ""  # "events-file", "dump", "kmsg", "kernel-log", ...
    pci: str | None = None  # a kernel log's PCI bus id, until replay maps it to ``gpu``
    # The driver's or exporter's text (kernel log line, DCGM err_msg): an XID 154's recovery
    # action is named there, and decides whether it is a failure (``pipeline.is_failure``).
    # Not part of the event's identity (equality, hashing): the same XID from two sources is
    # one event whatever text each carries.
    message: str = field(default="", compare=False)


@dataclass(frozen=True, slots=True)
class JobAttempt:
    """One attempt of a job (or session) to run: a line of the job-attempts file
    (``--jobs``, ingest/jobs.py). ``exit_status`` None: still running when the record ends;
    ``automatic``: this attempt was a restart the scheduler made by itself (a retry policy),
    not a person's resubmission (attempt 1 is neither: it is the submission)."""

    job: str
    attempt: int
    start: float
    end: float | None
    exit_status: int | None
    nodes: tuple[str, ...]
    automatic: bool = False

    @property
    def failed(self) -> bool:
        return self.exit_status is not None and self.exit_status != 0


@dataclass(frozen=True, slots=True)
class Alert:
    """One alert episode: an entity whose fused score stayed above threshold."""

    node: str
    gpu: str | None
    start: float
    end: float | None
    peak_score: float
    signals: tuple[str, ...]  # top contributing signals at the peak, strongest first
    # Opened by definitive structural evidence (a GPU gone from its exporter's page), which
    # fires at once and pages, as a failure XID does (loop/alerts.py, loop/policy.py).
    definitive: bool = False


@dataclass(frozen=True, slots=True)
class SignalScore:
    """One signal's fused score on one node (and GPU; None for node-level signals)."""

    node: str
    gpu: str | None
    signal: str
    score: float


@dataclass(frozen=True, slots=True)
class Incident:
    """A cluster-wide (common-mode) movement: many nodes moving together on one signal."""

    start: float
    end: float | None
    signal: str
    nodes_affected: int
    nodes_total: int


@dataclass(frozen=True, slots=True)
class ColumnLayout:
    """Per signal column: which signal it is, which entity it belongs to, its peer groups.

    All arrays have one entry per signal column.
    - ``signal``: id of the signal kind (index into ``signal_names``), e.g. "gpu_temp".
    - ``node``: node id (index into ``node_names``).
    - ``gpu``: GPU id within the node as an int, or -1 for node-level columns.
    - ``cohort``: cohort id of the column's node (nodes compared with each other).
    - ``direction``: +1 only increases are anomalous, -1 only decreases, 0 both.
    - ``resolution``: the step the column's values are rounded to (0: none; None: no column
      has one), so a scorer can tell a one-step move from a real one.
    - ``team``: id of the workload the column's GPU runs (its job or pod; GPU peers are the
      GPUs of one node and one team); None: one team everywhere.
    """

    signal: IntArray
    node: IntArray
    gpu: IntArray
    cohort: IntArray
    direction: IntArray
    signal_names: tuple[str, ...]
    node_names: tuple[str, ...]
    resolution: FloatArray | None = None
    team: IntArray | None = None

    def __len__(self) -> int:
        return int(self.signal.shape[0])

    def subset(self, columns: IntArray) -> ColumnLayout:
        """The layout of ``columns`` only (ids and names unchanged), in the given order."""
        return ColumnLayout(
            signal=self.signal[columns],
            node=self.node[columns],
            gpu=self.gpu[columns],
            cohort=self.cohort[columns],
            direction=self.direction[columns],
            signal_names=self.signal_names,
            node_names=self.node_names,
            resolution=None if self.resolution is None else self.resolution[columns],
            team=None if self.team is None else self.team[columns],
        )
