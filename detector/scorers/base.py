"""The scorer extension point.

A scorer sees one tick of every signal column at once and returns one anomaly score per column.
Scores are in "z units": 0 is typical, about 3 is a three-sigma surprise, never NaN or inf and
never negative (capped at ``SCORE_CAP``). Higher means more anomalous. NaN inputs mean "not
observed this tick": their score is 0 and their state is left alone.

Columns only ever get appended (new series appear); a scorer grows its state arrays when ``x``
is longer than what it has seen. ``ColumnLayout`` tells scorers which columns belong together
(same signal on the GPUs of one node; same signal on the nodes of one cohort).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from ..model import FloatArray, IntArray

SCORE_CAP = 50.0


@dataclass(frozen=True, slots=True)
class ColumnLayout:
    """Per signal column: which signal it is, which entity it belongs to, its peer groups.

    All arrays have one entry per signal column.
    - ``signal``: id of the signal kind (index into ``signal_names``), e.g. "gpu_temp".
    - ``node``: node id (index into ``node_names``).
    - ``gpu``: GPU id within the node as an int, or -1 for node-level columns.
    - ``cohort``: cohort id of the column's node (nodes compared with each other).
    - ``direction``: +1 only increases are anomalous, -1 only decreases, 0 both.
    """

    signal: IntArray
    node: IntArray
    gpu: IntArray
    cohort: IntArray
    direction: IntArray
    signal_names: tuple[str, ...]
    node_names: tuple[str, ...]

    def __len__(self) -> int:
        return int(self.signal.shape[0])


@runtime_checkable
class Scorer(Protocol):
    """Update on one tick, return scores (see module docstring). Deterministic, O(1) per column."""

    name: str

    def update(self, t: float, x: FloatArray, layout: ColumnLayout) -> FloatArray: ...

    def state_dict(self) -> dict[str, np.ndarray]: ...

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None: ...


def directional(z: FloatArray, direction: IntArray) -> FloatArray:
    """Fold a signed deviation into a non-negative score honouring each column's direction."""
    up = np.where(direction >= 0, np.maximum(z, 0.0), 0.0)
    down = np.where(direction <= 0, np.maximum(-z, 0.0), 0.0)
    return np.minimum(np.maximum(up, down), SCORE_CAP)
