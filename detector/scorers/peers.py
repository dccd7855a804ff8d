"""Peer deviation: each column against the other members of its peer group, this tick.

Groups (from ``ColumnLayout``):
- GPU peers: columns with the same (node, team, signal) and ``gpu >= 0`` (the GPUs of one node
  that run the same workload: a node shared by several jobs has a group per job);
- node peers: node-level columns (``gpu == -1``) with the same (cohort, signal).

Synchronous training moves all peers together (a checkpoint, a job restart, a common swing),
so the group median absorbs common-mode movement and a lone deviant stands out. Per tick and
group, over the members observed this tick (itself included): ``med`` = median, ``sigma`` =
``max(1.4826 · MAD, mad_floor_rel · |med| + mad_floor_abs)``. One tick's MAD of a small group
(3 nodes of a cohort) can be near 0 by chance, so each column also keeps an EW average of its
group's sigma² (``scale_half_life_s``) and divides by the larger of the two:
``(x - med) / max(sigma, sqrt(ew sigma²))``. Groups with fewer than ``min_peers`` observed
members score 0. A member back from a gap (observed after more than ``GAP_RATIO`` = 1.5 times
its usual interval, the shortest recent one: its scrape was lost, so a counter's rate spans
two ticks) is not compared with its peers that tick: when every peer's rate moves in that
very tick (a checkpoint ends), its two-tick average sits between the old and new level and
would read as a lone deviant. It
scores 0 that tick and its next tick is judged as usual (a real deviant's alert does not end on
a timeout: the pipeline keeps a node's alert state through ticks that miss its evidence). Only
``LATE_TICKS_TO_LEARN`` = 8 late ticks in a row make a longer interval the usual one (a new
scrape interval), so even a node that loses every other scrape for a while stays late. The
signed deviation is smoothed per column with ``smooth_half_life_s`` (time-aware, that column's
own last update), so one noisy tick does not dominate; 0 disables smoothing. The score is the
directional smoothed deviation; a column scores 0 for its first ``warmup`` peer-judged ticks
while the smoothed group scale settles.

A GPU that joins other GPUs' team (its job ended and it joins the idle GPUs beside it, or the
reverse: ``ColumnLayout.team``) is not judged, nor counted in its new group's median, for
``team_settle_s`` (10 min): a GPU whose job just ended is still hot and drawing down (a
heatsink's time constant is minutes), and beside the idle GPUs it would read as a lone deviant
until it cools. GPUs that move together (a node's next job, all of them under a new pod) are
judged as usual.

Habit: each column's usual deviation (a GPU slot that always runs hotter) is learnt by a
robust EW baseline (``baseline_half_life_s``) and scored is the departure from it. That
baseline does not learn from excursions (clipped updates), so a node whose lone job leaves the
cohort for a few minutes every hour (its checkpoint, while the other nodes train) would score
each time as a fresh deviant. So each column is also habituated to its recurring excursions,
as the counts scorer is to recurring bursts (peer_kernels._habituate): runs of scores at or
above ``excursion_z``, closer than ``excursion_window_s`` together, are tallied with their peak
and length (EW, the baseline's half-life, else 6 h); a new run loses
``runs / (habituation_n + runs)`` of its score up to the usual peak, for at most twice the usual
length (at least the window). The first excursion counts in full, the excess of a deeper one
counts in full, and one that outlasts the habit is judged in full from then on (a failing
node's deviation persists). ``excursion_z`` None turns this off.

Speed: the group structure is rebuilt only when the layout changes (length or identity):
groups are found with ``np.lexsort`` (``peer_groups``); groups of up to 8 (a node's GPUs)
become rows of a padded matrix, larger ones (a cohort's nodes) CSR. Each tick is then one
kernel call (peer_kernels.peer_step): per group its observed values sorted (a branch-free
sorting network for up to 8, eight groups at a time, else insertion) for the median and again
for the MAD, then per column the update and the habit baseline, with no Python loop over
groups or columns.
"""

from __future__ import annotations

import math
from typing import ClassVar

import numpy as np

from ..errors import ConfigError
from ..model import FloatArray, IntArray
from .base import ColumnLayout, KernelScorer
from .kernels.peers import BLOCK, group_stats, peer_step
from .kernels.peers import MAD_SCALE as MAD_SCALE
from .zscore import RobustEWBaseline, grow, load_arrays

_NO_BASELINE = tuple(np.zeros(0) for _ in range(6))  # peer_step without a habit baseline
_HABIT_HALF_LIFE_S = 6 * 3600.0  # the habituation's half-life where there is no baseline


def peer_groups(layout: ColumnLayout, min_size: int) -> list[IntArray]:
    """Padded member matrices (rows = groups, -1 = padding), one per size class; groups
    smaller than ``min_size`` are left out (their columns never score)."""
    n = len(layout)
    if n == 0:
        return []
    is_gpu = layout.gpu >= 0
    entity = np.where(is_gpu, layout.node, layout.cohort)
    team = np.zeros(n, dtype=np.int64) if layout.team is None else np.where(is_gpu, layout.team, 0)
    order = np.lexsort((layout.signal, team, entity, is_gpu))
    keys = np.stack([is_gpu[order], entity[order], team[order], layout.signal[order]])
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


def _row_ids(*columns: IntArray) -> IntArray:
    """Per row of the ``columns`` (equal lengths), a dense id of its tuple of values: equal
    tuples, equal ids. Built from each column's 1-D ranks (``np.unique(axis=0)`` sorts the
    rows as a structured view, several times slower)."""
    key = np.zeros(columns[0].shape[0], dtype=np.int64)
    for column in columns:
        values, rank = np.unique(column, return_inverse=True)
        key = key * values.shape[0] + rank.reshape(-1)
    ids: IntArray = np.unique(key, return_inverse=True)[1].reshape(-1)
    return ids


class PeerDeviation(KernelScorer):
    """Scorer: robust deviation of each column from its peer group's median, smoothed."""

    name = "peers"
    _KEYS = (
        "smoothed", "scale_var", "scale_w", "count", "last_t", "interval", "late_run",
        "settle_until",
    )  # fmt: skip
    # the habituation to recurring excursions (peer_kernels._habituate)
    _HABIT = ("habit_runs", "habit_peaks", "habit_lengths", "run_start", "run_last", "run_peak")
    _HABIT_EMPTY: ClassVar[dict[str, float]] = {
        k: -np.inf if k in ("run_start", "run_last") else 0.0 for k in _HABIT
    }
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
        excursion_z: float | None = 6.0,
        excursion_window_s: float = 600.0,
        habituation_n: float = 2.0,
        team_settle_s: float = 600.0,
    ) -> None:
        if min_peers < 2:
            raise ConfigError(f"min_peers must be >= 2, got {min_peers}")
        if not scale_half_life_s > 0:
            raise ConfigError(f"scale_half_life_s must be > 0, got {scale_half_life_s}")
        if smooth_half_life_s < 0 or mad_floor_rel < 0 or not mad_floor_abs > 0:
            raise ConfigError("peers needs smooth_half_life_s >= 0, mad floors >= 0 and > 0")
        if excursion_z is not None and not (
            excursion_z > 0 and excursion_window_s > 0 and habituation_n > 0
        ):
            raise ConfigError("peers needs excursion_z, excursion_window_s, habituation_n > 0")
        if not team_settle_s >= 0:
            raise ConfigError(f"team_settle_s must be >= 0, got {team_settle_s}")
        self.team_settle_s = float(team_settle_s)
        # GPU columns that changed team (workload) lately, and per column until when it
        # settles (-inf: not settling; saved with the state, so a restart keeps it)
        self._settling = np.zeros(0, dtype=np.int64)
        self.settle_until = np.zeros(0)
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
        self.interval = np.zeros(0)  # usual elapsed time between judged ticks, 0 unknown
        self.late_run = np.zeros(0)  # consecutive observed ticks that came late (peer_kernels)
        # Habituation (module docstring): per column, EW tallies of its past excursions and
        # the current one's start, last tick and peak; empty arrays for none.
        self.habituates = excursion_z is not None
        self.habit_runs = np.zeros(0)  # EW count of the column's past excursions
        self.habit_peaks = np.zeros(0)  # EW sum of their peak scores
        self.habit_lengths = np.zeros(0)  # EW sum of their lengths (s)
        self.run_start = np.zeros(0)  # the current (or last) excursion's first tick
        self.run_last = np.zeros(0)  # its last tick at or above excursion_z
        self.run_peak = np.zeros(0)  # its highest score so far
        self._h = np.array(
            [
                excursion_z or 0.0,
                excursion_window_s,
                habituation_n,
                -1.0 / (baseline_half_life_s or _HABIT_HALF_LIFE_S),
            ]
        )
        self._habit_last = np.zeros(0)  # per block of columns its last excursion time
        self._layout: ColumnLayout | None = None
        self._floor = np.zeros(0)  # per group row: quantization sigma of its readings (none)
        # peer_step's parameter vectors, built once
        smooth = -1.0 / self.smooth_half_life_s if self.smooth_half_life_s > 0 else 0.0
        self._q = np.array([-1.0 / self.scale_half_life_s, smooth, self.warmup])
        self._g = np.array([self.min_peers, self.mad_floor_rel, self.mad_floor_abs])
        self._groups: tuple[IntArray, IntArray, IntArray, IntArray] = (
            np.zeros((0, 8), dtype=np.int64),
            np.zeros(0, dtype=np.int64),
            np.zeros(1, dtype=np.int64),
            np.zeros(0, dtype=np.int64),
        )
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
        """The groups as the kernel takes them (peer_kernels.group_stats), rebuilt only when
        the layout changes: groups of up to 8 as rows of a padded matrix, larger ones as CSR,
        and per column the row of its group."""
        # numpy over the size classes (a Python loop over the groups cost ~3 ms for 30k
        # columns, on the first tick and on every layout change). A group's members fill the
        # front of its row in peer_groups' matrices, so those rows are copied as they are.
        matrices = peer_groups(layout, self.min_peers)
        small_m = [m for m in matrices if m.shape[1] <= 8]
        large_m = [m for m in matrices if m.shape[1] > 8]
        n_small = sum(m.shape[0] for m in small_m)
        padded = np.full((n_small, 8), -1, dtype=np.int64)
        r0 = 0
        for m in small_m:
            padded[r0 : r0 + m.shape[0], : m.shape[1]] = m
            r0 += m.shape[0]
        large = [m[m >= 0] for m in large_m]  # row by row, each row's members in order
        sizes = np.concatenate([np.zeros(0, dtype=np.int64), *((m >= 0).sum(1) for m in large_m)])
        n_large = sizes.shape[0]
        starts = np.zeros(n_large + 1, dtype=np.int64)
        np.cumsum(sizes, out=starts[1:])
        members = np.concatenate([np.zeros(0, dtype=np.int64), *large])
        row_of = np.full(len(layout), n_small + n_large, dtype=np.int64)
        slot_row, slot = np.nonzero(padded >= 0)
        row_of[padded[slot_row, slot]] = slot_row
        row_of[members] = n_small + np.repeat(np.arange(n_large), sizes)
        self._groups = (padded, members, starts, row_of)
        # A rounded signal's readings carry quantization noise of step / sqrt(12) (uniform
        # rounding error): a group that agrees exactly has no smaller spread than that, so a
        # one-step move (a throttle share read 0.1 against peers at 0) is ~3.5 sigma, not 40.
        # Per group row (small, large, the ungrouped row last), as peer_step reads it.
        res = layout.resolution
        self._floor = np.zeros(0)
        if res is not None and res.any():
            first = np.concatenate([padded[:, 0], members[starts[:-1]], [-1]]).astype(np.int64)
            self._floor = np.where(first >= 0, res[first] / math.sqrt(12.0), 0.0)
        self._layout = layout

    def group_stats(self, x: FloatArray, layout: ColumnLayout) -> tuple[FloatArray, FloatArray]:
        """Per column, its group's median and floored MAD sigma over the members observed this
        tick (both NaN where the group has fewer than ``min_peers`` observed members). The
        raw statistics: scoring also floors sigma at a rounded signal's quantization noise."""
        if layout is not self._layout:
            self._refresh_groups(layout)
        med, sigma = np.empty(len(layout)), np.empty(len(layout))
        group_stats(
            x,
            None,
            self._groups,
            self.min_peers,
            self.mad_floor_rel,
            self.mad_floor_abs,
            med,
            sigma,
        )
        return med, sigma

    def _step(
        self, t: float, x: FloatArray, cols: IntArray | None, layout: ColumnLayout, out: FloatArray
    ) -> None:
        """One tick: the group statistics, then one fused pass over the columns
        (peer_kernels.peer_step); columns not judged against peers keep their state."""
        n = x.shape[0] if cols is None else cols.shape[0]
        if n > self.smoothed.shape[0]:
            self.smoothed = grow(self.smoothed, n, 0.0)
            self.scale_var = grow(self.scale_var, n, 0.0)
            self.scale_w = grow(self.scale_w, n, 0.0)
            self.count = grow(self.count, n, 0.0)
            self.last_t = grow(self.last_t, n, -np.inf)
            self.interval = grow(self.interval, n, 0.0)
            self.late_run = grow(self.late_run, n, 0.0)
            self.settle_until = grow(self.settle_until, n, -np.inf)
            if self.habituates:
                for k, fill in self._HABIT_EMPTY.items():
                    setattr(self, k, grow(getattr(self, k), n, fill))
                self._habit_blocks()
        if layout is not self._layout:
            self._note_team_changes(t, layout)
            self._refresh_groups(layout)
        if self._settling.size:
            x = self._without_settling(t, x, cols)
        q, g = self._q, self._g
        state = (
            self.smoothed, self.scale_var, self.scale_w, self.count, self.last_t, self.interval,
            self.late_run,
        )  # fmt: skip
        if self.baseline is None:
            base, p = _NO_BASELINE, _NO_BASELINE[0]
        else:
            self.baseline.grow(n)
            base, p = self.baseline.arrays(), self.baseline.params()
        habit = (
            (self.habit_runs, self.habit_peaks, self.habit_lengths, self.run_start,
             self.run_last, self.run_peak)
            if self.habituates else _NO_BASELINE
        )  # fmt: skip
        peer_step(
            float(t), x, cols, self._groups, g, layout.direction, state, q, base, p,
            self._floor, habit, self._h, self._habit_last, out,
        )  # fmt: skip

    def _note_team_changes(self, t: float, layout: ColumnLayout) -> None:
        """GPU columns that the new layout moves into a group of other GPUs than before (a
        team, the GPU's workload, whose other members came from elsewhere) settle for
        ``team_settle_s``: a GPU whose job just ended is still hot and drawing down, and its
        new peers (the idle GPUs beside it) would see a lone deviant for minutes. GPUs that
        move together (a node's next job: every GPU under a new pod) stay judged."""
        old = self._layout
        if old is None or old.team is None or layout.team is None or not self.team_settle_s:
            return
        m = min(len(old), len(layout))
        moved = (old.team[:m] != layout.team[:m]) & (layout.gpu[:m] >= 0)
        if not moved.any():
            return
        # Groups lie within a node: only the columns of the nodes with a moved GPU (the
        # whole layout cost ~25 ms at every layout change of the 63-node demo)
        near = np.flatnonzero(np.isin(layout.node[:m], np.unique(layout.node[:m][moved])))
        group = _row_ids(layout.node[near], layout.team[near], layout.signal[near])
        # a group is mixed when its members came from more than one former team
        _, first = np.unique(_row_ids(group, old.team[near]), return_index=True)
        mixed = np.bincount(group[first]) > 1
        newcomers = near[moved[near] & mixed[group]]
        if not newcomers.size:
            return
        self.settle_until[newcomers] = t + self.team_settle_s
        self._settling = np.union1d(self._settling, newcomers)

    def _without_settling(self, t: float, x: FloatArray, cols: IntArray | None) -> FloatArray:
        """``x`` with the settling columns' values unobserved (a copy; none left: ``x``):
        they are not judged and do not count in their group's median until they settle."""
        self._settling = self._settling[self.settle_until[self._settling] > t]
        if not self._settling.size:
            return x
        masked = x.copy()
        masked[self._settling if cols is None else cols[self._settling]] = np.nan
        return masked

    def state_dict(self) -> dict[str, np.ndarray]:
        keys = self._KEYS + (self._HABIT if self.habituates else ())
        state = {k: getattr(self, k).copy() for k in keys}
        if self.baseline is not None:
            state.update(self.baseline.state_dict(self._BASELINE))
        return state

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        """A state saved before ``interval``, ``late_run``, the habituation or the settling
        existed loads with every interval unknown, no late tick counted, no excursion learnt
        and no column settling."""
        keys = self._KEYS + (self._HABIT if self.habituates else ())
        optional = {"interval": 0.0, "late_run": 0.0, "settle_until": -np.inf}
        load_arrays(self, state, keys, "peers", optional={**optional, **self._HABIT_EMPTY})
        self._settling = np.flatnonzero(self.settle_until > -np.inf)
        if self.habituates:
            self._habit_blocks()
        if self.baseline is not None:
            self.baseline.load_state_dict(state, self._BASELINE)

    def _habit_blocks(self) -> None:
        """peer_step's per-block times of the last excursion, from the columns' own, sized
        to the columns."""
        n = self.run_last.shape[0]
        self._habit_last = np.full(-(-n // BLOCK), -np.inf)
        if n:
            np.maximum.at(self._habit_last, np.arange(n) // BLOCK, self.run_last)
