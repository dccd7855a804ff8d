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
from .kernels import MAX_ABS_VALUE, decays, ew_step, fold, gathered, scatter, scratch

MAD_SCALE = 1.4826  # MAD -> sigma for Gaussian noise


Eight = tuple[float, float, float, float, float, float, float, float]


@jit
def _sorted8(v: Eight) -> Eight:
    """``v`` sorted by Knuth's 19-comparator network: branch-free min/max pairs on values in
    registers, so sorting a node's 8 GPUs costs no mispredicted branches (an insertion
    sort's dominated the tick). Pad unused slots with +inf: they sort last."""
    v0, v1, v2, v3, v4, v5, v6, v7 = v
    v0, v2 = min(v0, v2), max(v0, v2)
    v1, v3 = min(v1, v3), max(v1, v3)
    v4, v6 = min(v4, v6), max(v4, v6)
    v5, v7 = min(v5, v7), max(v5, v7)
    v0, v4 = min(v0, v4), max(v0, v4)
    v1, v5 = min(v1, v5), max(v1, v5)
    v2, v6 = min(v2, v6), max(v2, v6)
    v3, v7 = min(v3, v7), max(v3, v7)
    v0, v1 = min(v0, v1), max(v0, v1)
    v2, v3 = min(v2, v3), max(v2, v3)
    v4, v5 = min(v4, v5), max(v4, v5)
    v6, v7 = min(v6, v7), max(v6, v7)
    v2, v4 = min(v2, v4), max(v2, v4)
    v3, v5 = min(v3, v5), max(v3, v5)
    v1, v4 = min(v1, v4), max(v1, v4)
    v3, v6 = min(v3, v6), max(v3, v6)
    v1, v2 = min(v1, v2), max(v1, v2)
    v3, v4 = min(v3, v4), max(v3, v4)
    v5, v6 = min(v5, v6), max(v5, v6)
    return (v0, v1, v2, v3, v4, v5, v6, v7)


@jit
def _pick(v: Eight, i: int) -> float:
    """``v[i]`` by selection (vectorizes, unlike an indexed tuple)."""
    return (
        v[0] if i <= 0 else v[1] if i == 1 else v[2] if i == 2 else v[3] if i == 3
        else v[4] if i == 4 else v[5] if i == 5 else v[6] if i == 6 else v[7]
    )  # fmt: skip


@jit
def _mad_sigma(
    count: int, med: float, mad: float, min_peers: int, floor_rel: float, floor_abs: float
) -> tuple[float, float]:
    """(median, floored MAD sigma), both NaN for fewer than ``min_peers`` observed members."""
    sigma = max(MAD_SCALE * mad, floor_rel * abs(med) + floor_abs)
    few = count < min_peers
    return (np.nan if few else med), (np.nan if few else sigma)


@jit
def group_stats(
    x_row: FloatArray,
    cols: IntArray | None,
    groups: tuple[IntArray, IntArray, IntArray, IntArray],
    min_peers: int,
    floor_rel: float,
    floor_abs: float,
    med_out: FloatArray,
    sigma_out: FloatArray,
) -> None:
    """Per column, its group's median and floored MAD sigma over the members observed this
    tick; NaN where the group has fewer than ``min_peers`` observed members or none at all.
    Column ``j``'s value is ``x_row[cols[j]]``, or ``x_row[j]`` for ``cols`` None.

    ``groups`` = (small, members, starts, row_of): groups of up to 8 as rows of ``small``
    (padded with -1), larger ones as CSR (``members[starts[k]:starts[k + 1]]``), and per
    column its group's row (small rows first, then the large groups; the last row for none)."""
    small, members, starts, row_of = groups
    x = gathered(x_row, cols)
    n_small, n_large = small.shape[0], starts.shape[0] - 1
    med_g = np.empty(n_small + n_large + 1)
    sigma_g = np.empty(n_small + n_large + 1)
    for g in range(n_small):  # vectorizes: 8 values per group, sorted by the network
        # written out for the 8 slots (an inner loop would be what gets vectorized)
        c0, c1, c2, c3 = small[g, 0], small[g, 1], small[g, 2], small[g, 3]
        c4, c5, c6, c7 = small[g, 4], small[g, 5], small[g, 6], small[g, 7]
        x0, x1, x2, x3, x4, x5, x6, x7 = x[c0], x[c1], x[c2], x[c3], x[c4], x[c5], x[c6], x[c7]
        # padding (-1, read as x[-1]) and unobserved values count as +inf: they sort last
        o0 = (c0 >= 0) & (abs(x0) <= MAX_ABS_VALUE)
        o1 = (c1 >= 0) & (abs(x1) <= MAX_ABS_VALUE)
        o2 = (c2 >= 0) & (abs(x2) <= MAX_ABS_VALUE)
        o3 = (c3 >= 0) & (abs(x3) <= MAX_ABS_VALUE)
        o4 = (c4 >= 0) & (abs(x4) <= MAX_ABS_VALUE)
        o5 = (c5 >= 0) & (abs(x5) <= MAX_ABS_VALUE)
        o6 = (c6 >= 0) & (abs(x6) <= MAX_ABS_VALUE)
        o7 = (c7 >= 0) & (abs(x7) <= MAX_ABS_VALUE)
        # int() each: numpy bools (the interpreted fallback) add as logical or
        count = int(o0) + int(o1) + int(o2) + int(o3) + int(o4) + int(o5) + int(o6) + int(o7)
        inf = np.inf
        v = (
            x0 if o0 else inf, x1 if o1 else inf, x2 if o2 else inf, x3 if o3 else inf,
            x4 if o4 else inf, x5 if o5 else inf, x6 if o6 else inf, x7 if o7 else inf,
        )  # fmt: skip
        v = _sorted8(v)
        lo, hi = (count - 1) // 2, count // 2
        med = 0.5 * (_pick(v, lo) + _pick(v, hi))
        med = med if count > 0 else 0.0  # no member observed: no inf - inf below
        # the distances from the median (inf for the padding), sorted the same way
        d = _sorted8(
            (abs(v[0] - med), abs(v[1] - med), abs(v[2] - med), abs(v[3] - med),
             abs(v[4] - med), abs(v[5] - med), abs(v[6] - med), abs(v[7] - med))
        )  # fmt: skip
        mad = 0.5 * (_pick(d, lo) + _pick(d, hi))
        med_g[g], sigma_g[g] = _mad_sigma(count, med, mad, min_peers, floor_rel, floor_abs)
    widest = 0
    for k in range(n_large):
        widest = max(widest, starts[k + 1] - starts[k])
    buf = np.empty(widest)
    for k in range(n_large):  # the nodes of a cohort: insertion sort, then a merge
        count = 0
        for i in range(starts[k], starts[k + 1]):
            xv = x[members[i]]
            if abs(xv) <= MAX_ABS_VALUE:
                buf[count] = xv
                count += 1
        for a in range(1, count):
            u = buf[a]
            b = a - 1
            while b >= 0 and buf[b] > u:
                buf[b + 1] = buf[b]
                b -= 1
            buf[b + 1] = u
        lo, hi = max((count - 1) // 2, 0), count // 2
        med = 0.5 * (buf[lo] + buf[hi]) if count else np.nan
        # The sorted values' distances from the median are two ascending runs (leftwards
        # from the middle, rightwards from it): merge them up to the hi-th.
        left, right, d_lo, d_hi = hi - 1, hi, 0.0, 0.0
        for r in range(hi + 1 if count else 0):
            if left < 0 or (right < count and buf[right] - med <= med - buf[left]):
                dist = buf[right] - med
                right += 1
            else:
                dist = med - buf[left]
                left -= 1
            if r == lo:
                d_lo = dist
            d_hi = dist
        mad = 0.5 * (d_lo + d_hi)
        row = n_small + k
        med_g[row], sigma_g[row] = _mad_sigma(count, med, mad, min_peers, floor_rel, floor_abs)
    med_g[n_small + n_large] = np.nan
    sigma_g[n_small + n_large] = np.nan
    for j in range(med_out.shape[0]):
        med_out[j] = med_g[row_of[j]]
        sigma_out[j] = sigma_g[row_of[j]]


@jit
def peer_step(
    t: float,
    x_row: FloatArray,
    cols: IntArray | None,
    med: FloatArray,
    sigma: FloatArray,
    direction: IntArray,
    state: tuple[FloatArray, ...],
    q: FloatArray,
    base: tuple[FloatArray, ...],
    p: FloatArray,
    score_out: FloatArray,
) -> None:
    """One PeerDeviation tick per column from its group's ``med``/``sigma`` (group_stats);
    ``x_row``, ``cols`` and ``score_out`` by kernels.py's column convention.

    ``state`` = (smoothed, scale_var, scale_w, count, last_t); ``q`` = (-1 / scale half-life,
    -1 / smooth half-life or 0 for no smoothing, warmup); ``base`` = the habit baseline's
    arrays with parameters ``p``, or empty arrays for none."""
    smoothed, scale_var, scale_w, count, last_t = state
    neg_inv_scale, neg_inv_smooth, warmup = q[0], q[1], q[2]
    x = gathered(x_row, cols)
    scores = scratch(score_out, cols)
    n = x.shape[0]
    scale_d = np.empty(n)
    decays(t, last_t, neg_inv_scale, scale_d)
    smooth_d = np.zeros(n)  # keep nothing of the old value: no smoothing
    if neg_inv_smooth != 0.0:
        decays(t, last_t, neg_inv_smooth, smooth_d)
    z_all = np.empty(n)
    judged_all = np.empty(n, dtype=np.bool_)
    for j in range(n):  # every load unconditional, choices by selection: vectorizes
        xj, m, sg, d, md = x[j], med[j], sigma[j], scale_d[j], smooth_d[j]
        sm0, sv0, sw0, c, lt = smoothed[j], scale_var[j], scale_w[j], count[j], last_t[j]
        scored = (m == m) & (abs(xj) <= MAX_ABS_VALUE)  # judged against its peers this tick
        # A group's spread is stable over time, one tick's MAD is not (3 peers!): use the
        # larger of this tick's spread and its time-smoothed value.
        w = d * sw0 + 1.0
        sv = (sg * sg - sv0) / w + sv0
        z = (xj - m) / max(sg, math.sqrt(sv))
        z = min(max(z, -SCORE_CAP), SCORE_CAP)
        z = md * sm0 + (1.0 - md) * z
        smoothed[j] = z if scored else sm0
        scale_var[j] = sv if scored else sv0
        scale_w[j] = w if scored else sw0
        judged = scored & (c >= warmup)
        count[j] = c + scored
        last_t[j] = t if scored else lt
        z_all[j] = z if judged else np.nan  # what the habit baseline sees (NaN: nothing)
        judged_all[j] = judged
    if base[0].shape[0] > 0:  # the departure from the column's habit of standing out
        ew_step(t, z_all, None, base, p, direction, scores, np.empty(n, dtype=np.bool_))
    else:
        for j in range(n):
            scores[j] = fold(z_all[j], direction[j])
    for j in range(n):
        scores[j] = scores[j] if judged_all[j] else 0.0
    scatter(scores, cols, score_out)
