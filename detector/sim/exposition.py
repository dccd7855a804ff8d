"""The simulated cluster written to files: OpenMetrics dump and events JSONL.

``write_dump`` writes the whole scenario as OpenMetrics text with per-sample timestamps in
seconds (the promtool backfill format: families not interleaved, each series' samples in time
order, ``# EOF``; labels as Prometheus stores them, with ``instance`` and ``job``, without the
per-tick pod labels) plus the ground-truth events as JSONL ({"time","node","gpu","xid","end"?}).
Frames go to a temporary memory-mapped matrix first, because OpenMetrics wants the dump
family-major while the simulator produces it tick-major.
"""

from __future__ import annotations

import json
import math
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import TextIO

import numpy as np

from ..model import XidEvent
from .cluster import Family, SimulatedCluster
from .pages import format_value
from .scenario import Scenario


def _openmetrics_header(fam: Family) -> tuple[str, str]:
    """(family name, type) as OpenMetrics wants them: a counter's samples must end in
    ``_total``; DCGM counters do not, so they are declared ``unknown`` (Prometheus stores
    both the same way)."""
    if fam.kind == "counter" and fam.name.endswith("_total"):
        return fam.name[: -len("_total")], "counter"
    if fam.kind == "counter":
        return fam.name, "unknown"
    return fam.name, fam.kind


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


def write_dump(scenario: Scenario, dump_path: Path | str, events_path: Path | str) -> int:
    """Simulate ``scenario`` into an OpenMetrics dump and an events JSONL; returns samples."""
    cluster = SimulatedCluster(scenario)
    dump_path, events_path = Path(dump_path), Path(events_path)
    ticks, width = scenario.ticks, len(cluster.series())
    times = np.empty(ticks)
    with tempfile.TemporaryFile(dir=dump_path.parent) as scratch:
        matrix = np.memmap(scratch, dtype=np.float64, mode="w+", shape=(ticks, width))
        for k, (t, values) in enumerate(cluster.frames()):
            times[k] = t
            matrix[k] = values
        stamps = [format_value(float(t)) for t in times]
        samples = 0
        with dump_path.open("w") as out:
            for fam in cluster.families:
                name, kind = _openmetrics_header(fam)
                out.write(f"# TYPE {name} {kind}\n# HELP {name} {fam.help}\n")
                for i, column in enumerate(fam.columns):
                    series = matrix[:, column]
                    inst = _instance(cluster, fam, i)
                    key = f"{fam.name}{{{fam.wire[i]}{',' if fam.wire[i] else ''}{inst}}}"
                    lines = [
                        f"{key} {format_value(float(v))} {stamps[k]}\n"
                        for k, v in enumerate(series)
                        if not math.isnan(v)
                    ]
                    out.writelines(lines)
                    samples += len(lines)
            out.write("# EOF\n")
        del matrix
    with events_path.open("w") as out:
        write_events(cluster.events(), out)
    return samples


def _instance(cluster: SimulatedCluster, fam: Family, i: int) -> str:
    host = cluster.scenario.node_name(int(fam.nodes[i]))
    port, job = ("9400", "dcgm-exporter") if fam.exporter == "dcgm" else ("9100", "node-exporter")
    return f'instance="{host}:{port}",job="{job}"'
