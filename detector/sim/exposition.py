"""The simulated cluster written to files: OpenMetrics dump and events JSONL.

``write_dump`` writes the whole scenario as OpenMetrics text with per-sample timestamps in
seconds through ingest's ``OpenMetricsWriter`` (the promtool backfill format; it reorders the
tick-major frames family-major with bounded memory). Labels are ``series()``'s, as Prometheus
stores them (with ``instance`` and ``job``, without the per-tick pod labels), except on shared
nodes (``Scenario.shared_nodes``) and with a pod per GPU (``Scenario.pod_per_gpu``), where the
GPUs' series carry the pod each GPU runs at each sample (``SimulatedCluster.pod_gpu_series``):
which GPUs are peers changes with it, and a replay follows it. The ground-truth
events go to JSONL ({"time","node","gpu","xid","end"?}, ARCHITECTURE.md); given a path, the
jobs' attempts go to the job-attempts JSONL (sim/jobs.py, ingest/jobs.py).

``counter_names`` spells the counters: as the simulated exporters do ("exporters":
dcgm-exporter's bare, node-exporter's with ``_total``), all bare ("bare": the dump a
pipeline that drops the suffix writes), or as strict OpenMetrics does ("openmetrics":
``# TYPE X counter`` then ``X_total`` samples, dcgm's too). A replay reads all three alike.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Literal, TextIO

import numpy as np

from ..ingest import OpenMetricsWriter, write_jobs
from ..model import Sample, XidEvent
from .cluster import SimulatedCluster, with_pod
from .scenario import Scenario


def write_events(events: Iterable[XidEvent], out: TextIO) -> int:
    """Events JSONL (ARCHITECTURE.md contract); returns the number of lines."""
    count = 0
    for e in events:
        record: dict[str, object] = {"time": e.time, "node": e.node, "gpu": e.gpu, "xid": e.xid}
        if e.end is not None:
            record["end"] = e.end
        out.write(json.dumps(record) + "\n")
        count += 1
    return count


CounterNames = Literal["exporters", "bare", "openmetrics"]


def write_dump(
    scenario: Scenario,
    dump_path: Path | str,
    events_path: Path | str,
    *,
    counter_names: CounterNames = "exporters",
    jobs_path: Path | None = None,
) -> int:
    """Simulate ``scenario`` into an OpenMetrics dump and an events JSONL; returns samples.
    ``counter_names``: how counters are spelled (module docstring); ``jobs_path``: also write
    the jobs' attempts there (the job-attempts file, sim/jobs.py)."""
    cluster = SimulatedCluster(scenario)
    series = cluster.series()
    types = {fam.name: fam.kind for fam in cluster.families}
    renamed: dict[str, str] = {}
    if counter_names == "bare":
        counters = [name for name, kind in types.items() if kind == "counter"]
        renamed = {name: name.removesuffix("_total") for name in counters}
        types.update(dict.fromkeys(renamed.values(), "counter"))
    with_pods = {c: where for where, cols in cluster.pod_gpu_series().items() for c in cols}
    samples = 0
    strict = counter_names == "openmetrics"
    with OpenMetricsWriter(Path(dump_path), types, total_suffix=strict) as writer:
        for k, (t, values) in enumerate(cluster.frames()):
            pods = cluster.followed_pods(k)
            for column in np.flatnonzero(~np.isnan(values)).tolist():
                name, labels = series[column]
                name = renamed.get(name, name)
                where = with_pods.get(column)
                if where is not None:
                    labels = with_pod(labels, pods[where])
                writer.add(Sample(name, labels, float(values[column]), t))
                samples += 1
    with Path(events_path).open("w") as out:
        write_events(cluster.events(), out)
    if jobs_path is not None:
        write_jobs(jobs_path, cluster.job_attempts())
    return samples
