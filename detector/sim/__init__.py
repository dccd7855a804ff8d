"""The seeded simulated GPU cluster: the public face of detector/sim/.

    Scenario            every parameter (``Scenario.demo()``: 63 x 8 B200, 3 days, seed 7)
    SimulatedCluster    .series(), .frames(), .events(), .exposition(node, t, values)
    write_dump          OpenMetrics dump with timestamps + events JSONL
    serve               live dcgm-exporter / node-exporter HTTP endpoints
    parse_cue, plant_cues, plan_lines   failures on cue (``--failure-at 5m:79``) and the plan
    KIND_SHAPES, SHAPES the precursor shapes each failure kind draws from (precursors.py)

docs/simulator.md describes the workload, the failure library and how the InfiniteHBD fault
trace sets failure rates and the type mix.
"""

from __future__ import annotations

from .cluster import SimulatedCluster, with_pod
from .cues import CUE_KINDS, FailureCue, parse_cue, plan_lines, plant_cues
from .exposition import write_dump, write_events
from .precursors import KIND_SHAPES, SHAPES
from .scenario import FailureSpec, HostFault, JobSpec, Scenario
from .serve import Exporters, serve
from .trace import DEFAULT_RATES, FAULT_TRACE, TraceRates, derive_rates
from .workload import node_jobs

__all__ = [
    "CUE_KINDS",
    "DEFAULT_RATES",
    "FAULT_TRACE",
    "KIND_SHAPES",
    "SHAPES",
    "Exporters",
    "FailureCue",
    "FailureSpec",
    "HostFault",
    "JobSpec",
    "Scenario",
    "SimulatedCluster",
    "TraceRates",
    "derive_rates",
    "node_jobs",
    "parse_cue",
    "plan_lines",
    "plant_cues",
    "serve",
    "with_pod",
    "write_dump",
    "write_events",
]
