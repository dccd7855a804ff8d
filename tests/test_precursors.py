"""The simulator's precursors: shape, onset, duration and amplitude drawn from documented
ranges, deterministically per seed; explicit failures plant exactly the precursor they name."""

from __future__ import annotations

from collections import Counter
from dataclasses import astuple, replace

import numpy as np
import pytest

from detector.errors import ConfigError
from detector.model import FloatArray
from detector.sim import FailureSpec, Scenario, SimulatedCluster
from detector.sim.cluster import resolve_rates
from detector.sim.failures import PlannedFailure, plan_failures
from detector.sim.precursors import (
    BURST_LEVEL,
    DRIFT_LEVEL,
    GAP_SHARE_OF_LEAD,
    KIND_SHAPES,
    NO_SHAPE,
    STEP_LEVEL,
    level,
)

HOUR = 3600.0
MANY = Scenario(nodes=63, days=30.0, seed=5, failure_count=400)


def plan(sc: Scenario) -> list[PlannedFailure]:
    return plan_failures(sc, resolve_rates(sc.fault_trace), np.random.default_rng(sc.seed))


def sbe_counter(spec: FailureSpec) -> tuple[FloatArray, FloatArray]:
    """(seconds from the start, the failing GPU's SBE counter) of a small cluster with ``spec``."""
    sc = Scenario(nodes=2, days=0.25, seed=3, dcgm_fields="all", failures=(spec,))
    cluster = SimulatedCluster(replace(sc, xid45_on_teardown=False))
    column = next(
        i
        for i, (name, labels) in enumerate(cluster.series())
        if name == "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL"
        and dict(labels).get("Hostname") == "node-01"
        and dict(labels).get("gpu") == str(spec.gpu)
    )
    frames = list(cluster.frames())
    times = np.array([t - sc.start for t, _ in frames])
    return times, np.array([v[column] for _, v in frames])


def test_same_seed_draws_the_same_precursors_and_another_seed_others() -> None:
    """Planning one scenario twice gives the same failures, precursors included; another seed
    gives other draws."""
    first, again = plan(MANY), plan(MANY)
    other = plan(replace(MANY, seed=6))
    assert [astuple(f) for f in first] == [astuple(f) for f in again]
    assert [astuple(f) for f in first] != [astuple(f) for f in other]


def test_drawn_precursors_stay_within_their_documented_ranges() -> None:
    """Every drawn precursor has one of its kind's shapes, an onset within precursor_lead_s,
    a duration running into the XID or stopping after 30-90 % of its lead, an amplitude within
    precursor_amplitude; failures without one have shape none and nothing else."""
    low, high = MANY.precursor_lead_s
    a_low, a_high = MANY.precursor_amplitude
    for f in plan(MANY):
        if f.shape == NO_SHAPE:
            assert (0.0, 0.0, 0.0) == (f.lead_s, f.precursor_s, f.amplitude)
            continue
        assert f.shape in KIND_SHAPES[f.kind]
        assert low <= f.lead_s <= high
        share = f.precursor_s / f.lead_s
        assert share == 1.0 or GAP_SHARE_OF_LEAD[0] <= share <= GAP_SHARE_OF_LEAD[1]
        assert a_low <= f.amplitude <= a_high


def test_a_large_plan_holds_every_shape_gaps_faint_ones_and_some_without_precursor() -> None:
    """Over 400 drawn failures each kind shows each of its shapes, some precursors stop before
    the XID, some are faint (amplitude < 0.5), GSP timeouts have none and so do some others."""
    planned = plan(MANY)
    seen = Counter((f.kind, f.shape) for f in planned)
    for kind, shapes in KIND_SHAPES.items():
        for shape in shapes or (NO_SHAPE,):
            assert seen[(kind, shape)] > 0, (kind, shape)
    with_one = [f for f in planned if f.shape != NO_SHAPE]
    assert 0 < sum(f.precursor_s < f.lead_s for f in with_one) < len(with_one)
    assert 0 < sum(f.amplitude < 0.5 for f in with_one) < len(with_one)
    assert any(f.shape == NO_SHAPE and f.kind != "gsp" for f in planned)


def test_shapes_give_their_documented_levels() -> None:
    """ramp = r, step holds its level from the onset, drift reaches half the full level, and
    bursts are either off or within their level, on more often near the end."""
    rng = np.random.default_rng(1)
    assert [0.0, 0.5, 0.9] == [level("ramp", r, rng) for r in (0.0, 0.5, 0.9)]
    assert [STEP_LEVEL, STEP_LEVEL] == [level("step", r, rng) for r in (0.0, 0.9)]
    assert DRIFT_LEVEL * 0.8 == level("drift", 0.8, rng)
    early = [level("bursts", 0.0, rng) for _ in range(2000)]
    late = [level("bursts", 0.99, rng) for _ in range(2000)]
    assert all(x == 0.0 or BURST_LEVEL[0] <= x <= BURST_LEVEL[1] for x in early + late)
    assert sum(x > 0 for x in early) < sum(x > 0 for x in late)


def test_a_precursor_that_stops_early_leaves_a_quiet_gap_before_the_xid() -> None:
    """An explicit ECC precursor with gap_s: single-bit errors grow from its onset and stop
    gap_s before the XID."""
    spec = FailureSpec("ecc", node=0, gpu=2, at_s=3 * HOUR, lead_s=HOUR, xid=95, gap_s=1800.0)
    times, sbe = sbe_counter(spec)
    active = (times >= 2 * HOUR) & (times < 2.5 * HOUR)
    gap = (times >= 2.5 * HOUR + 60) & (times < 3 * HOUR)
    assert sbe[active][-1] - sbe[active][0] > 100
    assert 0.0 == sbe[gap][-1] - sbe[gap][0]


def test_a_faint_precursor_raises_fewer_errors_than_the_full_one() -> None:
    """The same ECC ramp at amplitude 0.3 raises far fewer single-bit errors than at 1."""
    full = FailureSpec("ecc", node=0, gpu=2, at_s=3 * HOUR, lead_s=HOUR, xid=95)
    faint = replace(full, amplitude=0.3)
    (_, loud), (_, quiet) = sbe_counter(full), sbe_counter(faint)
    before = slice(0, int(3 * HOUR // 30))
    assert np.nanmax(quiet[before]) < 0.2 * np.nanmax(loud[before])


def test_an_explicit_failure_runs_the_shape_it_names() -> None:
    """An explicit failure keeps its lead and names its shape and amplitude: nothing drawn."""
    spec = FailureSpec("pcie", node=1, gpu=0, at_s=HOUR, lead_s=900.0, shape="bursts")
    planned = plan(Scenario(nodes=2, days=0.25, failures=(spec,)))[0]
    expected = ("bursts", 900.0, 900.0, 1.0)
    assert expected == (planned.shape, planned.lead_s, planned.precursor_s, planned.amplitude)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"shape": "wave"}, "shape 'wave' not one of ramp, step, bursts, drift"),
        ({"amplitude": 0.0}, "amplitude must be a positive number"),
        ({"gap_s": 900.0}, "gap_s 900.0 needs a lead_s above it"),
    ],
)
def test_an_explicit_failure_with_a_bad_precursor_is_refused(
    change: dict[str, object], message: str
) -> None:
    """A bad shape, amplitude or gap is refused naming the failure and the field."""
    spec = replace(FailureSpec("ecc", node=0, gpu=0, at_s=HOUR, lead_s=600.0), **change)
    with pytest.raises(ConfigError, match=r"failures\[0\]") as caught:
        Scenario(nodes=2, days=0.25, failures=(spec,))
    assert message in str(caught.value)
