"""Fused per-column kernels (numba) for the robust EW baseline, the z-score and the CUSUM.

peer_kernels.py and counts_health_kernels.py hold the other scorers' kernels.

Why kernels: the scorers' arithmetic is a handful of flops per column, so as numpy over whole
arrays each tick was ~45 passes over memory (one per ufunc, plus masks and temporaries) and
bound by those passes, not by the arithmetic. A kernel walks the columns once with the state in
registers. The state stays in the scorers' numpy arrays (updated in place), so state files and
``state_dict`` are the same as before.

The arithmetic is the one documented in zscore.py and changepoint.py, in the same order of
operations, so results agree with the former numpy code to the last bit except where ``exp2``
may round differently (an ulp). Unobserved columns (NaN, inf, beyond ``MAX_ABS_VALUE``) leave
their state untouched, as before.

Decay caching: on a regular cadence every column has the same elapsed time, so a decay factor
is recomputed only when a column's elapsed time is neither of the last two seen (``decay``).

Compilation: each kernel is compiled on its first call (see ``jit``); the bench prints how long.
"""

from __future__ import annotations

import math

import numpy as np

from ..model import BoolArray, FloatArray, IntArray
from .base import SCORE_CAP
from .jit import jit

MAX_ABS_VALUE = 1e150  # squares stay finite in float64
FORGOTTEN_WEIGHT = 1e-6  # history weight below this (~20 half-lives) means "never seen"

# Index of each RobustEWBaseline parameter in the float vector the kernels take.
P_NEG_INV_HALF_LIFE, P_WARMUP, P_CLIP, P_FLOOR_REL, P_FLOOR_ABS, P_RELEARN = range(6)


# One column's baseline state (mean, var, w_mean, w_var, count, last_t) and a decay cache
# travel as tuples of floats: passing the state arrays into a per-column function instead
# costs reference counting on every call (measured: 4x slower).
EwState = tuple[float, float, float, float, float, float]
# The two most recent (elapsed, decay) pairs: a column that missed a tick has twice the
# elapsed time of its neighbours, and two entries keep such alternations from calling exp2.
DecayCache = tuple[float, float, float, float]
NO_DECAY: DecayCache = (np.nan, 1.0, np.nan, 1.0)  # NaN equals nothing: computed on first use


@jit
def decay(elapsed: float, rate: float, cache: DecayCache) -> tuple[float, DecayCache]:
    """``exp2(elapsed * rate)`` through ``cache``; returns it and the updated cache."""
    if elapsed == cache[0]:
        return cache[1], cache
    if elapsed == cache[2]:
        return cache[3], (cache[2], cache[3], cache[0], cache[1])
    d = np.exp2(elapsed * rate)
    return d, (elapsed, d, cache[0], cache[1])


@jit
def ew_update(
    t: float, xj: float, s: EwState, p: EwState, cache: DecayCache
) -> tuple[float, bool, EwState, DecayCache]:
    """Score then learn one column of one tick (the zscore.py contract) from its state ``s``
    and the parameters ``p`` (``P_*`` order). Returns (signed z before the update, capped at
    ±SCORE_CAP, 0 unless scored; scored; the new state; the decay cache)."""
    mean, var, w_mean, w_var, count, last_t = s
    if not abs(xj) <= MAX_ABS_VALUE:  # not observed: no time passes, nothing learnt
        if w_mean < FORGOTTEN_WEIGHT:
            count = 0.0
        return 0.0, False, (mean, var, w_mean, w_var, count, last_t), cache
    elapsed = t - last_t
    d, cache = decay(max(elapsed, 0.0), p[P_NEG_INV_HALF_LIFE], cache)
    wm = w_mean * d
    wv = w_var * d
    c = count
    if wm < FORGOTTEN_WEIGHT:  # history with no weight left is forgotten: warm-up again
        c = 0.0
    warm = c >= p[P_WARMUP]
    floor = mean * p[P_FLOOR_REL]
    floor = floor * floor + p[P_FLOOR_ABS]
    sigma = math.sqrt(max(floor, var))
    resid = xj - mean
    z = resid / sigma
    clip = p[P_CLIP]
    if warm:  # nothing to clip with during warm-up
        bound = sigma * clip
        resid = max(min(resid, bound), -bound)
    wm += 1.0
    m = mean + resid / max(wm, 1.0)
    v = var
    # Anomalous points keep out of the variance while it still has evidence.
    if abs(z) <= clip or not warm or wv < p[P_RELEARN]:
        wv += 1.0
        b = 1.0 / max(wv, 1.0)
        v = (resid * resid * b + v) * (1.0 - b)  # West: the variance never goes negative
    new = (m, v, wm, wv, c + 1.0, last_t + elapsed)
    if not warm:
        return 0.0, False, new, cache
    return max(min(z, SCORE_CAP), -SCORE_CAP), True, new, cache


@jit
def positive(a: float) -> float:
    """``max(a, 0.0)`` without a branch (a + |a| is 2a or 0, both exact; a finite)."""
    return (a + abs(a)) * 0.5


@jit
def fold(z: float, direction: int) -> float:
    """base.directional for one value: the non-negative part the direction allows, capped."""
    up = z if direction >= 0 else 0.0
    down = -z if direction <= 0 else 0.0
    return min(max(up, down, 0.0), SCORE_CAP)


@jit
def ew_step(
    t: float,
    x: FloatArray,
    state: tuple[FloatArray, ...],
    p: FloatArray,
    direction: IntArray,
    z_out: FloatArray,
    scored_out: BoolArray,
) -> None:
    """One tick over every column. ``state`` = (mean, var, w_mean, w_var, count, last_t) of a
    ``RobustEWBaseline`` with parameters ``p``. ``z_out`` gets the signed z (``direction``
    empty) or the directional score (``direction`` per column), ``scored_out`` the scored mask."""
    mean, var, w_mean, w_var, count, last_t = state
    prm = (p[0], p[1], p[2], p[3], p[4], p[5])
    directional = direction.shape[0] > 0
    cache = NO_DECAY
    for j in range(x.shape[0]):
        st = (mean[j], var[j], w_mean[j], w_var[j], count[j], last_t[j])
        z, scored, st, cache = ew_update(t, x[j], st, prm, cache)
        mean[j], var[j], w_mean[j], w_var[j], count[j], last_t[j] = st
        z_out[j] = fold(z, direction[j]) if directional else z
        scored_out[j] = scored


@jit
def cusum_step(
    t: float,
    x: FloatArray,
    base: tuple[FloatArray, ...],
    p: FloatArray,
    cusum: tuple[FloatArray, ...],
    q: FloatArray,
    direction: IntArray,
    score_out: FloatArray,
) -> None:
    """One ChangePoint tick (changepoint.py) over every column, its baseline included.

    ``base`` = (mean, var, w_mean, w_var, count, last_t) of the slow baseline with parameters
    ``p``; ``cusum`` = (s_pos, s_neg, n_pos, n_neg, last_t, change_t, peak);
    ``q`` = (k, h, alarm_z / h, clip, -1 / memory half-life, 1 / hold half-life)."""
    mean, var, w_mean, w_var, count, b_last = base
    s_pos, s_neg, n_pos, n_neg, last_t, change_t, peak = cusum
    k, h, scale, clip, neg_inv_memory, inv_hold = q[0], q[1], q[2], q[3], q[4], q[5]
    prm = (p[0], p[1], p[2], p[3], p[4], p[5])
    cache = NO_DECAY
    fade = NO_DECAY
    for j in range(x.shape[0]):
        mean_before, var_before = mean[j], var[j]
        st = (mean_before, var_before, w_mean[j], w_var[j], count[j], b_last[j])
        z, scored, st, cache = ew_update(t, x[j], st, prm, cache)
        mean[j], var[j], w_mean[j], w_var[j], count[j], b_last[j] = st
        if not scored:
            score_out[j] = 0.0
            continue
        u = min(max(z, -clip), clip)
        fd, fade = decay(max(t - last_t[j], 0.0), neg_inv_memory, fade)
        # Branch-free on purpose (the signs are random: mispredicted branches here cost 3x
        # the rest of the kernel). positive(a) == max(a, 0) exactly; a 0/1 factor times a
        # finite value is exact too.
        sp = positive(s_pos[j] * fd + u - k)
        sn = positive(s_neg[j] * fd - u - k)
        np_ = (n_pos[j] * fd + 1.0) * (sp > 0.0)
        nn = (n_neg[j] * fd + 1.0) * (sn > 0.0)
        up = sp if direction[j] >= 0 else 0.0
        down = sn if direction[j] <= 0 else 0.0
        score = min(max(up, down) * scale, SCORE_CAP)
        if sp >= h or sn >= h:
            # A change: the baseline moves to the post-change level the CUSUM estimates
            # (from the pre-update mean and sigma), backed by the excursion's observations.
            floor = prm[P_FLOOR_REL] * mean_before
            floor = floor * floor + prm[P_FLOOR_ABS]
            sigma_before = math.sqrt(max(var_before, floor))
            if sp >= h:
                shift = (k + sp / max(np_, 1.0)) * sigma_before
                weight = np_
            else:
                shift = -(k + sn / max(nn, 1.0)) * sigma_before
                weight = nn
            mean[j] = mean_before + shift
            w_mean[j] = min(w_mean[j], max(weight, 1.0))
            change_t[j] = t
            peak[j] = score
            sp, sn, np_, nn = 0.0, 0.0, 0.0, 0.0
        s_pos[j], s_neg[j], n_pos[j], n_neg[j] = sp, sn, np_, nn
        last_t[j] = t
        if peak[j] != 0.0:  # the alarm is held and fades (a zero peak holds nothing)
            score = max(score, np.exp2((change_t[j] - t) * inv_hold) * peak[j])
        score_out[j] = score
