"""Fused kernels (numba) of PeerDeviation: per-group median and MAD, then the per-column update.

``peer_step`` does a whole tick in one call: it gathers the scorer's columns from the row once
(kernels.py's column convention), computes every group's median and MAD, then per column the
peer update (``_peer_column``), the habit baseline (``kernels.ew_step``) and the habituation to
recurring excursions (``_habituate``, entered only for a block with a column at or above the
excursion level or a run still open), block by block of ``BLOCK`` columns so the temporaries
between the passes stay in cache, and writes the scores into the full-width output.

Groups of up to 8 (a node's GPUs: nearly all of them) are rows of a padded matrix; their values
are first gathered slot-major, so the statistics loop holds one group per SIMD lane and sorts
eight groups at once with a branch-free sorting network (measured 2-3x faster than one group
at a time). Larger groups (a cohort's nodes) are CSR and sorted in a small buffer (insertion
sort up to ``INSERTION_MAX`` members, numpy's sort beyond: the demo's 630-member groups took
~80 us a tick by insertion), their MAD merged from the two sorted runs either side of the
median. The arithmetic is peers.py's, in the same order, so the statistics are bit-identical
to a per-group ``np.median`` (see kernels.py for why these are kernels and for the ``exp2`` caveat).
"""

from __future__ import annotations

import math

import numpy as np

from ...jit import jit, keep
from ...model import FloatArray, IntArray
from ..base import SCORE_CAP
from .ew import MAX_ABS_VALUE, decays, decays2, ew_step, fold, gathered, scatter, scratch

MAD_SCALE = 1.4826  # MAD -> sigma for Gaussian noise
GAP_RATIO = 1.5  # an elapsed time this much above the column's usual one is a gap
INTERVAL_GROWTH = 1.1  # how fast the usual interval follows a longer one, per judged tick
LATE_TICKS_TO_LEARN = 8  # consecutive late ticks that make their interval the usual one
INSERTION_MAX = 32  # larger groups (a big cohort's nodes) are sorted by numpy's sort instead
BLOCK = 2048  # columns per block of peer_step's per-column passes (16 KB per temporary)


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
def _pick(v: Eight, i: float) -> float:
    """``v[i]`` (``v[0]`` for ``i`` <= 0) by selection (vectorizes, unlike an indexed tuple)."""
    return (
        v[0] if i <= 0.0 else v[1] if i == 1.0 else v[2] if i == 2.0 else v[3] if i == 3.0
        else v[4] if i == 4.0 else v[5] if i == 5.0 else v[6] if i == 6.0 else v[7]
    )  # fmt: skip


@jit
def _mad_sigma(
    count: float, med: float, mad: float, min_peers: float, floor_rel: float, floor_abs: float
) -> tuple[float, float]:
    """(median, floored MAD sigma), both NaN for fewer than ``min_peers`` observed members."""
    sigma = max(MAD_SCALE * mad, floor_rel * abs(med) + floor_abs)
    few = count < min_peers
    return (np.nan if few else med), (np.nan if few else sigma)


@jit
def _small_stats(
    x: FloatArray,
    small: IntArray,
    min_peers: int,
    floor_rel: float,
    floor_abs: float,
    med_g: FloatArray,
    sigma_g: FloatArray,
) -> None:
    """``group_stats`` for the groups of up to 8 (rows of ``small``, padded with -1): their
    values first gathered slot-major (``v[k, g]``, +inf for padding and unobserved values: they
    sort last), so the main loop handles eight groups per AVX-512 register, each lane sorting
    its group by the network."""
    n_small = small.shape[0]
    v = np.empty((8, n_small))
    for g in range(n_small):
        for k in range(8):
            c = small[g, k]
            xv = x[c] if c >= 0 else np.inf
            v[k, g] = xv if abs(xv) <= MAX_ABS_VALUE else np.inf
    inf = np.inf
    least = float(min_peers)
    for g in range(n_small):  # vectorizes: one group per lane
        x0, x1, x2, x3 = v[0, g], v[1, g], v[2, g], v[3, g]
        x4, x5, x6, x7 = v[4, g], v[5, g], v[6, g], v[7, g]
        # counts and ranks as floats: integer arithmetic (floor division of -1) here kept
        # LLVM from vectorizing the loop
        count = (
            (x0 < inf) * 1.0 + (x1 < inf) * 1.0 + (x2 < inf) * 1.0 + (x3 < inf) * 1.0
            + (x4 < inf) * 1.0 + (x5 < inf) * 1.0 + (x6 < inf) * 1.0 + (x7 < inf) * 1.0
        )  # fmt: skip
        w = _sorted8((x0, x1, x2, x3, x4, x5, x6, x7))
        lo, hi = np.floor((count - 1.0) * 0.5), np.floor(count * 0.5)  # lo -1: none observed
        med = 0.5 * (_pick(w, lo) + _pick(w, hi))
        med = med if count > 0.0 else 0.0  # no member observed: no inf - inf below
        # the distances from the median (inf for the padding), sorted the same way
        d = _sorted8(
            (abs(w[0] - med), abs(w[1] - med), abs(w[2] - med), abs(w[3] - med),
             abs(w[4] - med), abs(w[5] - med), abs(w[6] - med), abs(w[7] - med))
        )  # fmt: skip
        mad = 0.5 * (_pick(d, lo) + _pick(d, hi))
        med_g[g], sigma_g[g] = _mad_sigma(count, med, mad, least, floor_rel, floor_abs)


@jit
def _large_stats(
    x: FloatArray,
    members: IntArray,
    starts: IntArray,
    min_peers: int,
    floor_rel: float,
    floor_abs: float,
    med_g: FloatArray,
    sigma_g: FloatArray,
) -> None:
    """``group_stats`` for the larger groups (CSR; their rows follow the small groups')."""
    n_small, n_large = med_g.shape[0] - starts.shape[0], starts.shape[0] - 1
    widest = 0
    for k in range(n_large):
        widest = max(widest, starts[k + 1] - starts[k])
    buf = np.empty(widest)
    for k in range(n_large):  # the nodes of a cohort: sorted, then a merge
        count = 0
        for i in range(starts[k], starts[k + 1]):
            xv = x[members[i]]
            if abs(xv) <= MAX_ABS_VALUE:
                buf[count] = xv
                count += 1
        if count > INSERTION_MAX:  # insertion sort is quadratic: 630 members cost ~50 us
            buf[:count].sort()
        for a in range(1, count if count <= INSERTION_MAX else 0):
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


@jit
def _stats(
    x: FloatArray,
    groups: tuple[IntArray, IntArray, IntArray, IntArray],
    min_peers: int,
    floor_rel: float,
    floor_abs: float,
) -> tuple[FloatArray, FloatArray]:
    """Per group row (small, then large, then one NaN row for the ungrouped): median and
    floored MAD sigma of the observed values of ``x`` (the scorer's columns)."""
    small, members, starts, _ = groups
    rows = small.shape[0] + starts.shape[0]  # starts has one entry more than large groups
    med_g = np.empty(rows)
    sigma_g = np.empty(rows)
    _small_stats(x, small, min_peers, floor_rel, floor_abs, med_g, sigma_g)
    _large_stats(x, members, starts, min_peers, floor_rel, floor_abs, med_g, sigma_g)
    med_g[rows - 1] = np.nan
    sigma_g[rows - 1] = np.nan
    return med_g, sigma_g


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
    med_g, sigma_g = _stats(gathered(x_row, cols), groups, min_peers, floor_rel, floor_abs)
    row_of = groups[3]
    for j in range(med_out.shape[0]):
        med_out[j] = med_g[row_of[j]]
        sigma_out[j] = sigma_g[row_of[j]]


@jit
def _peer_column(
    t: float,
    xj: float,
    j: int,
    m: float,
    sg: float,
    d: float,
    md: float,
    state: tuple[FloatArray, ...],
    warmup: float,
) -> tuple[float, bool]:
    """peer_step's update of column ``j`` (value ``xj``; its group's median ``m`` and sigma
    ``sg``; decays ``d`` of the scale and ``md`` of the smoothing): returns (the smoothed
    deviation, NaN unless judged; whether judged: scored against peers and past warm-up)."""
    smoothed, scale_var, scale_w, count, last_t, interval, late_run = state
    sm0, sv0, sw0, c, lt = smoothed[j], scale_var[j], scale_w[j], count[j], last_t[j]
    observed = abs(xj) <= MAX_ABS_VALUE
    # Back from a gap (half again its usual interval): a rate over a longer window than its
    # peers' is not comparable with theirs this tick (peers.py).
    dt, iv = t - lt, interval[j]
    late = observed & (iv > 0.0) & (dt > GAP_RATIO * iv)
    scored = (m == m) & observed & ~late  # judged against its peers this tick
    # A group's spread is stable over time, one tick's MAD is not (3 peers!): use the
    # larger of this tick's spread and its time-smoothed value.
    w = d * sw0 + 1.0
    sv = (sg * sg - sv0) / w + sv0
    z = (xj - m) / max(sg, math.sqrt(sv))
    z = min(max(z, -SCORE_CAP), SCORE_CAP)
    z = md * sm0 + (1.0 - md) * z
    smoothed[j] = z if scored else keep(sm0)
    scale_var[j] = sv if scored else keep(sv0)
    scale_w[j] = w if scored else keep(sw0)
    # Back from a gap it scores 0: it was not judged. It carries no deviation of its own
    # either: an unjudged tick is the pipeline's to bridge (PipelineParams.bridge_missed_tick),
    # and a carried score counted as a new one (a one-tick spike, a lost scrape, the carry)
    # passed an alert's minimum duration on evidence from a single tick.
    judged = scored & (c >= warmup)
    count[j] = c + scored
    last_t[j] = t if scored | late else keep(lt)
    # The usual interval: the shortest recent one, allowed to grow 10% a judged tick (jitter,
    # a slightly slower scrape). A late tick teaches nothing until LATE_TICKS_TO_LEARN of
    # them come in a row (a new scrape interval: then it is the usual one): growing on each
    # late tick let a node that lost every other scrape five times learn a doubled interval,
    # and compare its next two-tick rate across a cluster-wide transition with its peers'.
    run = (late_run[j] + 1.0) * late
    learnt = run >= LATE_TICKS_TO_LEARN
    grown = dt if (iv == 0.0) | learnt else min(dt, INTERVAL_GROWTH * iv)
    interval[j] = grown if (scored | learnt) & (dt < np.inf) else keep(iv)
    late_run[j] = 0.0 if learnt else (run if observed else keep(late_run[j]))
    return (z if judged else np.nan), judged  # NaN: nothing for the habit baseline


@jit
def _habituate(
    t: float,
    out: FloatArray,
    habit: tuple[FloatArray, ...],
    h: FloatArray,
    habit_last: FloatArray,
    block: int,
) -> None:
    """Discount a column's recurring peer excursions (``out``, its scores this block, 0 where
    not judged, in place; the counts scorer's burst habituation, with a run's peak and length
    learnt too).

    An excursion is a run of judged ticks at or above ``excursion_z``, ticks less than
    ``window`` apart. At each onset the previous run is added to the column's EW tallies
    (runs, sum of their peaks, sum of their lengths; half-life from ``h``), which then stay
    fixed for the new run: it loses ``c = runs / (habituation_n + runs)`` of the part of each
    score up to the usual peak, for at most twice the usual length (and at least ``window``),
    after which it is judged in full. The first excursion counts in full; a node whose lone
    job checkpoints every hour soon scores a small fraction for it; a larger or longer
    excursion than its usual ones keeps the excess. ``habit`` = (runs, peaks, lengths,
    run_start, run_last, run_peak); ``h`` = (excursion_z, window, habituation_n, -1 /
    half-life); ``habit_last`` per block of columns the last time one of them was at or
    above excursion_z, updated here for ``block``. Called only for a block whose top score
    reaches excursion_z or while one of its runs may be open."""
    runs, peaks, lengths, run_start, run_last, run_peak = habit
    z_on, window, habituation_n, neg_inv_half_life = h[0], h[1], h[2], h[3]
    for j in range(out.shape[0]):
        z = out[j]  # 0 where not judged: keeps no run open, and its discount leaves 0
        in_run = t - run_last[j] <= window
        if not (z >= z_on or in_run):
            continue
        if z >= z_on:
            habit_last[block] = t
        if not in_run:  # an onset: the previous run joins the tallies, decayed to now
            if run_start[j] > -np.inf:
                dd = np.exp2((t - run_start[j]) * neg_inv_half_life)
                runs[j] = runs[j] * dd + 1.0
                peaks[j] = peaks[j] * dd + run_peak[j]
                lengths[j] = lengths[j] * dd + (run_last[j] - run_start[j])
            run_start[j], run_last[j], run_peak[j] = t, t, z
        elif z >= z_on:
            run_last[j] = t
            run_peak[j] = max(run_peak[j], z)
        r = runs[j]
        if r > 0.0 and t - run_start[j] <= max(2.0 * lengths[j] / r, window):
            out[j] = z - r / (habituation_n + r) * min(z, peaks[j] / r)


@jit
def peer_step(
    t: float,
    x_row: FloatArray,
    cols: IntArray | None,
    groups: tuple[IntArray, IntArray, IntArray, IntArray],
    g: FloatArray,
    direction: IntArray,
    state: tuple[FloatArray, ...],
    q: FloatArray,
    base: tuple[FloatArray, ...],
    p: FloatArray,
    floor: FloatArray,
    habit: tuple[FloatArray, ...],
    h: FloatArray,
    habit_last: FloatArray,
    score_out: FloatArray,
) -> None:
    """One PeerDeviation tick: the group statistics, then per column the update and the habit
    baseline, in blocks of ``BLOCK`` columns (``x_row``, ``cols`` and ``score_out`` by
    kernels.py's column convention).

    ``g`` = (min_peers, mad_floor_rel, mad_floor_abs); ``state`` = (smoothed, scale_var,
    scale_w, count, last_t, interval, late_run); ``q`` = (-1 / scale half-life, -1 / smooth
    half-life or 0 for no smoothing, warmup); ``base`` = the habit baseline's arrays with parameters
    ``p``, or empty arrays for none; ``floor`` = per group row the least sigma the group can
    have (its readings' quantization noise: a group is one signal), or empty for none;
    ``habit``, ``h`` and ``habit_last``: ``_habituate``'s arrays, parameters and per-block
    times, or empty arrays for none."""
    neg_inv_scale, neg_inv_smooth, warmup = q[0], q[1], q[2]
    x = gathered(x_row, cols)
    scores = scratch(score_out, cols)
    med_g, sigma_g = _stats(x, groups, int(g[0]), g[1], g[2])
    row_of = groups[3]
    n = x.shape[0]
    has_base = base[0].shape[0] > 0
    for r in range(floor.shape[0]):  # NaN (too few peers) stays NaN: the comparison is False
        fl = floor[r]
        sigma_g[r] = fl if fl > sigma_g[r] else keep(sigma_g[r])
    # The per-column passes run block by block, their temporaries reused: the state (11
    # arrays) streams through once while the temporaries (~10 arrays) stay in L1/L2 instead
    # of making their own round trips to L3 for every column (15k columns: ~6% of peers).
    width = min(n, BLOCK)
    scale_d, smooth_d = np.empty(width), np.zeros(width)  # zeros: no smoothing keeps nothing
    med, sigma = np.empty(width), np.empty(width)
    z_all = np.empty(width)
    judged_all = np.empty(width, dtype=np.bool_)
    scored = np.empty(width, dtype=np.bool_)
    for b0 in range(0, n, BLOCK):
        b1 = min(b0 + BLOCK, n)
        m = b1 - b0
        st = (
            state[0][b0:b1], state[1][b0:b1], state[2][b0:b1],
            state[3][b0:b1], state[4][b0:b1], state[5][b0:b1], state[6][b0:b1],
        )  # fmt: skip
        if neg_inv_smooth != 0.0:
            decays2(t, st[4], neg_inv_scale, neg_inv_smooth, scale_d[:m], smooth_d[:m])
        else:
            decays(t, st[4], neg_inv_scale, scale_d[:m])
        # a group's median and sigma per column: a gather (scalar), kept out of the main loop
        for j in range(m):
            med[j] = med_g[row_of[b0 + j]]
            sigma[j] = sigma_g[row_of[b0 + j]]
        xb = x[b0:b1]
        for j in range(m):  # every load unconditional, choices by selection: vectorizes
            z_all[j], judged_all[j] = _peer_column(
                t, xb[j], j, med[j], sigma[j], scale_d[j], smooth_d[j], st, warmup
            )
        out = scores[b0:b1]
        if has_base:  # the departure from the column's habit of standing out
            bs = (
                base[0][b0:b1], base[1][b0:b1], base[2][b0:b1],
                base[3][b0:b1], base[4][b0:b1], base[5][b0:b1],
            )  # fmt: skip
            ew_step(t, z_all[:m], None, bs, p, direction[b0:b1], out, scored[:m])
        else:
            for j in range(m):
                out[j] = fold(z_all[j], direction[b0 + j])
        high = 0  # an integer count vectorizes; a running max is a serial chain (~15 us)
        for j in range(m):
            out[j] = keep(out[j]) if judged_all[j] else 0.0
            high += out[j] >= h[0]
        block = b0 // BLOCK
        if habit[0].shape[0] > 0 and (high > 0 or t - habit_last[block] <= h[1]):
            hb = (
                habit[0][b0:b1], habit[1][b0:b1], habit[2][b0:b1],
                habit[3][b0:b1], habit[4][b0:b1], habit[5][b0:b1],
            )  # fmt: skip
            _habituate(t, out, hb, h, habit_last, block)
    scatter(scores, cols, score_out)
