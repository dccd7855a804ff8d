"""The simulated cluster: a fixed series list, one value vector per tick, and ground truth.

Series order is fixed at construction: every DCGM field (metric-major, then node, then GPU),
then the windowed XID counts (``dcgm_fields="all"``: one series per GPU and XID that GPU will
raise), then the node-exporter families (family-major, then node, then label set). Labels are
what Prometheus would store (the exporter's labels plus ``instance`` and ``job``), sorted as
model.Labels requires. Kubernetes pod labels change with the job a GPU runs, so they are not
part of a series' labels: the exposition pages add them per tick, and so do dumps and
simulated replays where they decide GPU peers (``followed_pods``: the shared nodes' GPUs,
``Scenario.shared_nodes``, and every GPU with ``Scenario.pod_per_gpu``).

``frames()`` yields (unix time, values) per tick, values aligned to ``series()``; NaN means
"not exposed this tick" (a GPU that fell off the bus, a windowed count outside its window).
Each tick is a handful of numpy operations per metric family, never a loop over series.
"""

from __future__ import annotations

import math
import os
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import ConfigError
from ..model import FloatArray, IntArray, JobAttempt, Labels, XidEvent
from .catalog import NODE_FAMILIES, XID_COUNT_FIELD, dcgm_fields
from .failures import FailureEffects, PlannedFailure, plan_failures
from .gpu import GpuDrive, GpuModel
from .host import HostModel
from .jobs import job_attempts
from .pages import PageFamily, node_layout, render
from .relabel import RunLabels
from .scenario import Scenario
from .trace import DEFAULT_RATES, FAULT_TRACE, TraceRates, derive_rates
from .workload import Workload, build_workload, gpu_phase, node_jobs

XID_FIELD = "DCGM_FI_DEV_XID_ERRORS"
XID_WINDOW_S = 300.0  # dcgm-exporter's default xid-count window (window_size_in_ms)
_PCI_BUS = ("18", "2A", "3A", "5D", "9A", "AB", "BA", "DB")  # HGX B200 GPU slots


def resolve_rates(setting: str | None, environ: Mapping[str, str] | None = None) -> TraceRates:
    """``None``: built-in constants; ``"auto"``: the trace $DETECTOR_FAULT_TRACE names, else
    the one shipped with the package (``FAULT_TRACE``); a path: that trace. A trace that cannot
    be read raises ConfigError naming it (and the variable, when it came from there)."""
    if setting is None:
        return DEFAULT_RATES
    if setting != "auto":
        return derive_rates(Path(setting))
    env = (os.environ if environ is None else environ).get("DETECTOR_FAULT_TRACE")
    if not env:
        return derive_rates(FAULT_TRACE)
    try:
        return derive_rates(Path(env))
    except ConfigError as exc:
        raise ConfigError(f"DETECTOR_FAULT_TRACE: {exc}") from exc


@dataclass(frozen=True, slots=True)
class Family:
    """One metric family: its columns and, per column, node index, GPU ("" for node-level)
    and the exporter-side label text (no braces, no instance/job) in wire order."""

    name: str
    kind: str
    help: str
    exporter: str  # "dcgm" or "node"
    columns: IntArray
    nodes: IntArray
    gpus: tuple[str, ...]
    wire: tuple[str, ...]


class SimulatedCluster:
    """See the module docstring. Deterministic for a given Scenario (seed included)."""

    def __init__(self, scenario: Scenario) -> None:
        sc = self.scenario = scenario
        seeds = np.random.SeedSequence(sc.seed).spawn(5)
        streams = [np.random.default_rng(s) for s in seeds]
        static, plan, work, self._tick_seed = streams[0], streams[1], streams[2], seeds[3]
        self.rates = resolve_rates(sc.fault_trace)
        self.failures: list[PlannedFailure] = plan_failures(sc, self.rates, plan)
        self.workload: Workload = build_workload(sc, self.failures, work)
        failing = {f.node for f in self.failures}
        calm = np.array([n for n in range(sc.nodes) if n not in failing], dtype=np.int64)
        count = min(sc.noisy_nodes, len(calm))
        self.noisy_nodes = np.sort(streams[4].choice(calm, count, replace=False)).astype(np.int64)
        self._static = static
        self._events = self._build_events(streams[4])
        self._build_series(static)
        self._node_index = {sc.node_name(n): n for n in range(sc.nodes)}
        self._layouts: dict[int, list[PageFamily]] = {}

    # -- ground truth ---------------------------------------------------------------------
    def _build_events(self, rng: np.random.Generator) -> list[XidEvent]:
        sc, events = self.scenario, []
        for f in self.failures:
            for offset, xid in f.xids:
                events.append(
                    XidEvent(
                        sc.start + f.time + offset,
                        sc.node_name(f.node),
                        str(f.gpu),
                        xid,
                        sc.start + f.repair_end,
                        "simulator",
                    )
                )
        if sc.xid45_on_teardown:
            for td in self.workload.teardowns:
                for node in td.nodes:
                    for gpu in range(sc.gpus):
                        if (node, gpu) != td.skip:
                            at = sc.start + td.time + float(rng.uniform(0.0, 20.0))
                            events.append(
                                XidEvent(at, sc.node_name(node), str(gpu), 45, None, "simulator")
                            )
        return sorted(events, key=lambda e: (e.time, e.node, e.gpu or "", e.xid))

    def events(self) -> list[XidEvent]:
        """Every XID the cluster raises (failures and XID 45 teardown floods), by time."""
        return list(self._events)

    def job_attempts(self) -> list[JobAttempt]:
        """Every job run as an attempt of a session (sim/jobs.py): the job-attempts file."""
        return job_attempts(self.scenario, self.workload)

    # -- series ---------------------------------------------------------------------------
    def _build_series(self, rng: np.random.Generator) -> None:
        sc = self.scenario
        n_nodes, n_gpus = sc.nodes, sc.gpus
        uuids = [
            [f"GPU-{uuid.UUID(bytes=rng.bytes(16), version=4)}" for _ in range(n_gpus)]
            for _ in range(n_nodes)
        ]
        gpu_wire: list[str] = []
        gpu_ident: list[Labels] = []
        for n in range(n_nodes):
            host = sc.node_name(n)
            for g in range(n_gpus):
                pairs = (
                    ("gpu", str(g)),
                    ("UUID", uuids[n][g]),
                    ("pci_bus_id", f"00000000:{_PCI_BUS[g % 8]}:00.0"),
                    ("device", f"nvidia{g}"),
                    ("modelName", sc.model_name),
                    (sc.hostname_label, host),
                    ("DCGM_FI_DRIVER_VERSION", sc.driver_version),
                )
                gpu_wire.append(",".join(f'{k}="{v}"' for k, v in pairs))
                gpu_ident.append((*pairs, ("instance", f"{host}:9400"), ("job", "dcgm-exporter")))
        node_idx = np.repeat(np.arange(n_nodes), n_gpus)
        gpu_names = tuple(str(g) for g in range(n_gpus)) * n_nodes
        self._dcgm_names = [name for name, _, _ in dcgm_fields(sc.dcgm_fields)]
        families: list[Family] = []
        series: list[tuple[str, Labels]] = []
        for name, kind, help_text in dcgm_fields(sc.dcgm_fields):
            cols = np.arange(len(series), len(series) + len(gpu_ident))
            families.append(
                Family(name, kind, help_text, "dcgm", cols, node_idx, gpu_names, tuple(gpu_wire))
            )
            series.extend((name, tuple(sorted(lab))) for lab in gpu_ident)
        self._gpu_cols = len(series)
        pairs_seen = sorted({(int(e.gpu or 0), e.xid, e.node) for e in self._events})
        by_name = {sc.node_name(n): n for n in range(n_nodes)}
        pair_keys = sorted({(by_name[node], gpu, xid) for gpu, xid, node in pairs_seen})
        if sc.dcgm_fields != "all":
            pair_keys = []
        self._pairs = np.array(pair_keys, dtype=np.int64).reshape(-1, 3)
        if pair_keys:
            extra = ',window_size_in_ms="300000",xid="{}"'
            wire = tuple(gpu_wire[n * n_gpus + g] + extra.format(x) for n, g, x in pair_keys)
            cols = np.arange(len(series), len(series) + len(pair_keys))
            families.append(
                Family(
                    XID_COUNT_FIELD,
                    "counter",
                    "reported XIDs during last window",
                    "dcgm",
                    cols,
                    self._pairs[:, 0].copy(),
                    tuple(str(g) for _, g, _ in pair_keys),
                    wire,
                )
            )
            for n, g, x in pair_keys:
                lab = gpu_ident[n * n_gpus + g] + (("window_size_in_ms", "300000"), ("xid", str(x)))
                series.append((XID_COUNT_FIELD, tuple(sorted(lab))))
        self._node_views: list[tuple[str, int, int]] = []
        label = sc.job_label  # a target label, as relabelling adds it: not on the wire
        jobs = node_jobs(sc)
        job_of: dict[int, Labels] = {}
        if label is not None and not sc.job_label_runs:  # else RunLabels adds it per run
            job_of = {n: ((label, job),) for n, job in jobs.items()}
        for fam in NODE_FAMILIES:
            sets = len(fam.label_sets)
            start = len(series)
            wires, nodes = [], []
            for n in range(n_nodes):
                inst: Labels = (("instance", f"{sc.node_name(n)}:9100"), ("job", "node-exporter"))
                inst += job_of.get(n, ())
                for lab in fam.label_sets:
                    series.append((fam.name, tuple(sorted(lab + inst))))
                    wires.append(",".join(f'{k}="{v}"' for k, v in lab))
                    nodes.append(n)
            cols = np.arange(start, len(series))
            families.append(
                Family(
                    fam.name,
                    fam.kind,
                    fam.help,
                    "node",
                    cols,
                    np.array(nodes, dtype=np.int64),
                    ("",) * len(cols),
                    tuple(wires),
                )
            )
            self._node_views.append((fam.name, start, sets))
        self._series = series
        self.families = families
        self._relabel: RunLabels | None = None
        if label is not None and sc.job_label_runs:
            node_of = np.empty(len(series), dtype=np.int64)
            for family in families:
                node_of[family.columns] = family.nodes
            self._relabel = RunLabels.build(series, node_of, label, jobs, self.workload.run)

    def series(self) -> list[tuple[str, Labels]]:
        """Every series the cluster can emit, in the fixed column order of ``frames()``."""
        return list(self._series if self._relabel is None else self._relabel.series)

    # -- frames ---------------------------------------------------------------------------
    def frames(self) -> Iterator[tuple[float, FloatArray]]:
        """(unix time, values aligned to series()) for every tick; NaN = not exposed."""
        sc, w = self.scenario, self.workload
        rng = np.random.default_rng(self._tick_seed)  # same stream on every call
        gpu = GpuModel(sc, np.random.default_rng([sc.seed, 11]), self.noisy_nodes)
        host = HostModel(sc, np.random.default_rng([sc.seed, 12]), self.noisy_nodes)
        drive = GpuDrive.zeros(sc.nodes, sc.gpus)
        effects = FailureEffects(self.failures, sc)
        xid_state = np.zeros((sc.nodes, sc.gpus))
        # A repaired GPU comes back from a reboot or reset, where DCGM's last-XID field starts
        # at 0: kept at the failure's code, a GPU that had fallen off the bus would return
        # showing it again, read as a new XID (a second failure) at its repair's end.
        repaired: dict[int, list[tuple[int, int]]] = {}
        for f in self.failures:
            repaired.setdefault(math.ceil(f.repair_end / sc.step_s), []).append((f.node, f.gpu))
        by_name = {sc.node_name(n): n for n in range(sc.nodes)}
        ev = self._events
        ev_tick = np.ceil((np.array([e.time for e in ev]) - sc.start) / sc.step_s).astype(np.int64)
        ev_node = np.array([by_name[e.node] for e in ev], dtype=np.int64)
        ev_gpu = np.array([int(e.gpu or 0) for e in ev], dtype=np.int64)
        ev_xid = np.array([e.xid for e in ev], dtype=np.float64)
        pair_of = {(int(a), int(b), int(c)): i for i, (a, b, c) in enumerate(self._pairs)}
        ev_pair = np.array(
            [
                pair_of.get((n, g, int(x)), -1)
                for n, g, x in zip(ev_node, ev_gpu, ev_xid, strict=True)
            ],
            dtype=np.int64,
        )
        ev_time = np.array([e.time for e in ev])
        names, total, n_pairs = self._dcgm_names, len(self._series), len(self._pairs)
        xid_row = names.index(XID_FIELD) if XID_FIELD in names else -1
        host_start = self._node_views[0][1] if self._node_views else total
        host_shapes = [(sc.nodes, sets) for _, _, sets in self._node_views]
        # its own stream: a scenario without losses draws exactly what it drew before
        losses = np.random.default_rng([sc.seed, 13])
        # and one for dcgm-exporter's collection clock (a per-node phase, stale scrapes)
        cached = sc.dcgm_collect_every > 1 or sc.dcgm_stale_share > 0
        clock = np.random.default_rng([sc.seed, 14])
        phase = clock.integers(0, sc.dcgm_collect_every, sc.nodes) if cached else None
        cache: FloatArray | None = None
        cursor = 0
        for k in range(sc.ticks):
            t_rel = k * sc.step_s
            t_abs = sc.start + t_rel
            drive.reset()
            effects.apply(drive, t_rel, rng)
            jobs = w.job[:, k]
            wobble = w.job_wobble[jobs, k]
            if sc.shared_nodes:  # side GPUs run jobs of their own
                gpu_phases, gpu_wobble = gpu_phase(w, k, sc.gpus, sc.shared_gpus)
                gv = gpu.step(t_abs, gpu_phases, gpu_wobble, drive, rng)
            else:
                gv = gpu.step(t_abs, w.phase[:, k], wobble, drive, rng)
            hv = host.step(
                t_abs, w.phase[:, k], wobble, float(w.nfs_write[k]), float(w.nfs_read[k]), rng
            )
            for n, g in repaired.get(k, ()):
                xid_state[n, g] = 0.0
            end = int(np.searchsorted(ev_tick, k, side="right"))
            if end > cursor:  # the sticky gauge keeps the last XID seen
                xid_state[ev_node[cursor:end], ev_gpu[cursor:end]] = ev_xid[cursor:end]
                cursor = end
            out = np.empty(total)
            block = out[: self._gpu_cols].reshape(len(names), sc.nodes, sc.gpus)
            rows = [xid_state if row == xid_row else gv[name] for row, name in enumerate(names)]
            if rows:  # one copy instead of one per field
                np.stack(rows, out=block)
            block[:, drive.vanished] = np.nan
            if n_pairs:
                hits = ev_pair[:end][ev_time[:end] > t_abs - XID_WINDOW_S]
                counts = np.bincount(hits[hits >= 0], minlength=n_pairs).astype(np.float64)
                counts[counts == 0] = np.nan
                counts[drive.vanished[self._pairs[:, 0], self._pairs[:, 1]]] = np.nan
                out[self._gpu_cols : self._gpu_cols + n_pairs] = counts
            host_values = [hv[name] for name, _, _ in self._node_views]
            if all(v.shape == shape for v, shape in zip(host_values, host_shapes, strict=True)):
                # the families are contiguous and in order: one copy instead of one each
                np.concatenate(host_values, axis=None, out=out[host_start:])
            else:
                for (_, start, sets), v in zip(self._node_views, host_values, strict=True):
                    out[start : start + sc.nodes * sets].reshape(sc.nodes, sets)[...] = v
            if phase is not None:
                cache = self._serve_dcgm_cache(out, k, cache, phase, clock)
            if sc.scrape_loss > 0 or sc.node_scrape_every > 1:
                lost = losses.random((2, sc.nodes)) < sc.scrape_loss
                lost[1] |= k % sc.node_scrape_every != 0  # not a node-exporter tick
                self._lose_scrapes(out, lost)
            yield t_abs, (out if self._relabel is None else self._relabel.frame(k, out))

    def _serve_dcgm_cache(
        self,
        out: FloatArray,
        k: int,
        cache: FloatArray | None,
        phase: IntArray,
        rng: np.random.Generator,
    ) -> FloatArray:
        """dcgm-exporter serves its last collection: replace, per node, this tick's DCGM values
        (fields and windowed XID counts) in ``out`` by ``cache`` when the node collects on
        another tick or the scrape lands before this tick's collection. Returns the new cache,
        every node's latest collection. What a collection saw is what it holds: a GPU that fell
        off the bus is NaN from the first collection after it vanished, and stays NaN."""
        sc = self.scenario
        stale = rng.random(sc.nodes) < sc.dcgm_stale_share
        current = out[: self._gpu_cols + len(self._pairs)].copy()
        if cache is None:  # the exporter collected once before the first scrape
            return current
        collects = (k - phase) % sc.dcgm_collect_every == 0
        self._dcgm_where(current, cache, ~collects)  # -> the new cache
        self._dcgm_where(out, cache, ~collects | stale)
        return current

    def _dcgm_where(self, dst: FloatArray, src: FloatArray, nodes: np.ndarray) -> None:
        """Copy the DCGM values of the nodes in mask ``nodes`` from ``src`` into ``dst``
        (both laid out as ``out``'s leading DCGM block)."""
        mask = self._dcgm_mask(nodes)
        np.copyto(dst[: mask.shape[0]], src[: mask.shape[0]], where=mask)

    def _dcgm_mask(self, nodes: np.ndarray) -> np.ndarray:
        """Over ``out``'s leading DCGM block (fields x nodes x GPUs, then the windowed XID
        counts): the values of the nodes in mask ``nodes``."""
        sc = self.scenario
        fields = self._gpu_cols // (sc.nodes * sc.gpus)
        block = np.broadcast_to(nodes[None, :, None], (fields, sc.nodes, sc.gpus)).ravel()
        pairs = nodes[self._pairs[:, 0]] if len(self._pairs) else np.zeros(0, dtype=bool)
        return np.concatenate([block, pairs])

    def _lose_scrapes(self, out: FloatArray, lost: np.ndarray) -> None:
        """Blank the series of scrapes lost or not due: ``lost[0]`` per node its dcgm-exporter's
        (the windowed XID counts too), ``lost[1]`` its node-exporter's."""
        sc = self.scenario
        mask = self._dcgm_mask(lost[0])
        out[: mask.shape[0]][mask] = np.nan
        for _, start, sets in self._node_views:
            out[start : start + sc.nodes * sets].reshape(sc.nodes, sets)[lost[1]] = np.nan

    # -- exposition -----------------------------------------------------------------------
    def exposition(self, node: str, t: float, values: FloatArray) -> tuple[str, str]:
        """(dcgm-exporter page, node-exporter page) of ``node`` at unix time ``t``."""
        n = self.node_index(node)
        layout = self._layouts.get(n)
        if layout is None:
            fams = self.families
            layout = self._layouts[n] = node_layout(
                n,
                [(f.name, f.kind, f.help, f.exporter) for f in fams],
                [f.columns for f in fams],
                [f.nodes for f in fams],
                [f.wire for f in fams],
                [f.gpus for f in fams],
            )
        return render(layout, values, self.pod_labels(n, t))

    def node_index(self, node: str) -> int:
        """Index of a node name (``node-01`` -> 0); KeyError for an unknown name."""
        index = self._node_index.get(node)
        if index is None:
            raise KeyError(f"unknown node {node!r}")
        return index

    def tick_of(self, t: float) -> int:
        """The tick whose values hold at unix time ``t`` (clamped to the scenario)."""
        sc = self.scenario
        return min(sc.ticks - 1, max(0, round((t - sc.start) / sc.step_s)))

    def gpu_pods(self, node: int, k: int) -> list[str | None]:
        """Per GPU of ``node`` at tick ``k``: the pod it runs, None when idle or without
        Kubernetes labels. A node's job runs one pod on all its GPUs (one per GPU, a rank each,
        with ``Scenario.pod_per_gpu``), but on a shared node (``Scenario.shared_nodes``) the
        last ``shared_gpus`` run side jobs' pods."""
        sc, w = self.scenario, self.workload
        if not sc.kubernetes_labels:
            return [None] * sc.gpus
        job, rank = int(w.job[node, k]), int(w.rank[node, k])
        if job < 0:
            pods: list[str | None] = [None] * sc.gpus
        elif sc.pod_per_gpu:  # a rank per GPU
            pods = [f"{w.job_names[job]}-worker-{rank * sc.gpus + g}" for g in range(sc.gpus)]
        else:
            pods = [f"{w.job_names[job]}-worker-{rank}"] * sc.gpus
        side = np.flatnonzero(w.shared == node)
        if side.size:
            run = int(w.side_run[side[0], k])
            pod = f"batch-{sc.node_name(node)}-{run}" if run else None
            pods[sc.gpus - sc.shared_gpus :] = [pod] * sc.shared_gpus
        return pods

    def pod_labels(self, node: int, t: float) -> list[str]:
        """Per GPU of ``node``: the wire text of its Kubernetes labels at ``t`` ("" if idle)."""
        return [pod_wire(pod) for pod in self.gpu_pods(node, self.tick_of(t))]

    def _pod_nodes(self) -> list[int]:
        """The nodes whose GPUs' pods a dump and a replay follow: the side-job nodes'
        (``Scenario.shared_nodes``), every node with a pod per GPU (``Scenario.pod_per_gpu``);
        none without either."""
        sc = self.scenario
        if sc.pod_per_gpu and sc.kubernetes_labels:
            return list(range(sc.nodes))
        return [int(n) for n in self.workload.shared]

    def pod_gpu_series(self) -> dict[tuple[int, int], list[int]]:
        """(node, GPU) -> its DCGM series columns, for the GPUs whose pods a dump and a replay
        follow (``_pod_nodes``)."""
        sc = self.scenario
        rows = len(self._dcgm_names)
        return {
            (n, g): [r * sc.nodes * sc.gpus + n * sc.gpus + g for r in range(rows)]
            for n in self._pod_nodes()
            for g in range(sc.gpus)
        }

    def followed_pods(self, k: int) -> dict[tuple[int, int], str | None]:
        """(node, GPU) -> the pod it runs at tick ``k``, for the GPUs of ``pod_gpu_series``."""
        return {(n, g): pod for n in self._pod_nodes() for g, pod in enumerate(self.gpu_pods(n, k))}


def pod_pairs(pod: str | None) -> Labels:
    """The Kubernetes labels dcgm-exporter adds to the series of a GPU that runs ``pod``."""
    if pod is None:
        return ()
    namespace = "batch" if pod.startswith("batch-") else "training"
    return (("container", "pytorch"), ("namespace", namespace), ("pod", pod))


def with_pod(labels: Labels, pod: str | None) -> Labels:
    """A GPU series' labels (sorted) as they read while the GPU runs ``pod``."""
    return tuple(sorted((*labels, *pod_pairs(pod))))


def pod_wire(pod: str | None) -> str:
    """``pod_pairs`` as wire text appended to a DCGM series' labels."""
    return "".join(f',{key}="{value}"' for key, value in pod_pairs(pod))
