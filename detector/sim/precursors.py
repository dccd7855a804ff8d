"""Precursor shapes: how a failure announces itself, drawn per failure from documented ranges.

A planned failure with a precursor gets four draws from the plan's seeded stream (``draw``),
recorded on its ``PlannedFailure``:

- **shape**: uniformly one of its kind's plausible shapes (``KIND_SHAPES``);
- **onset** ``lead_s``: log-uniform in ``Scenario.precursor_lead_s`` (default 5 min to 4 h
  before the XID);
- **duration** ``precursor_s``: with probability ``Scenario.precursor_gap_share`` (25 %) the
  precursor stops after ``GAP_SHARE_OF_LEAD`` (30-90 %) of its lead, leaving a quiet gap before
  the XID; otherwise it runs into the XID;
- **amplitude**: log-uniform in ``Scenario.precursor_amplitude`` (default 0.25-1.5; 1 is the
  kind's full profile, the one a ramp reaches at the XID; below ~0.5 the precursor is faint).

GSP timeouts and ``Scenario.no_precursor_share`` (20 %) of the other failures have none (shape
``none``). A shape is the precursor's level at progress r (0 at its onset, 1 at its end); the
amplitude scales that level, and the kind (failures.py) turns the level into counter
increments and gauge offsets:

shape   level at progress r                           reads as
ramp    r                                             a fault that grows until it fails
step    0.6 from the onset                            a partial fault that appears and holds
bursts  U(0.5, 1) on a tick, with probability         intermittent episodes, denser towards
        0.1 + 0.4 r; else 0                           the end (a flapping link, SBE storms)
drift   0.5 r                                         a slow, low shift (never the full level)

kind       shapes                 why
ecc        ramp, bursts           single-bit errors grow as a cell weakens, or come in storms
row_remap  ramp, step             rows remap one by one, or a bank goes bad at once
pcie       ramp, bursts           replays grow with a degrading link, or flap with it
nvlink     ramp, bursts, step     CRC errors grow, flap, or a lane drops and stays degraded
thermal    drift, ramp            a cooling path degrades slowly, or a fan dies
power      ramp, step, bursts     a PSU weakens, loses a phase, or browns out intermittently
straggler  drift, step            a GPU slows gradually or drops a clock bin
gsp        none                   firmware timeouts give no warning

An explicit failure (``Scenario.failures``, ``--failure-at``) draws nothing of this: it runs
the shape it names (``FailureSpec.shape``, default ramp) at its amplitude (default 1) into the
XID, or stops ``gap_s`` before it, so a test or a demo plants exactly the precursor it means.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from .scenario import Scenario

SHAPES = ("ramp", "step", "bursts", "drift")
NO_SHAPE = "none"
KIND_SHAPES: dict[str, tuple[str, ...]] = {
    "ecc": ("ramp", "bursts"),
    "row_remap": ("ramp", "step"),
    "pcie": ("ramp", "bursts"),
    "nvlink": ("ramp", "bursts", "step"),
    "thermal": ("drift", "ramp"),
    "power": ("ramp", "step", "bursts"),
    "straggler": ("drift", "step"),
    "gsp": (),
}
GAP_SHARE_OF_LEAD = (0.3, 0.9)  # a precursor that stops early lasts this share of its lead
STEP_LEVEL = 0.6
DRIFT_LEVEL = 0.5
BURST_LEVEL = (0.5, 1.0)
BURST_CHANCE = (0.1, 0.4)  # chance a tick is in a burst: first + second * r


@dataclass(frozen=True, slots=True)
class Precursor:
    """One failure's precursor: ``lead_s`` before the XID it starts, ``precursor_s`` it lasts
    (``lead_s`` - ``precursor_s`` is the quiet gap before the XID), its shape and amplitude.
    ``NONE`` is the failure without one."""

    shape: str
    lead_s: float
    precursor_s: float
    amplitude: float


NONE = Precursor(NO_SHAPE, 0.0, 0.0, 0.0)


def log_uniform(low: float, high: float, rng: np.random.Generator) -> float:
    """A draw log-uniform in [low, high]; ``high`` when the range is empty or starts at 0."""
    if low <= 0 or high <= low:
        return float(high)
    return float(math.exp(rng.uniform(math.log(low), math.log(high))))


def draw_lead(kind: str, sc: Scenario, rng: np.random.Generator) -> float:
    """The onset before the XID, log-uniform in the scenario's range; 0 (no precursor) for the
    kinds without one and for ``no_precursor_share`` of the rest."""
    if not KIND_SHAPES[kind] or rng.random() < sc.no_precursor_share:
        return 0.0
    return log_uniform(*sc.precursor_lead_s, rng)


def draw(kind: str, sc: Scenario, rng: np.random.Generator) -> Precursor:
    """A drawn failure's precursor (see the module docstring); the same stream, the same draws."""
    lead = draw_lead(kind, sc, rng)
    if lead <= 0:
        return NONE
    shapes = KIND_SHAPES[kind]
    shape = shapes[int(rng.integers(len(shapes)))]
    duration = lead
    if rng.random() < sc.precursor_gap_share:
        duration = lead * float(rng.uniform(*GAP_SHARE_OF_LEAD))
    return Precursor(shape, lead, duration, log_uniform(*sc.precursor_amplitude, rng))


def level(shape: str, r: float, rng: np.random.Generator) -> float:
    """The shape's level at progress ``r`` in [0, 1) of the precursor (before the amplitude)."""
    if shape == "ramp":
        return r
    if shape == "step":
        return STEP_LEVEL
    if shape == "drift":
        return DRIFT_LEVEL * r
    if shape == "bursts":
        on = rng.random() < BURST_CHANCE[0] + BURST_CHANCE[1] * r
        return float(rng.uniform(*BURST_LEVEL)) if on else 0.0
    raise ValueError(f"unknown precursor shape {shape!r} (one of {', '.join(SHAPES)})")
