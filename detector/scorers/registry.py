"""Scorer names -> constructors, so config files can name scorers and their parameters.

A plain constant mapping (no import-time side effects). ``build`` translates a bad name or
parameter into ``ConfigError`` naming it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ..errors import ConfigError
from .base import ColumnLayout, Scorer
from .bocpd import BayesianChangePoint
from .changepoint import ChangePoint
from .context import ContextNovelty
from .counts import CountBurst
from .forecast import ForecastError
from .health import TelemetryHealth
from .novelty import RangeNovelty
from .own_past import OwnPast
from .peers import PeerDeviation
from .seasonal import SeasonalProfile
from .shape_memory import PhaseShapeMemory
from .stuck import StuckRun
from .window_memory import WindowMemory
from .zscore import RobustZScore

SCORERS: Mapping[str, Callable[..., Scorer]] = {
    RobustZScore.name: RobustZScore,
    ChangePoint.name: ChangePoint,
    BayesianChangePoint.name: BayesianChangePoint,
    PeerDeviation.name: PeerDeviation,
    TelemetryHealth.name: TelemetryHealth,
    CountBurst.name: CountBurst,
    ForecastError.name: ForecastError,
    RangeNovelty.name: RangeNovelty,
    ContextNovelty.name: ContextNovelty,
    SeasonalProfile.name: SeasonalProfile,
    WindowMemory.name: WindowMemory,
    StuckRun.name: StuckRun,
    PhaseShapeMemory.name: PhaseShapeMemory,
    OwnPast.name: OwnPast,
}


def build(name: str, params: Mapping[str, Any] | None = None) -> Scorer:
    """One scorer by name with keyword parameters; ConfigError names what is wrong."""
    if name not in SCORERS:
        raise ConfigError(f"scorers: unknown scorer {name!r} (known: {sorted(SCORERS)})")
    try:
        return SCORERS[name](**dict(params or {}))
    except TypeError as exc:  # an unknown or missing keyword
        raise ConfigError(f"scorers.{name}: {exc}") from exc


def default_scorers() -> list[Scorer]:
    """The standard set, one of each, with default parameters."""
    return [build(name) for name in SCORERS]


def grid_layout(
    nodes: int,
    gpus_per_node: int,
    gpu_signals: tuple[str, ...],
    node_signals: tuple[str, ...] = (),
    cohorts: int = 1,
    directions: Mapping[str, int] | None = None,
) -> ColumnLayout:
    """A regular cluster layout (simulations, tests, benchmarks): per node, every GPU signal
    for GPUs 0..gpus_per_node-1 (signal-major), then every node-level signal; node i belongs
    to cohort ``i % cohorts``. ``directions`` maps signal names to +1/-1 (default 0)."""
    names = tuple(gpu_signals) + tuple(node_signals)
    dirs = np.array([(directions or {}).get(s, 0) for s in names], dtype=np.int64)
    per_node_sig = np.concatenate(
        [
            np.repeat(np.arange(len(gpu_signals)), gpus_per_node),
            np.arange(len(gpu_signals), len(names)),
        ]
    ).astype(np.int64)
    per_node_gpu = np.concatenate(
        [np.tile(np.arange(gpus_per_node), len(gpu_signals)), np.full(len(node_signals), -1)]
    ).astype(np.int64)
    width = per_node_sig.shape[0]
    node = np.repeat(np.arange(nodes, dtype=np.int64), width)
    signal = np.tile(per_node_sig, nodes)
    return ColumnLayout(
        signal=signal,
        node=node,
        gpu=np.tile(per_node_gpu, nodes),
        cohort=node % max(cohorts, 1),
        direction=dirs[signal],
        signal_names=names,
        node_names=tuple(f"node{i:04d}" for i in range(nodes)),
    )
