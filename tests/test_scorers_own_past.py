"""The own_past preset: the NAB combination of likelihood, range, context and the hour gate."""

from __future__ import annotations

import numpy as np
import pytest

from detector.config.rules import SignalRule
from detector.errors import ConfigError
from detector.scorers.context import ContextNovelty
from detector.scorers.forecast import ForecastError
from detector.scorers.likelihood import AnomalyLikelihood
from detector.scorers.novelty import RangeNovelty
from detector.scorers.own_past import OwnPast
from detector.scorers.registry import build, grid_layout
from detector.scorers.seasonal import SeasonalProfile

TICK_S = 60.0
DAY_S = 48 * TICK_S  # a short 'day' so that hours are learnt within the test


def test_score_is_the_gated_maximum_of_its_parts() -> None:
    """Per column: max(g x likelihood, range, 2.67 x g x context) with g = clip(seasonal / 2,
    0.5, 1), 1 where the hour is not learnt, and 0 for a column's first 120 observations;
    parts streamed on their own give the same."""
    layout = grid_layout(3, 0, (), ("load", "temp"))
    rng = np.random.default_rng(4)
    ticks = 48 * 5
    phase = np.sin(2 * np.pi * np.arange(ticks) / 48)[:, None]
    x = 20 + 5 * phase + rng.normal(size=(ticks, len(layout)))
    x[150, 2] += 30.0
    x[rng.random(x.shape) < 0.05] = np.nan
    preset = OwnPast(observation_s=TICK_S, season_period_s=DAY_S, season_bins=8)
    likelihood = AnomalyLikelihood(
        ForecastError(
            level_half_lives_s=tuple(h * TICK_S for h in (0.25, 1, 4, 16, 64)),
            scale_half_life_s=1000 * TICK_S,
        ),
        short_half_life_s=3.5 * TICK_S,
        long_half_life_s=3000 * TICK_S,
    )
    novelty = RangeNovelty()
    context = ContextNovelty(levels=4, orders=6, table_bits=2**16)
    seasonal = SeasonalProfile(period_s=DAY_S, bins=8)
    gated = 0
    seen = np.zeros(len(layout))
    for i, row in enumerate(x):
        t = i * TICK_S
        got = preset.update(t, row, layout)
        lik = likelihood.update(t, row, layout)
        rng_z = novelty.update(t, row, layout)
        ctx = context.update(t, row, layout)
        s = seasonal.update(t, row, layout)
        gate = np.clip(np.where(seasonal.learnt, s, np.inf) / 2.0, 0.5, 1.0)
        gated += int(np.count_nonzero((gate < 1.0) & (lik > 0)))
        expected = np.maximum(np.maximum(gate * lik, rng_z), 2.67 * gate * ctx)
        seen += ~np.isnan(row)
        expected[seen <= 120] = 0.0
        assert np.array_equal(expected, got)
    assert gated > 0  # the hour gate did discount some surprises


def test_registry_builds_it_and_rules_name_it() -> None:
    """``own_past`` is one name: the registry builds the preset, a rule may list it."""
    assert isinstance(build("own_past", {"observation_s": 30.0}), OwnPast)
    rule = SignalRule(
        name="load",
        metrics=("node_load1",),
        transform="level",
        entity="node",
        scorers=("own_past",),
    )
    assert ("own_past",) == rule.scorers


@pytest.mark.parametrize(
    ("params", "match"),
    [
        ({"observation_s": 0.0}, "observation_s must be > 0"),
        ({"gate_floor": 1.5}, "gate_floor"),
        ({"context_levels": 0}, "levels >= 1"),
    ],
)
def test_bad_parameters_raise_config_errors(params: dict[str, float], match: str) -> None:
    """A parameter out of range is a ConfigError naming it."""
    with pytest.raises(ConfigError, match=match):
        build("own_past", params)
