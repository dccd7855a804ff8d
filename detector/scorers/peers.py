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
(median, then MAD) and scatters, with no Python loop over groups or columns.
"""

from __future__ import annotations

import numpy as np

from ..errors import ConfigError
from ..model import FloatArray, IntArray
from .base import SCORE_CAP, ColumnLayout, directional
from .zscore import RobustEWBaseline, check_state, grow, observed

MAD_SCALE = 1.4826  # MAD -> sigma for Gaussian noise


def _median_rows(sorted_rows: FloatArray, count: IntArray) -> FloatArray:
    """Median of each row's first ``count`` entries (rows sorted ascending, NaN last)."""
    lo = np.maximum((count - 1) // 2, 0)[:, None]
    hi = (count // 2)[:, None]
    a = np.take_along_axis(sorted_rows, lo, axis=1)[:, 0]
    b = np.take_along_axis(sorted_rows, hi, axis=1)[:, 0]
    return 0.5 * (a + b)


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

    def group_stats(self, x: FloatArray, layout: ColumnLayout) -> tuple[FloatArray, FloatArray]:
        """Per column, its group's median and floored MAD sigma over the members observed this
        tick (both NaN where the group has fewer than ``min_peers`` observed members)."""
        if layout is not self._layout:
            self._groups = peer_groups(layout, self.min_peers)
            self._layout = layout
        n = x.shape[0]
        padded = np.append(np.where(observed(x), x, np.nan), np.nan)  # index -1 -> NaN
        med_col = np.full(n + 1, np.nan)
        sigma_col = np.full(n + 1, np.nan)
        for matrix in self._groups:  # one pass per size class, not per group
            vals = padded[matrix]
            count = matrix.shape[1] - np.isnan(vals).sum(axis=1)
            med = _median_rows(np.sort(vals, axis=1), count)
            spread = np.sort(np.abs(vals - med[:, None]), axis=1)
            sigma = np.maximum(
                MAD_SCALE * _median_rows(spread, count),
                self.mad_floor_rel * np.abs(med) + self.mad_floor_abs,
            )
            few = count < self.min_peers
            med[few] = np.nan
            sigma[few] = np.nan
            med_col[matrix] = med[:, None]
            sigma_col[matrix] = sigma[:, None]
        return med_col[:n], sigma_col[:n]

    def update(self, t: float, x: FloatArray, layout: ColumnLayout) -> FloatArray:
        n = x.shape[0]
        if n > self.smoothed.shape[0]:
            self.smoothed = grow(self.smoothed, n, 0.0)
            self.scale_var = grow(self.scale_var, n, 0.0)
            self.scale_w = grow(self.scale_w, n, 0.0)
            self.count = grow(self.count, n, 0.0)
            self.last_t = grow(self.last_t, n, -np.inf)
        med, sigma = self.group_stats(x, layout)
        with np.errstate(invalid="ignore", over="ignore"):
            scored = observed(x) & ~np.isnan(med)
            dt = np.maximum(t - self.last_t, 0.0)
            # A group's spread is stable over time, one tick's MAD is not (3 peers!): use the
            # larger of this tick's spread and its time-smoothed value.
            keep_scale = np.exp2(dt * (-1.0 / self.scale_half_life_s))
            scale_w = keep_scale * self.scale_w + 1.0
            scale_var = self.scale_var + (sigma * sigma - self.scale_var) / scale_w
            z = (x - med) / np.maximum(sigma, np.sqrt(scale_var))
            z = np.clip(z, -SCORE_CAP, SCORE_CAP)
            if self.smooth_half_life_s > 0:
                keep = np.exp2(dt * (-1.0 / self.smooth_half_life_s))
                z = keep * self.smoothed + (1.0 - keep) * z
            self.smoothed = np.where(scored, z, self.smoothed)
            self.scale_var = np.where(scored, scale_var, self.scale_var)
            self.scale_w = np.where(scored, scale_w, self.scale_w)
            warm = self.count >= self.warmup
            self.count = np.where(scored, self.count + 1.0, self.count)
            self.last_t = np.where(scored, t, self.last_t)
            if self.baseline is not None:
                habit_z, habit_scored = self.baseline.step(t, np.where(scored & warm, z, np.nan))
                z = np.where(habit_scored, habit_z, 0.0)
        return np.where(scored & warm, directional(np.nan_to_num(z), layout.direction), 0.0)

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
