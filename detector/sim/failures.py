"""The failure library: what fails, when, with which precursors and which XIDs.

``plan_failures`` draws failures (or takes the scenario's explicit list): the count from the
trace rate (per node-day, times the scenario multiplier) or ``failure_count``, the kind from
the trace's type mix, the node from a gamma-distributed propensity (the trace's repeat-offender
over-dispersion, plus ``repeat_offenders`` boosted nodes), and the precursor's shape, onset,
duration and amplitude from the ranges of precursors.py (none for GSP timeouts and for
``no_precursor_share`` of the rest).

``apply_failures`` writes the precursors and the aftermath of the active failures into one
tick's ``GpuDrive`` (the per-GPU inputs of the GPU model). It loops over the few failures
active at this tick, never over series.

Kind       precursor at level x (a ramp: x = r, 0 -> 1 over its span)   XIDs at failure
ecc        single-bit ECC surge ~x^2                                  48, then 94 or 95
row_remap  correctable rows remapped step by step, a few SBEs         64 (row remap failure)
pcie       PCIe replay counter growth ~exp(6x), PCIe rate down        79: the GPU falls off the bus
nvlink     NVLink CRC flit/data errors, replays, bandwidth down       74 or 149
thermal    temperature up 20x C, thermal violation, SM clock down     119 or 79
power      node-wide power draw jitter, power violation, clocks       79 or 119
gsp        none                                                       119, sometimes then 120
straggler  lower SM clock and utilization than its peers              43 or 13

The level x is the precursor's shape at its progress times its amplitude (precursors.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from . import precursors
from .gpu import GpuDrive
from .precursors import Precursor
from .scenario import FailureSpec, Scenario
from .trace import KINDS, TraceRates

# Kinds whose XIDs are application faults (43, 13: rules/xid.yaml, RESTART_APP, "the GPU itself
# is usually fine"): the node is still held for its repair, but the GPU is not dead, so DCGM's
# health watches (PCIe, memory, InfoROM, thermal, power, NVLink, driver) keep reporting PASS.
APP_FAULT_KINDS = frozenset({"straggler"})
_FINAL_XIDS: dict[str, tuple[tuple[int, float], ...]] = {  # kind -> (xid, probability)
    "ecc": ((94, 0.7), (95, 0.3)),
    "row_remap": ((64, 1.0),),
    "pcie": ((79, 1.0),),
    "nvlink": ((149, 0.6), (74, 0.4)),  # Blackwell NVLink5 reports 149; older paths 74
    "thermal": ((119, 0.5), (79, 0.5)),
    "power": ((79, 0.6), (119, 0.4)),
    "gsp": ((119, 1.0),),
    "straggler": ((43, 0.6), (13, 0.4)),
}


@dataclass(frozen=True, slots=True)
class PlannedFailure:
    """One failure: times are seconds from the scenario start."""

    kind: str
    node: int
    gpu: int
    time: float  # first XID
    lead_s: float  # precursor starts at time - lead_s (0: no precursor)
    xids: tuple[tuple[float, int], ...]  # (seconds after ``time``, xid)
    repair_end: float
    vanish: bool  # fell off the bus: the GPU's series disappear until repair
    shape: str  # precursors.SHAPES, or "none"
    precursor_s: float  # it lasts this long from its onset (< lead_s: a quiet gap before time)
    amplitude: float  # its level's scale (1: the kind's full profile)


def _final_xid(kind: str, rng: np.random.Generator) -> int:
    codes, probs = zip(*_FINAL_XIDS[kind], strict=True)
    return int(rng.choice(np.array(codes), p=np.array(probs)))


def _xid_sequence(kind: str, xid: int, rng: np.random.Generator) -> tuple[tuple[float, int], ...]:
    if kind == "ecc":  # the DBE itself (48), then the containment verdict
        return ((0.0, 48), (float(rng.uniform(1.0, 20.0)), xid))
    if kind == "gsp" and rng.random() < 0.5:
        return ((0.0, 119), (float(rng.uniform(30.0, 300.0)), 120))
    return ((0.0, xid),)


def _make(
    sc: Scenario,
    rates: TraceRates,
    rng: np.random.Generator,
    kind: str,
    node: int,
    gpu: int,
    time: float,
    pre: Precursor,
    xid: int | None,
) -> PlannedFailure:
    final = xid if xid is not None else _final_xid(kind, rng)
    repair = min(
        rates.repair_hours[kind] * 3600.0 * float(rng.lognormal(0.0, 0.5)), sc.repair_cap_s
    )
    seq = _xid_sequence(kind, final, rng)
    return PlannedFailure(
        kind,
        node,
        gpu,
        time,
        pre.lead_s,
        seq,
        time + max(repair, 600.0),
        final == 79,
        pre.shape,
        pre.precursor_s,
        pre.amplitude,
    )


def _given(spec: FailureSpec, sc: Scenario, rng: np.random.Generator) -> Precursor:
    """An explicit failure's precursor: its shape and amplitude, only the onset drawn if left
    open (precursors.py)."""
    lead = spec.lead_s if spec.lead_s is not None else precursors.draw_lead(spec.kind, sc, rng)
    if lead <= 0:
        return precursors.NONE
    return Precursor(spec.shape, lead, lead - spec.gap_s, spec.amplitude)


def plan_failures(
    sc: Scenario, rates: TraceRates, rng: np.random.Generator
) -> list[PlannedFailure]:
    """The scenario's failures, sorted by time, at most one open failure per node."""
    if sc.failures is not None:
        given = [
            _make(sc, rates, rng, f.kind, f.node, f.gpu, f.at_s, _given(f, sc, rng), f.xid)
            for f in sc.failures
        ]
        return sorted(given, key=lambda f: f.time)
    expected = rates.per_node_day * sc.failure_rate_multiplier * sc.nodes * sc.days
    count = sc.failure_count if sc.failure_count is not None else int(rng.poisson(expected))
    weights = rng.gamma(rates.offender_shape, 1.0 / rates.offender_shape, sc.nodes)
    offenders = rng.choice(sc.nodes, size=min(sc.repeat_offenders, sc.nodes), replace=False)
    weights[offenders] += sc.offender_boost
    weights /= weights.sum()
    kinds = list(KINDS)
    mix = np.array([rates.mix.get(k, 0.0) for k in kinds])
    busy_until = np.full(sc.nodes, -np.inf)
    planned: list[PlannedFailure] = []
    duration = sc.duration_s
    draws = sorted(
        (
            float(rng.uniform(0.04, 0.97)) * duration,
            int(rng.choice(sc.nodes, p=weights)),
            kinds[int(rng.choice(len(kinds), p=mix / mix.sum()))],
            int(rng.integers(sc.gpus)),
        )
        for _ in range(count)
    )
    for time, node, kind, gpu in draws:
        pre = precursors.draw(kind, sc, rng)
        if time - pre.lead_s < busy_until[node]:  # node still in repair: the fault comes later
            time = float(busy_until[node] + pre.lead_s + rng.uniform(1800.0, 4 * 3600.0))
        if time >= duration:
            continue
        failure = _make(sc, rates, rng, kind, node, gpu, time, pre, None)
        busy_until[node] = failure.repair_end
        planned.append(failure)
    return sorted(planned, key=lambda f: f.time)


class FailureEffects:
    """Applies the planned failures to each tick's GpuDrive (see the module docstring)."""

    def __init__(self, failures: list[PlannedFailure], sc: Scenario) -> None:
        self.failures = failures
        self.step_s = sc.step_s
        self._begin = np.array([f.time - f.lead_s for f in failures], dtype=np.float64)
        self._end = np.array([f.repair_end for f in failures], dtype=np.float64)

    def apply(self, drive: GpuDrive, t: float, rng: np.random.Generator) -> None:
        """Write precursors (begin <= t < begin + precursor_s), nothing in the quiet gap up to
        the XID, and the aftermath (time <= t < repair_end)."""
        if not self.failures:
            return
        for i in np.flatnonzero((self._begin <= t) & (t < self._end)):
            f = self.failures[int(i)]
            n, g = f.node, f.gpu
            if t < f.time:
                since = t - self._begin[i]
                if since < f.precursor_s:
                    r = since / f.precursor_s
                    x = f.amplitude * precursors.level(f.shape, r, rng)
                    self._precursor(drive, f, x, rng)
                continue
            first_tick = t - f.time < self.step_s
            drive.dead[n, g] |= f.kind not in APP_FAULT_KINDS
            drive.vanished[n, g] |= f.vanish
            if f.kind == "ecc" and first_tick:
                drive.dbe[n, g] += 1
                drive.remap_unc[n, g] += 1
            if f.kind == "row_remap":
                drive.remap_failure[n, g] = True
                drive.remap_unc[n, g] += 1 if first_tick else 0

    def _precursor(
        self, d: GpuDrive, f: PlannedFailure, x: float, rng: np.random.Generator
    ) -> None:
        """The kind's precursor at level ``x`` (1: its full profile; see the module table)."""
        n, g, dt = f.node, f.gpu, self.step_s
        if f.kind == "ecc":
            d.sbe[n, g] += rng.poisson(1.0 + 120.0 * x * x)
        elif f.kind == "row_remap":
            d.sbe[n, g] += rng.poisson(0.5 + 4.0 * x)
            d.remap_corr[n, g] += rng.random() < 0.08 * (0.2 + x)
        elif f.kind == "pcie":
            d.pcie_replay[n, g] += rng.poisson(0.5 * math.exp(6.0 * x))
            d.pcie_factor[n, g] *= 1.0 - 0.35 * x
        elif f.kind == "nvlink":
            d.nvl_crc_flit[n, g] += rng.poisson(2.0 * math.exp(5.0 * x))
            d.nvl_crc_data[n, g] += rng.poisson(0.5 * math.exp(4.0 * x))
            d.nvl_replay[n, g] += rng.poisson(1.0 * math.exp(4.0 * x))
            d.nvl_recovery[n, g] += rng.random() < 0.05 * x
            d.nvlink_factor[n, g] *= 1.0 - 0.25 * x
        elif f.kind == "thermal":
            d.temp_add[n, g] += 20.0 * x
            d.thermal_viol[n, g] += dt * 1e9 * min(1.0, max(0.0, 2.0 * x - 0.6))
            d.clock_add[n, g] -= 350.0 * max(0.0, x - 0.3)
        elif f.kind == "power":  # a failing PSU: every GPU of the node is capped and jittery
            d.power_factor[n] *= 1.0 - 0.25 * x * rng.random(d.power_factor.shape[1])
            d.power_viol[n] += dt * 1e9 * 0.7 * x
            d.clock_add[n] -= 220.0 * x
        elif f.kind == "straggler":
            d.clock_add[n, g] -= 300.0 * x
            d.util_add[n, g] -= 14.0 * x
            d.tensor_factor[n, g] *= 1.0 - 0.3 * x
