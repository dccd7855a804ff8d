"""Failure rates, type mix and repair times derived from the InfiniteHBD fault trace.

The trace (``FAULT_TRACE``, shipped as package data in data/infinitehbd/ with its Apache-2.0
licence and a README naming the source) lists 584 fault start/end pairs on 400 GPU servers over
348 days, typed by Level/Class/Desc. It carries no telemetry, so the simulator uses it only for
*how often* each kind of failure happens, *on which servers* (repeat offenders) and *how long*
the server stays out (repair time).

``TRACE_KIND`` maps every trace description that shows up on a GPU node as an XID to one of the
simulator's failure kinds; descriptions absent from the map (NIC, fans of the chassis counted
under thermal aside, software, "Unknown Error", stress tests, ...) leave no XID and no GPU
telemetry trace, so they are not simulated. docs/simulator.md explains each choice.

``derive_rates(path)`` recomputes everything from the file; ``DEFAULT_RATES`` holds the same
numbers, rounded, as constants (``fault_trace=None``: a scenario that must not depend on the file).
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from statistics import median
from typing import Any

from ..errors import ConfigError

# The trace shipped with the package (``fault_trace="auto"`` reads it unless
# $DETECTOR_FAULT_TRACE names another).
FAULT_TRACE = Path(__file__).resolve().parent / "data" / "infinitehbd" / "fault_trace.json"

# Simulator failure kinds (see failures.py for precursors and XIDs).
KINDS = ("ecc", "row_remap", "pcie", "nvlink", "thermal", "power", "gsp", "straggler")

# trace Desc -> simulator kind. DBE over threshold is split between "ecc" and "row_remap"
# (ROW_REMAP_SHARE) because the trace does not tell a DBE that was contained by row remapping
# from one that needed a page retirement / remap failure.
TRACE_KIND: dict[str, str] = {
    "GPU DBE(Double Bit ECC) > Threshold": "ecc",
    "GPU SBE(Single Bit ECC) > Threshold": "ecc",
    "Silent Data Corruption": "ecc",
    "GPU PCI link width low": "pcie",
    "GPU Lost": "pcie",
    "GPU device not found": "pcie",
    "GPU P2P Bandwidth Low": "nvlink",
    "Link Down": "nvlink",  # InfiniteHBD's "parameter plane" is its GPU-to-GPU fabric
    "GPU Temperature High": "thermal",
    "Speed Critical (Sensor)": "thermal",
    "Power Supply Failure detected": "power",
    "GPU device unknow error": "gsp",
    "nvidia-smi Timeout": "gsp",
    "GPU xid Error": "straggler",
}
ROW_REMAP_SHARE = 1.0 / 3.0


@dataclass(frozen=True, slots=True)
class TraceRates:
    """What the simulator takes from the trace.

    ``per_node_day``: simulated (XID-visible) failures per node per day.
    ``mix``: kind -> share of those failures (sums to 1).
    ``repair_hours``: kind -> median fault duration (start to end) in hours.
    ``offender_shape``: gamma shape k of per-node failure propensity, fitted by moments to the
    faults-per-server counts (negative binomial): small k = a few servers take most faults.
    """

    per_node_day: float
    mix: dict[str, float]
    repair_hours: dict[str, float]
    offender_shape: float
    servers: int
    days: float
    faults_total: int
    faults_simulated: int


_DEFAULT_COUNTS = {  # derive_rates() on the trace: GPU-visible faults per simulator kind
    "ecc": 41,
    "row_remap": 21,
    "pcie": 31,
    "nvlink": 43,
    "thermal": 33,
    "power": 25,
    "gsp": 49,
    "straggler": 11,
}
DEFAULT_RATES = TraceRates(
    per_node_day=254 / (400 * 348.9798),
    mix={kind: count / 254 for kind, count in _DEFAULT_COUNTS.items()},
    repair_hours={
        "ecc": 3.93,
        "row_remap": 3.93,
        "pcie": 70.68,
        "nvlink": 50.52,
        "thermal": 73.52,
        "power": 360.74,
        "gsp": 2.60,
        "straggler": 13.80,
    },
    offender_shape=0.929,
    servers=400,
    days=348.9798,
    faults_total=584,
    faults_simulated=254,
)


def derive_rates(path: Path, servers: int = 400) -> TraceRates:
    """Recompute ``TraceRates`` from fault_trace.json. Raises ConfigError naming the file."""
    try:
        records = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{path}: cannot read fault trace: {exc}") from exc
    if not isinstance(records, list):
        raise ConfigError(f"{path}: expected a JSON list of fault events")
    starts: dict[tuple[str, str], list[float]] = defaultdict(list)
    durations: dict[str, list[float]] = defaultdict(list)
    per_server: Counter[str] = Counter()
    kinds: Counter[str] = Counter()
    days = 0.0
    ordered = sorted(enumerate(records), key=lambda item: _field(path, item, "event_time"))
    for i, record in ordered:
        time = float(_field(path, (i, record), "event_time"))
        desc = str(_field(path, (i, record), "fault_type")["Desc"])
        node = str(_field(path, (i, record), "node_id"))
        days = max(days, time)
        if record["event_type"] == "fault_start":
            per_server[node] += 1
            starts[(node, desc)].append(time)
            if desc in TRACE_KIND:
                kinds[TRACE_KIND[desc]] += 1
        elif starts.get((node, desc)):
            begun = starts[(node, desc)].pop(0)
            if desc in TRACE_KIND:
                durations[TRACE_KIND[desc]].append((time - begun) * 24.0)
    simulated = sum(kinds.values())
    if simulated == 0 or days <= 0:
        raise ConfigError(f"{path}: no GPU-visible faults found")
    ecc = kinds.pop("ecc", 0)
    kinds["ecc"] = round(ecc * (1 - ROW_REMAP_SHARE))
    kinds["row_remap"] = ecc - kinds["ecc"]
    durations["row_remap"] = durations.get("ecc", [])
    counts = [per_server.get(s, 0) for s in per_server] + [0] * (servers - len(per_server))
    mean = sum(counts) / len(counts)
    var = sum((c - mean) ** 2 for c in counts) / len(counts)
    shape = mean * mean / (var - mean) if var > mean else 50.0  # 50 ~ no over-dispersion
    return TraceRates(
        per_node_day=simulated / (servers * days),
        mix={k: kinds.get(k, 0) / simulated for k in KINDS},
        repair_hours={k: float(median(durations[k])) if durations[k] else 1.0 for k in KINDS},
        offender_shape=shape,
        servers=servers,
        days=days,
        faults_total=sum(per_server.values()),
        faults_simulated=simulated,
    )


def _field(path: Path, item: tuple[int, Any], name: str) -> Any:
    index, record = item
    if not isinstance(record, dict) or name not in record:
        raise ConfigError(f"{path}: record {index}: missing field {name!r}")
    return record[name]
