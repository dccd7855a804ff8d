"""The scorer extension point.

A scorer sees one tick of every signal column at once and returns one anomaly score per column.
Scores are in "z units": 0 is typical, about 3 is a three-sigma surprise, never NaN or inf and
never negative (capped at ``SCORE_CAP``). Higher means more anomalous. NaN inputs mean "not
observed this tick": their score is 0 and their state is left alone.

Columns only ever get appended (new series appear); a scorer grows its state arrays when ``x``
is longer than what it has seen. ``ColumnLayout`` tells scorers which columns belong together
(same signal on the GPUs of one node; same signal on the nodes of one cohort).

Scoring some columns of a wider row (the pipeline routes each column to the scorers its rule
names): ``update_columns(scorer, t, x, columns, layout, out)`` has the effect of
``out[columns] = scorer.update(t, x[columns], layout)`` (``layout`` is the layout of those
columns, the scorer's state is indexed by position in ``columns``) and touches no other entry
of ``out``. A scorer with an ``update_at(t, x, columns, layout, out)`` method (the kernel
scorers: z-score, changepoint, peers, counts, health) does it without the gathered copy of the
row and the scattered copy of the scores; any other scorer is gathered and scattered. Both
routes give bit-identical scores and state (the contract suite checks every scorer).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np

# ColumnLayout lives in model.py so the signal stage can build it without importing scorers
# (stages never import each other); it is re-exported here, its historical home.
from ..model import ColumnLayout as ColumnLayout
from ..model import FloatArray, IntArray

SCORE_CAP = 50.0


@runtime_checkable
class Scorer(Protocol):
    """Update on one tick, return scores (see module docstring). Deterministic, O(1) per column."""

    name: str

    def update(self, t: float, x: FloatArray, layout: ColumnLayout) -> FloatArray: ...

    def state_dict(self) -> dict[str, np.ndarray]: ...

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None: ...


class KernelScorer:
    """``update`` and ``update_at`` for a scorer whose numba kernel follows kernels.py's column
    convention (the row and the index of the scorer's columns in it, or None when the row is
    the scorer's own columns): the subclass defines ``_step(t, x, cols, layout, out)``, which
    writes a score for each of its columns into ``out``."""

    def update(self, t: float, x: FloatArray, layout: ColumnLayout) -> FloatArray:
        score = np.empty(x.shape[0])
        self._step(t, x, None, layout, score)
        return score

    def update_at(
        self, t: float, x: FloatArray, columns: IntArray, layout: ColumnLayout, out: FloatArray
    ) -> None:
        """``out[columns] = update(t, x[columns], layout)`` without either copy."""
        self._step(t, x, columns, layout, out)

    def _step(
        self, t: float, x: FloatArray, cols: IntArray | None, layout: ColumnLayout, out: FloatArray
    ) -> None:
        raise NotImplementedError


def update_columns(
    scorer: Scorer,
    t: float,
    x: FloatArray,
    columns: IntArray,
    layout: ColumnLayout,
    out: FloatArray,
) -> None:
    """``out[columns] = scorer.update(t, x[columns], layout)``, through the scorer's own
    ``update_at`` where it has one (no copies), else by gathering and scattering."""
    at = getattr(scorer, "update_at", None)  # isinstance on a Protocol: microseconds a call
    if at is not None:
        at(t, x, columns, layout, out)
    else:
        out[columns] = scorer.update(t, x.take(columns), layout)


def directional(z: FloatArray, direction: IntArray) -> FloatArray:
    """Fold a signed deviation into a non-negative score honouring each column's direction."""
    up = np.where(direction >= 0, np.maximum(z, 0.0), 0.0)
    down = np.where(direction <= 0, np.maximum(-z, 0.0), 0.0)
    return np.minimum(np.maximum(up, down), SCORE_CAP)
