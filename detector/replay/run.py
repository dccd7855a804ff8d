"""``detector replay``: recorded data (or the built-in simulated cluster) through the shared tick
loop (``detector.loop.TickLoop``), on the data's own clock, as fast as the machine allows; then
a report.

The replay is ``run`` on another clock: the same loop decides alerts, XID forcing, the alert
policy and cluster incidents. XIDs of an events file join the loop at their time as the kernel
log's do in ``run`` (forcing their node's alert); the report counts the alerts ``run`` would
have notified Alertmanager of. Also the engine behind ``detector calibrate``: with
``record_scores`` it keeps a ``Recording`` so thresholds can be tried without re-scoring.
"""

from __future__ import annotations

import csv
import gzip
import time as wallclock
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO

import numpy as np

from ..diagnosis import Diagnosis, DiagnosisModel
from ..errors import DumpError, EventsError
from ..evaluation import AccountingSnapshot, Evaluation, evaluate
from ..ingest import DumpStats, load_array, load_events, place_events, read_dump
from ..loop import (
    ClusterIncident,
    Decision,
    Decisions,
    EpisodeParams,
    Notification,
    Recording,
    TickLoop,
)
from ..model import Alert, FloatArray, Frame, Labels, SampleBatch, XidEvent
from ..pipeline import TickResult, dedupe_episodes, is_failure
from ..series import SeriesIndex, frames_from_batches, normalize
from ..sim import SimulatedCluster, with_pod
from .progress import ProgressSink


@dataclass
class ReplayResult:
    """Everything a replay produced."""

    start: float
    end: float
    ticks: int
    series: int
    alerts: list[Alert]
    failures: list[XidEvent]  # failure XIDs (events file + dump), deduped
    all_xids: list[XidEvent]  # every XID episode seen, failures or not
    evaluation: Evaluation
    wall_s: float
    node_names: tuple[str, ...] = ()
    times: FloatArray = field(default_factory=lambda: np.zeros(0))
    node_scores: FloatArray = field(default_factory=lambda: np.zeros((0, 0)))
    xid_held: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), dtype=bool))
    # per tick and node: id in signal_names of the strongest signal, -1 where none (recorded)
    lead_signal: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), dtype=np.int32))
    signal_names: tuple[str, ...] = ()
    threshold: float = float("nan")  # the alert threshold the pipeline ran with
    signal_weights: dict[str, float] = field(default_factory=dict)  # calibrated multipliers
    dropped: int = 0  # series labels.drop kept out of the index
    pod_named: list[str] = field(default_factory=list)  # nodes named by a dcgm-exporter pod
    # the rules' named, scored signals the data fed, and those it did not (in rules order)
    signals_found: tuple[str, ...] = ()
    signals_missing: tuple[str, ...] = ()
    # nodes whose GPUs ran more than one workload at once (GPU peers by workload)
    split_nodes: tuple[str, ...] = ()
    # nodes whose unlabelled GPUs co-movement told apart (labels.gpu_workload_comovement)
    inferred_split_nodes: tuple[str, ...] = ()
    # nodes with an unlabelled GPU co-movement judged alone (no GPU peers)
    alone_nodes: tuple[str, ...] = ()
    # set when nodes running different jobs were judged against each other (no cohort labels)
    cohort_advice: str = ""
    notifications: list[Notification] = field(default_factory=list)  # what Alertmanager got
    actions: list[Decision] = field(default_factory=list)  # node exclusions run would decide
    accounting: AccountingSnapshot | None = None  # the loop's live accounting at the end
    # with record_scores: the ticks as the decisions saw them, and decisions to fork from
    recording: Recording | None = None
    decisions: Decisions | None = None
    # each alert's diagnosis when it started (what its page said), by (node, start)
    diagnoses: dict[tuple[str, float], Diagnosis] = field(default_factory=dict)
    diagnosis_model: DiagnosisModel | None = None
    # the loop's cluster incidents (GPUClusterIncident) with their bottleneck, the one still
    # open at the end diagnosed at the last tick
    storms: list[ClusterIncident] = field(default_factory=list)

    @property
    def incidents(self) -> int:
        """Cluster incidents the loop's policy opened (the report's count: its storm table's
        rows)."""
        return len(self.storms)


class ScoresCsv:
    """``--scores-out``: time,node,gpu,score for every entity and tick (node rows: empty gpu)."""

    def __init__(self, path: Path) -> None:
        # Lives across many ticks; closed by close().
        if path.suffix == ".gz":
            self._fh: IO[str] = gzip.open(path, "wt", newline="")  # noqa: SIM115
        else:
            self._fh = path.open("w", newline="")
        self._writer = csv.writer(self._fh)
        self._writer.writerow(["time", "node", "gpu", "score"])

    def add(self, tick: TickResult) -> None:
        t = f"{tick.time:.3f}"
        rows: list[tuple[str, str, str, str]] = []
        for node, score in zip(tick.node_names, tick.node_score.tolist(), strict=False):
            if score == score:  # not NaN
                rows.append((t, node, "", f"{score:.4f}"))
        for node_id, gpu, score in zip(
            tick.gpu_node.tolist(), tick.gpu_label, tick.gpu_score.tolist(), strict=False
        ):
            if score == score:
                rows.append((t, tick.node_names[node_id], gpu, f"{score:.4f}"))
        self._writer.writerows(rows)

    def close(self) -> None:
        self._fh.close()


def dump_frames(
    paths: Sequence[Path],
    index: SeriesIndex,
    step_s: float | None,
    *,
    on_span: Callable[[float, float], None] | None = None,
) -> Iterator[Frame]:
    """Frames of a recorded dump (any supported format), in time order. ``on_span(first,
    last)`` is called with the dump's sample time range as soon as the reader knows it (a
    cached dump, which is the default: before the first frame); never if it cannot know."""
    stats = DumpStats()
    batches = read_dump(list(paths), index, stats=stats)
    if on_span is not None:
        batches = _announce_span(batches, stats, on_span)
    return frames_from_batches(batches, lambda: len(index), step_s)


def _announce_span(
    batches: Iterator[SampleBatch], stats: DumpStats, on_span: Callable[[float, float], None]
) -> Iterator[SampleBatch]:
    # Once the first batch is out the dump is parsed; if it went through the cache, the sorted
    # times lie on disk (memory-mapped), so first and last cost two reads, not a second pass.
    for i, batch in enumerate(batches):
        if i == 0 and stats.cache_dir is not None:
            times = load_array(stats.cache_dir / "times.npy")
            if times.shape[0]:
                on_span(float(times[0]), float(times[-1]))
        yield batch


def simulated_frames(cluster: SimulatedCluster, index: SeriesIndex) -> Iterator[Frame]:
    """Frames of the simulated cluster, its series placed into ``index`` columns. On a shared
    node (``Scenario.shared_nodes``), and on every node with a pod per GPU
    (``Scenario.pod_per_gpu``), each GPU's pod is scheduled on the index as it changes, as a
    dump of the same cluster carries it (``SeriesIndex.schedule_context``)."""
    series = cluster.series()
    columns = np.array([index.add(name, labels) for name, labels in series], dtype=np.int64)
    pods = _SimulatedPods(cluster, series, columns, index)
    # A fresh index maps the cluster's series onto columns 0..n-1 in order; the simulator's
    # vectors (a new array every tick) are then already the frames.
    identity = bool(np.array_equal(columns, np.arange(columns.shape[0])))
    for k, (t, values) in enumerate(cluster.frames()):
        pods.schedule(k, t)
        if identity and len(index) == values.shape[0]:
            yield Frame(t, values)
            continue
        frame = np.full(len(index), np.nan)
        kept = columns >= 0  # -1: a series labels.drop keeps out
        frame[columns[kept]] = values[kept]
        yield Frame(t, frame)


class _SimulatedPods:
    """The pods of the GPUs a replay follows (``SimulatedCluster.followed_pods``: the shared
    nodes', every node's with a pod per GPU), scheduled on the index when they change: the
    context each of the GPU's series then carries."""

    def __init__(
        self,
        cluster: SimulatedCluster,
        series: Sequence[tuple[str, Labels]],
        columns: np.ndarray,
        index: SeriesIndex,
    ) -> None:
        self.cluster, self.series, self.columns, self.index = cluster, series, columns, index
        self.followed = cluster.pod_gpu_series()
        self.last: dict[tuple[int, int], str | None] = {}

    def schedule(self, k: int, t: float) -> None:
        for where, pod in self.cluster.followed_pods(k).items():
            if where in self.last and self.last[where] == pod:
                continue
            self.last[where] = pod
            for col in self.followed[where]:
                column = int(self.columns[col])
                if column < 0:
                    continue
                name, labels = self.series[col]
                spelled = with_pod(labels, pod)
                context = normalize(name, spelled, self.index.rules, self.index.hosts)[4]
                self.index.schedule_context(t, column, context)


def run_replay(
    loop: TickLoop,
    frames: Iterator[Frame],
    *,
    events: Sequence[XidEvent] = (),
    horizon_s: float = 3600.0,
    grace_s: float = 300.0,
    scores_out: Path | None = None,
    record_scores: bool = False,
    progress: ProgressSink | None = None,
    expected_span: tuple[float, float] | None = None,
    source: str = "replay",
) -> ReplayResult:
    """Drive ``frames`` through ``loop``; evaluate the notified alerts against ``events`` +
    the data's XIDs. ``events`` join the loop at their time (module docstring).
    ``progress`` hears every tick's time (and ``expected_span`` when given) and is closed
    whether the replay ends or is interrupted. Fewer than two ticks span no time to evaluate:
    DumpError naming ``source`` (the dump files, or the simulated cluster). When the loop
    diagnoses (a diagnosis model: ``TickLoop.from_config`` builds one), the report keeps each
    alert's diagnosis the loop decided when it started (``ReplayResult.diagnoses``). The
    loop's cluster incidents, with their bottlenecks, are ``ReplayResult.storms``."""
    began = wallclock.perf_counter()
    pipeline = loop.pipeline
    alerts: list[Alert] = []
    notes: list[Notification] = []
    actions: list[Decision] = []
    data_xids: list[XidEvent] = []
    recording = Recording() if record_scores else None
    diagnosis = loop.decisions.diagnosis
    diagnoses: dict[tuple[str, float], Diagnosis] = {}
    storms: list[ClusterIncident] = []
    writer = ScoresCsv(scores_out) if scores_out is not None else None
    feed = _EventFeed(events, pipeline.index, loop.decisions.alerts.xid_hold_s)
    start = end = float("nan")
    ticks = 0
    if progress is not None and expected_span is not None:
        progress.set_span(*expected_span)
    try:
        for frame in frames:
            tick = loop.step(frame, xids=feed.due(frame.time))
            if ticks == 0:
                start = tick.time
            end = tick.time
            ticks += 1
            alerts.extend(tick.ended_sent)
            notes.extend(tick.notifications)
            actions.extend(tick.actions)
            data_xids.extend(tick.scores.xids)
            if recording is not None:
                held = loop.decisions.alerts.held(tick.time, len(tick.scores.node_names))
                recording.add(tick, pipeline, held)
            diagnoses.update(tick.diagnoses)  # what the page said, when it went out
            storms.extend(tick.closed_incidents)
            if writer is not None:
                writer.add(tick.scores)
            if progress is not None:
                progress.update(tick.time)
        if progress is not None:
            progress.close(complete=True)
    finally:
        if progress is not None:  # interrupted: end the bar's line before any message
            progress.close()
        if writer is not None:
            writer.close()
    alerts.extend(loop.open_sent_alerts())
    still_open = loop.policy.open_incident(loop.decisions.storms)
    storms.extend([still_open] if still_open is not None else [])
    alerts.sort(key=lambda a: (a.start, a.node))
    catalog = pipeline.xid_catalog
    all_xids = dedupe_episodes([*feed.placed(events), *data_xids], catalog)
    failures = [ev for ev in all_xids if is_failure(ev, catalog)]
    if ticks < 2:
        when = wallclock.strftime("%Y-%m-%d %H:%M:%S UTC", wallclock.gmtime(start if ticks else 0))
        found = "no samples" if ticks == 0 else f"one tick of data (at {when})"
        raise DumpError(f"{source}: {found}; a replay needs samples at two times at least")
    evaluation = evaluate(
        alerts,
        all_xids,
        start=start,
        end=end,
        horizon_s=horizon_s,
        grace_s=grace_s,
        is_failure=set(failures).__contains__,  # as evaluate_at_threshold
    )
    teams = pipeline.teams()
    result = ReplayResult(
        start=start,
        end=end,
        ticks=ticks,
        series=len(pipeline.index),
        dropped=pipeline.index.dropped,
        pod_named=list(pipeline.index.pod_named),
        alerts=alerts,
        failures=failures,
        all_xids=all_xids,
        evaluation=evaluation,
        wall_s=wallclock.perf_counter() - began,
        node_names=pipeline.node_names,
        threshold=loop.threshold,
        signal_weights=dict(pipeline.params.signal_weights),
        split_nodes=teams.split_nodes,
        inferred_split_nodes=teams.inferred_split_nodes,
        alone_nodes=teams.alone_nodes,
        cohort_advice=teams.cohort_advice,
        notifications=notes,
        actions=actions,
        accounting=loop.accounting.snapshot(end),
        diagnoses=diagnoses,
        diagnosis_model=diagnosis,
        storms=storms,
    )
    result.signals_found, result.signals_missing = pipeline.signal_coverage()
    if recording is not None:
        result.recording, result.decisions = recording, loop.decisions
        result.times, result.node_scores, result.xid_held, result.lead_signal = recording.matrices()
        result.signal_names = tuple(recording.signal_names)
    return result


class _EventFeed:
    """An events file's XIDs, handed to the loop at their time as ``run`` gets the kernel
    log's: each at the first tick at or after it, unless that tick comes later than
    ``hold_s`` after it (a gap in the data: its alert would have ended by then). Events name
    nodes as the data does once mapped (host names, GPU UUIDs and PCI ids: ``place``)."""

    def __init__(self, events: Sequence[XidEvent], index: SeriesIndex, hold_s: float) -> None:
        self._events = sorted(events, key=lambda e: e.time)
        self._next = 0
        self._index = index
        self._hold_s = hold_s
        self._last = -np.inf

    def due(self, t: float) -> list[XidEvent]:
        events, i = self._events, self._next
        out: list[XidEvent] = []
        while i < len(events) and events[i].time <= t:
            if events[i].time > self._last and t - events[i].time <= self._hold_s:
                out.append(events[i])
            i += 1
        self._next, self._last = i, t
        return self.placed(out) if out else out

    def placed(self, events: Sequence[XidEvent]) -> list[XidEvent]:
        hosts = self._index.hosts  # events naming a node by its address: by its host name
        named = (
            [replace(ev, node=hosts.get(ev.node, ev.node)) for ev in events] if hosts else events
        )
        return place_events(named, self._index.infos)  # short host names, GPU UUIDs, PCI ids


def evaluate_at_threshold(
    result: ReplayResult, params: EpisodeParams, horizon_s: float, grace_s: float
) -> Evaluation:
    """The evaluation a replay recorded with ``record_scores`` would have had with other
    episode parameters: the loop's decisions re-run over the recording (no re-scoring)."""
    if result.recording is None or result.decisions is None:
        raise ValueError("the replay recorded no scores (record_scores=True needed)")
    decided = result.recording.decide(result.decisions.fresh(params))
    failures = set(result.failures)
    return evaluate(
        decided.alerts,
        result.all_xids,
        start=result.start,
        end=result.end,
        horizon_s=horizon_s,
        grace_s=grace_s,
        is_failure=failures.__contains__,
    )


def load_event_files(paths: Sequence[Path]) -> list[XidEvent]:
    """The events of every ``--events`` path; a directory is its visible files, sorted by
    name (not recursive), e.g. one kernel log per node named after it."""
    events: list[XidEvent] = []
    for path in paths:
        files = [path]
        if path.is_dir():
            files = sorted(p for p in path.iterdir() if p.is_file() and not p.name.startswith("."))
            if not files:
                raise EventsError(f"{path}: an events directory holding no file")
        for file in files:
            events.extend(load_events(file))
    return events
