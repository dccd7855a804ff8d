"""Fused kernels (numba) of PeerDeviation: per-group median and MAD, then the per-column update.

Groups come as CSR: ``members[starts[g]:starts[g + 1]]`` are the columns of group ``g`` (only
groups of at least ``min_peers`` columns). Peer groups are small (8 GPUs of a node, the nodes of
a cohort), so each group's observed values are insertion-sorted in a small buffer: no padding,
no NaN sentinels, no per-size-class matrices. The arithmetic is peers.py's, in the same order,
so the statistics are bit-identical to a per-group ``np.median`` (see kernels.py for why these
are kernels and for the ``exp2`` caveat).
"""

from __future__ import annotations

import math

import numpy as np

from ..model import FloatArray, IntArray
from .base import SCORE_CAP
from .jit import jit
from .kernels import MAX_ABS_VALUE, NO_DECAY, decay, ew_update, fold

MAD_SCALE = 1.4826  # MAD -> sigma for Gaussian noise


# Knuth's 19-comparator sorting network for 8 values: branch-free min/max pairs, so sorting
# a node's 8 GPUs costs no mispredicted branches (an insertion sort's dominate the tick).
_NETWORK8 = (
    (0, 2), (1, 3), (4, 6), (5, 7), (0, 4), (1, 5), (2, 6), (3, 7), (0, 1), (2, 3),
    (4, 5), (6, 7), (2, 4), (3, 5), (1, 4), (3, 6), (1, 2), (3, 4), (5, 6),
)  # fmt: skip


@jit
def _sort8(buf: FloatArray) -> None:
    """Sort ``buf[:8]`` in place (pad unused slots with +inf: they sort last)."""
    for a, b in _NETWORK8:
        lo, hi = buf[a], buf[b]
        buf[a] = min(lo, hi)
        buf[b] = max(lo, hi)


@jit
def group_stats(
    x: FloatArray,
    members: IntArray,
    starts: IntArray,
    min_peers: int,
    floor_rel: float,
    floor_abs: float,
    med_out: FloatArray,
    sigma_out: FloatArray,
) -> None:
    """Per column, its group's median and floored MAD sigma over the members observed this
    tick; NaN where the group has fewer than ``min_peers`` observed members or none at all."""
    med_out[:] = np.nan
    sigma_out[:] = np.nan
    widest = 0
    for g in range(starts.shape[0] - 1):
        widest = max(widest, starts[g + 1] - starts[g])
    buf = np.empty(max(widest, 8))
    for g in range(starts.shape[0] - 1):
        count = 0
        for i in range(starts[g], starts[g + 1]):
            v = x[members[i]]
            if abs(v) <= MAX_ABS_VALUE:
                buf[count] = v
                count += 1
        if count < min_peers:
            continue
        small = starts[g + 1] - starts[g] <= 8
        if small:
            for a in range(count, 8):
                buf[a] = np.inf
            _sort8(buf)
        else:  # larger groups (the nodes of a cohort): insertion sort
            for a in range(1, count):
                v = buf[a]
                b = a - 1
                while b >= 0 and buf[b] > v:
                    buf[b + 1] = buf[b]
                    b -= 1
                buf[b + 1] = v
        lo, hi = (count - 1) // 2, count // 2
        med = 0.5 * (buf[lo] + buf[hi])
        if small:  # the distances from the median, sorted by the network again
            for a in range(count):
                buf[a] = abs(buf[a] - med)
            _sort8(buf)
            d_lo, d_hi = buf[lo], buf[hi]
        else:
            # The sorted values' distances from the median are two ascending runs (leftwards
            # from the middle, rightwards from it): merge them up to the hi-th.
            left, right, d_lo, d_hi = hi - 1, hi, 0.0, 0.0
            for r in range(hi + 1):
                if left < 0 or (right < count and buf[right] - med <= med - buf[left]):
                    d = buf[right] - med
                    right += 1
                else:
                    d = med - buf[left]
                    left -= 1
                if r == lo:
                    d_lo = d
                d_hi = d
        mad = 0.5 * (d_lo + d_hi)
        sigma = max(MAD_SCALE * mad, floor_rel * abs(med) + floor_abs)
        for i in range(starts[g], starts[g + 1]):
            med_out[members[i]] = med
            sigma_out[members[i]] = sigma


@jit
def peer_step(
    t: float,
    x: FloatArray,
    med: FloatArray,
    sigma: FloatArray,
    direction: IntArray,
    state: tuple[FloatArray, ...],
    q: FloatArray,
    base: tuple[FloatArray, ...],
    p: FloatArray,
    score_out: FloatArray,
) -> None:
    """One PeerDeviation tick per column from its group's ``med``/``sigma`` (group_stats).

    ``state`` = (smoothed, scale_var, scale_w, count, last_t); ``q`` = (-1 / scale half-life,
    -1 / smooth half-life or 0 for no smoothing, warmup); ``base`` = the habit baseline's
    arrays with parameters ``p``, or empty arrays for none."""
    smoothed, scale_var, scale_w, count, last_t = state
    neg_inv_scale, neg_inv_smooth, warmup = q[0], q[1], q[2]
    has_base = base[0].shape[0] > 0
    mean, var, w_mean, w_var, b_count, b_last = base
    prm = (p[0], p[1], p[2], p[3], p[4], p[5])
    scale_cache, smooth_cache, cache = NO_DECAY, NO_DECAY, NO_DECAY  # and the baseline's
    for j in range(x.shape[0]):
        score_out[j] = 0.0
        xj = x[j]
        judged = False
        z = np.nan
        if not math.isnan(med[j]) and abs(xj) <= MAX_ABS_VALUE:  # judged against its peers
            dt = max(t - last_t[j], 0.0)
            sd, scale_cache = decay(dt, neg_inv_scale, scale_cache)
            # A group's spread is stable over time, one tick's MAD is not (3 peers!): use the
            # larger of this tick's spread and its time-smoothed value.
            w = sd * scale_w[j] + 1.0
            sv = (sigma[j] * sigma[j] - scale_var[j]) / w + scale_var[j]
            z = (xj - med[j]) / max(sigma[j], math.sqrt(sv))
            z = min(max(z, -SCORE_CAP), SCORE_CAP)
            if neg_inv_smooth != 0.0:
                md, smooth_cache = decay(dt, neg_inv_smooth, smooth_cache)
                z = md * smoothed[j] + (1.0 - md) * z
            smoothed[j] = z
            scale_var[j] = sv
            scale_w[j] = w
            judged = count[j] >= warmup
            count[j] += 1.0
            last_t[j] = t
        if has_base:  # the departure from the column's habit of standing out (NaN: unseen)
            st = (mean[j], var[j], w_mean[j], w_var[j], b_count[j], b_last[j])
            z, _, st, cache = ew_update(t, z if judged else np.nan, st, prm, cache)
            mean[j], var[j], w_mean[j], w_var[j], b_count[j], b_last[j] = st
        if judged:
            score_out[j] = fold(z, direction[j])
