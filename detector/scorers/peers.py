"""Peer deviation: each column against the other members of its peer group, this tick.

Groups (from ``ColumnLayout``):
- GPU peers: columns with the same (node, signal) and ``gpu >= 0`` (the GPUs of one node);
- node peers: node-level columns (``gpu == -1``) with the same (cohort, signal).

Synchronous training moves all peers together (a checkpoint, a job restart, a common swing),
so the group median absorbs common-mode movement and a lone deviant stands out. Per tick and
group, over the members observed this tick (itself included): ``med`` = median, ``sigma`` =
``max(1.4826 · MAD, mad_floor_rel · |med| + mad_floor_abs)``. One tick's MAD of a small group
(3 nodes of a cohort) can be near 0 by chance, so each column also keeps an EW average of its
group's sigma² (``scale_half_life_s``) and divides by the larger of the two:
``(x - med) / max(sigma, sqrt(ew sigma²))``. Groups with fewer than ``min_peers`` observed
members score 0. The signed deviation is smoothed per column with ``smooth_half_life_s``
(time-aware, that column's own last update), so one noisy tick does not dominate; 0 disables
smoothing. The score is the directional smoothed deviation; a column scores 0 for its first
``warmup`` peer-judged ticks while the smoothed group scale settles.

Vectorization: the group structure is rebuilt only when the layout changes (length or
identity): groups are found with ``np.lexsort`` and packed into padded matrices, one per
power-of-two size class (at most 2x padding). Each tick is then a gather, two row-wise sorts
(median, then MAD) and one gather of the group statistics per column, with no Python loop
over groups or columns.
"""

from __future__ import annotations

import numpy as np

from ..errors import ConfigError
from ..model import BoolArray, FloatArray, IntArray
from .base import SCORE_CAP, ColumnLayout
from .zscore import RobustEWBaseline, check_state, grow, observed

MAD_SCALE = 1.4826  # MAD -> sigma for Gaussian noise


def peer_groups(layout: ColumnLayout, min_size: int) -> list[IntArray]:
    """Padded member matrices (rows = groups, -1 = padding), one per size class; groups
    smaller than ``min_size`` are left out (their columns never score)."""
    n = len(layout)
    if n == 0:
        return []
    is_gpu = layout.gpu >= 0
    entity = np.where(is_gpu, layout.node, layout.cohort)
    order = np.lexsort((layout.signal, entity, is_gpu))
    keys = np.stack([is_gpu[order], entity[order], layout.signal[order]])
    new_group = np.empty(n, dtype=bool)
    new_group[0] = True
    new_group[1:] = np.any(keys[:, 1:] != keys[:, :-1], axis=0)
    starts = np.flatnonzero(new_group)
    sizes = np.diff(np.append(starts, n))
    rank = np.arange(n) - np.repeat(starts, sizes)  # position within the group
    group_of = np.repeat(np.arange(starts.shape[0]), sizes)
    width_of = 1 << np.ceil(np.log2(np.maximum(sizes, 1))).astype(np.int64)
    matrices: list[IntArray] = []
    for width in np.unique(width_of[sizes >= min_size]):
        groups = np.flatnonzero((width_of == width) & (sizes >= min_size))
        row_of = np.full(starts.shape[0], -1, dtype=np.int64)
        row_of[groups] = np.arange(groups.shape[0])
        members = row_of[group_of] >= 0
        matrix = np.full((groups.shape[0], int(width)), -1, dtype=np.int64)
        matrix[row_of[group_of[members]], rank[members]] = order[members]
        matrices.append(matrix)
    return matrices


class PeerDeviation:
    """Scorer: robust deviation of each column from its peer group's median, smoothed."""

    name = "peers"
    _KEYS = ("smoothed", "scale_var", "scale_w", "count", "last_t")
    _BASELINE = "baseline."

    def __init__(
        self,
        min_peers: int = 3,
        smooth_half_life_s: float = 30.0,
        scale_half_life_s: float = 600.0,
        mad_floor_rel: float = 1e-3,
        warmup: int = 5,
        mad_floor_abs: float = 1e-6,
        baseline_half_life_s: float | None = 6 * 3600.0,
        baseline_warmup: int = 20,
    ) -> None:
        if min_peers < 2:
            raise ConfigError(f"min_peers must be >= 2, got {min_peers}")
        if not scale_half_life_s > 0:
            raise ConfigError(f"scale_half_life_s must be > 0, got {scale_half_life_s}")
        if smooth_half_life_s < 0 or mad_floor_rel < 0 or not mad_floor_abs > 0:
            raise ConfigError("peers needs smooth_half_life_s >= 0, mad floors >= 0 and > 0")
        self.min_peers = int(min_peers)
        self.smooth_half_life_s = float(smooth_half_life_s)
        self.scale_half_life_s = float(scale_half_life_s)
        self.warmup = int(warmup)
        self.mad_floor_rel = float(mad_floor_rel)
        self.mad_floor_abs = float(mad_floor_abs)
        self.smoothed = np.zeros(0)  # smoothed signed deviation per column
        self.scale_var = np.zeros(0)  # time-smoothed squared group sigma, seen by each column
        self.scale_w = np.zeros(0)  # EW weight behind scale_var (an average from tick one)
        self.count = np.zeros(0)  # ticks this column was scored against its peers
        self.last_t = np.zeros(0)
        self._layout: ColumnLayout | None = None
        self._groups: list[IntArray] = []
        self._group_rows: list[IntArray] = []
        self._row_of: IntArray = np.zeros(0, dtype=np.int64)
        self._dir_layout: ColumnLayout | None = None
        self._up = np.zeros(0)
        self._down = np.zeros(0)
        # Each column's usual deviation from its peers (a slot that always runs 3 C hotter, a
        # node whose config value differs): scored is the departure from that habit, in peer
        # sigmas (variance floor 1), so standing out only counts when it is new.
        self.baseline = (
            None
            if baseline_half_life_s is None
            else RobustEWBaseline(
                baseline_half_life_s, baseline_warmup, 4.0, var_floor_rel=0.0, var_floor_abs=1.0
            )
        )

    def _refresh_groups(self, layout: ColumnLayout) -> None:
        """Group matrices, and per column the row of its group among all size classes' rows
        (the last slot, NaN, for columns in no scored group), so each tick gathers the
        per-column statistics once instead of scattering them per class."""
        self._groups = peer_groups(layout, self.min_peers)
        n = len(layout)
        row_of = np.full(n + 1, sum(m.shape[0] for m in self._groups), dtype=np.int64)
        offset = 0
        self._group_rows = []
        for matrix in self._groups:
            rows = np.arange(matrix.shape[0], dtype=np.int64)
            self._group_rows.append(rows)
            row_of[matrix] = (rows + offset)[:, None]  # padding (-1) lands on slot n
            offset += matrix.shape[0]
        self._row_of = row_of[:n]
        self._layout = layout

    def group_stats(self, x: FloatArray, layout: ColumnLayout) -> tuple[FloatArray, FloatArray]:
        """Per column, its group's median and floored MAD sigma over the members observed this
        tick (both NaN where the group has fewer than ``min_peers`` observed members)."""
        return self._group_stats(x, observed(x), layout)

    def _group_stats(
        self, x: FloatArray, obs: BoolArray, layout: ColumnLayout
    ) -> tuple[FloatArray, FloatArray]:
        if layout is not self._layout:
            self._refresh_groups(layout)
        n = x.shape[0]
        padded = np.empty(n + 1)  # index -1 (padding) -> NaN
        padded[:n] = x
        padded[n] = np.nan
        np.copyto(padded[:n], np.nan, where=~obs)
        meds: list[FloatArray] = []
        sigmas: list[FloatArray] = []
        for matrix, rows in zip(self._groups, self._group_rows, strict=True):
            # one pass per size class, not per group
            vals = padded[matrix]
            count = matrix.shape[1] - np.isnan(vals).sum(axis=1)
            lo = np.maximum((count - 1) // 2, 0)
            hi = count // 2
            ordered = np.sort(vals, axis=1)  # NaN last
            med = 0.5 * (ordered[rows, lo] + ordered[rows, hi])
            np.subtract(vals, med[:, None], out=vals)
            np.abs(vals, out=vals)
            vals.sort(axis=1)
            mad = 0.5 * (vals[rows, lo] + vals[rows, hi])
            sigma = np.maximum(
                MAD_SCALE * mad, self.mad_floor_rel * np.abs(med) + self.mad_floor_abs
            )
            few = count < self.min_peers
            med[few] = np.nan
            sigma[few] = np.nan
            meds.append(med)
            sigmas.append(sigma)
        nan = np.full(1, np.nan)
        row_of = self._row_of
        return np.concatenate([*meds, nan])[row_of], np.concatenate([*sigmas, nan])[row_of]

    def update(self, t: float, x: FloatArray, layout: ColumnLayout) -> FloatArray:
        """Vectorized over all columns in place: unscored columns are computed and then not
        written back, which leaves their state untouched (see the module docstring)."""
        n = x.shape[0]
        if n > self.smoothed.shape[0]:
            self.smoothed = grow(self.smoothed, n, 0.0)
            self.scale_var = grow(self.scale_var, n, 0.0)
            self.scale_w = grow(self.scale_w, n, 0.0)
            self.count = grow(self.count, n, 0.0)
            self.last_t = grow(self.last_t, n, -np.inf)
        obs = observed(x)
        med, sigma = self._group_stats(x, obs, layout)
        if layout is not self._dir_layout:  # the direction fold as two 0/1 factors
            self._up = (layout.direction >= 0).astype(np.float64)
            self._down = -(layout.direction <= 0).astype(np.float64)
            self._dir_layout = layout
        with np.errstate(invalid="ignore", over="ignore"):
            scored = np.isnan(med)
            np.logical_not(scored, out=scored)
            scored &= obs
            dt = np.subtract(t, self.last_t)
            np.maximum(dt, 0.0, out=dt)
            # A group's spread is stable over time, one tick's MAD is not (3 peers!): use the
            # larger of this tick's spread and its time-smoothed value.
            scale_w = np.multiply(dt, -1.0 / self.scale_half_life_s)
            np.exp2(scale_w, out=scale_w)
            scale_w *= self.scale_w
            scale_w += 1.0
            scale_var = np.multiply(sigma, sigma)
            scale_var -= self.scale_var
            scale_var /= scale_w
            scale_var += self.scale_var
            den = np.sqrt(scale_var)
            np.maximum(sigma, den, out=den)
            z = np.subtract(x, med, out=med)
            z /= den
            np.maximum(z, -SCORE_CAP, out=z)  # np.clip, without its call overhead
            np.minimum(z, SCORE_CAP, out=z)
            if self.smooth_half_life_s > 0:
                keep = np.multiply(dt, -1.0 / self.smooth_half_life_s, out=dt)
                np.exp2(keep, out=keep)
                fresh = np.subtract(1.0, keep, out=den)
                fresh *= z
                keep *= self.smoothed
                z = np.add(keep, fresh, out=z)
            np.copyto(self.smoothed, z, where=scored)
            np.copyto(self.scale_var, scale_var, where=scored)
            np.copyto(self.scale_w, scale_w, where=scored)
            judged = self.count >= self.warmup
            judged &= scored
            self.count += scored
            np.copyto(self.last_t, t, where=scored)
            if self.baseline is not None:
                np.copyto(z, np.nan, where=~judged)
                # 0 wherever the baseline did not score (and always finite)
                z, _ = self.baseline.step(t, z)
            else:
                z = np.nan_to_num(z, copy=False)
        # base.directional with cached factors, then 0 where not judged against peers
        score = np.multiply(z, self._up)
        np.maximum(score, np.multiply(z, self._down, out=sigma), out=score)
        np.maximum(score, 0.0, out=score)
        np.minimum(score, SCORE_CAP, out=score)
        score *= judged
        return score

    def state_dict(self) -> dict[str, np.ndarray]:
        state = {k: getattr(self, k).copy() for k in self._KEYS}
        if self.baseline is not None:
            state.update(self.baseline.state_dict(self._BASELINE))
        return state

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        own = {k: state[k] for k in self._KEYS if k in state}
        check_state(own, self._KEYS, "peers")
        for k in self._KEYS:
            setattr(self, k, np.array(own[k], dtype=np.float64))
        if self.baseline is not None:
            self.baseline.load_state_dict(state, self._BASELINE)
