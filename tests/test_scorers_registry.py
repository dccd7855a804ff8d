"""Scorer registry and grid layouts: names build scorers, mistakes are ConfigErrors."""

from __future__ import annotations

import numpy as np
import pytest

from detector.errors import ConfigError
from detector.scorers.base import Scorer
from detector.scorers.registry import SCORERS, build, default_scorers, grid_layout


def test_default_scorers_are_one_of_each_and_honour_the_protocol() -> None:
    """The default set holds every registered scorer, each a runtime Scorer."""
    scorers = default_scorers()
    assert sorted(SCORERS) == sorted(s.name for s in scorers)
    assert all(isinstance(s, Scorer) for s in scorers)


def test_build_passes_parameters() -> None:
    """Keyword parameters reach the constructor."""
    scorer = build("peers", {"min_peers": 5})
    assert 5 == scorer.min_peers  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("name", "params", "match"),
    [
        ("nope", {}, "unknown scorer 'nope'"),
        ("zscore", {"half_lif_s": 3}, "scorers.zscore"),
        ("changepoint", {"h": -1.0}, "h > 0"),
    ],
)
def test_bad_names_and_parameters_raise_config_errors(
    name: str, params: dict[str, float], match: str
) -> None:
    """Unknown scorer, unknown keyword or invalid value: a ConfigError naming it."""
    with pytest.raises(ConfigError, match=match):
        build(name, params)


def test_grid_layout_lists_gpu_then_node_columns_per_node() -> None:
    """Per node: each GPU signal for every GPU, then node-level signals; cohorts round-robin."""
    layout = grid_layout(3, 2, ("t",), ("load",), cohorts=2, directions={"t": 1})
    assert 9 == len(layout)
    assert [0, 1, -1] * 3 == layout.gpu.tolist()
    assert [0, 0, 0, 1, 1, 1, 2, 2, 2] == layout.node.tolist()
    assert [0, 0, 0, 1, 1, 1, 0, 0, 0] == layout.cohort.tolist()
    assert np.array_equal(np.array([1, 1, 0] * 3), layout.direction)
