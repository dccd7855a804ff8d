"""The team followers where no label names a GPU's job (detector/team_inference.py)."""

from __future__ import annotations

import pytest

from detector.config.load import load_config
from detector.errors import ConfigError
from detector.pipeline.build import build_pipeline
from detector.series.index import SeriesIndex
from detector.series.labels import LabelRules


@pytest.mark.parametrize(
    ("setting", "follower"),
    [("gpu_workload_comovement", "comoving"), ("gpu_activity_signal", "activity")],
)
def test_a_follower_must_follow_a_gpu_signal(setting: str, follower: str) -> None:
    """Naming a node signal (or a typo) is refused when the pipeline is built, naming the
    setting; an empty value turns that follower off."""
    variable = f"DETECTOR_LABELS__{setting.upper()}"
    config = load_config(None, env={variable: "node_load"})
    with pytest.raises(ConfigError, match=rf"labels.{setting}: 'node_load' is no GPU signal"):
        build_pipeline(config, SeriesIndex(LabelRules.from_config(config.labels)))
    off = load_config(None, env={variable: ""})
    assert getattr(off.labels, setting) is None
    index = SeriesIndex(LabelRules.from_config(off.labels))
    assert getattr(build_pipeline(off, index).signal_map, follower) is None
    on = build_pipeline(load_config(None, env={}), SeriesIndex())
    assert getattr(on.signal_map, follower) is not None  # the default follows one
