"""Fused per-column kernels (numba) for the robust EW baseline, the z-score and the CUSUM.

peer_kernels.py and counts_health_kernels.py hold the other scorers' kernels.

Why kernels: the scorers' arithmetic is a handful of flops per column, so as numpy over whole
arrays each tick was ~45 passes over memory (one per ufunc, plus masks and temporaries) and
bound by those passes, not by the arithmetic. A kernel walks the columns once or twice with the
state in registers. The state stays in the scorers' numpy arrays (updated in place), so state
files and ``state_dict`` are the same as before.

The main loops are written to be vectorized by LLVM (AVX-512/AVX2 on x86): no branch in the
loop body, every column loaded, computed and stored, unobserved columns keeping their old
values by selection (``new if ok else keep(old)``: without ``jit.keep`` LLVM may turn such a
store into a masked store, microcode on AMD's Zen; see its docstring). Data-dependent
branches (a column's sign, a rare changepoint) cost more than the arithmetic when
mispredicted, and a loop with them runs one column at a time. What does not vectorize
(``exp2``, a detected change, a held alarm) runs in short scalar loops over the few columns
that need it.

The arithmetic is the one documented in zscore.py and changepoint.py, in the same order of
operations, so results agree with the former numpy code to the last bit except where ``exp2``
may round differently (an ulp). Unobserved columns (NaN, inf, beyond ``MAX_ABS_VALUE``) leave
their state untouched, as before.

Decays: on a regular cadence every column has the same elapsed time, so ``decays`` computes
``exp2`` once for it and only the odd columns (a missed tick, a new column) one by one.

Columns: a scorer's kernel takes the row ``x`` and ``cols``, the index of its columns in the
row (``x[cols[j]]`` is its column ``j``), and writes score ``j`` to ``score_out[cols[j]]``,
while its state stays indexed by ``j``; with ``cols`` None the row is the scorer's own columns
(``update``). So the pipeline passes the full row and a full-width output and neither numpy's
gathered copy of the row nor its scattered copy of the scores is made. Inside, ``gathered``
copies the columns into a contiguous scratch array and ``scatter`` writes the scores back, each
one scalar loop (an indexed load or store in the main loop would stop LLVM from vectorizing
it: measured 3-4x slower); numba compiles the None case separately, without either copy.

Compilation: each kernel is compiled on its first call (see ``jit``); the bench prints how long.
"""

from __future__ import annotations

import math

import numpy as np

from ...jit import jit, keep
from ...model import BoolArray, FloatArray, IntArray
from ..base import SCORE_CAP

MAX_ABS_VALUE = 1e150  # squares stay finite in float64
FORGOTTEN_WEIGHT = 1e-6  # history weight below this (~20 half-lives) means "never seen"

# Index of each RobustEWBaseline parameter in the float vector the kernels take.
P_NEG_INV_HALF_LIFE, P_WARMUP, P_CLIP, P_FLOOR_REL, P_FLOOR_ABS, P_RELEARN = range(6)


@jit
def gathered(x: FloatArray, cols: IntArray | None) -> FloatArray:
    """``x[cols]`` as a new contiguous array; ``x`` itself for ``cols`` None."""
    if cols is None:
        return x
    out = np.empty(cols.shape[0])
    for j in range(cols.shape[0]):
        out[j] = x[cols[j]]
    return out


@jit
def scratch(score_out: FloatArray, cols: IntArray | None) -> FloatArray:
    """Where a kernel writes its scores by position: ``score_out`` for ``cols`` None, else a
    new array for ``scatter``."""
    if cols is None:
        return score_out
    return np.empty(cols.shape[0])


@jit
def scatter(score: FloatArray, cols: IntArray | None, score_out: FloatArray) -> None:
    """``score_out[cols] = score`` (nothing for ``cols`` None: ``score`` is ``score_out``)."""
    if cols is None:
        return
    for j in range(cols.shape[0]):
        score_out[cols[j]] = score[j]


@jit
def touch(x: FloatArray) -> float:
    """Read one value per 64-byte cache line of ``x`` (every 8th float64), in order, and
    return their sum (so the reads are not optimized away; the value means nothing).
    A row that is cold in cache (one row of a large ticks x columns matrix, or written long
    before) then streams in at the hardware prefetcher's pace before the scorers gather their
    columns from it; left to the scorers' scattered gathers, which walk the row five times
    each for a subset of its lines, it cost ~20 us a tick for 30k columns (~1 us on a row
    already in cache). A float sum on purpose: it stays a scalar loop of independent loads
    (floating-point order is kept), where an integer OR was vectorized into AVX-512 gathers
    that fetched the cold row twice as slowly (14 vs 7 us for 30k columns, probe)."""
    acc = 0.0
    for j in range(0, x.shape[0], 8):
        acc += x[j]
    return acc


# A decay cache: the two most recent (elapsed, decay) pairs (a column that missed a tick has
# twice its neighbours' elapsed time; two entries keep such alternations from calling exp2).
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


# Passes a decay fill makes before going one by one (see _decays_rest).
DECAY_PASSES = 3


@jit
def _next_odd(last_t: FloatArray, out: FloatArray, j: int) -> int:
    """The first column from ``j`` still without a decay (NaN) and with a time (a NaN
    ``last_t``, a column never observed, has none); ``last_t.shape[0]`` if there is none."""
    n = last_t.shape[0]
    while j < n and (out[j] == out[j] or last_t[j] != last_t[j]):
        j += 1
    return j


@jit
def _decays_rest(
    t: float,
    last_t: FloatArray,
    rates: tuple[float, float],
    e0: float,
    odd: int,
    out_a: FloatArray,
    out_b: FloatArray,
    both: bool,
) -> None:
    """``decays`` (``both`` False: ``out_b`` untouched) or ``decays2`` (``rates`` of ``out_a``
    and ``out_b``) for the ``odd`` entries their first pass (elapsed ``e0``) left NaN.

    A column that missed ticks has a multiple of its neighbours' elapsed time: with 5% of
    values missing ~4.8% of columns have twice it, ~0.2% three times. So a vectorized pass
    takes the first odd column's elapsed ``e1`` and ``e1 + e0``, ``e1 + 2 e0`` at once (one
    pass of compares and selects, ~1.5 us for 15k columns), again up to ``DECAY_PASSES``
    times while some are left, and the rest go one by one through ``decay``'s cache.
    Scanning all columns one by one (as before) cost ~5 us a tick for 15k columns, the
    branch on each. Every entry is ``exp2(e * rate)`` of its own elapsed ``e`` (a hit means
    ``e`` equals the candidate exactly), whichever way it is found: bit-identical."""
    n = last_t.shape[0]
    rate_a, rate_b = rates
    j1 = 0
    for _ in range(DECAY_PASSES):
        j1 = _next_odd(last_t, out_a, j1)
        if j1 >= n:
            break
        e1 = max(t - last_t[j1], 0.0)
        e2, e3 = e1 + e0, e1 + 2.0 * e0  # NaN e0 (column 0 never observed): never hit
        a1, a2, a3 = np.exp2(e1 * rate_a), np.exp2(e2 * rate_a), np.exp2(e3 * rate_a)
        b1, b2, b3 = np.exp2(e1 * rate_b), np.exp2(e2 * rate_b), np.exp2(e3 * rate_b)
        odd = 0
        # vectorized (from j1 instead of 0 they are not: ~8x slower); a hit is a NaN entry,
        # since the earlier passes took other elapsed times
        for j in range(n):
            e = max(t - last_t[j], 0.0)
            o = keep(out_a[j])
            h1, h2, h3 = e == e1, e == e2, e == e3
            out_a[j] = a1 if h1 else a2 if h2 else a3 if h3 else o
            if both:
                ob = keep(out_b[j])
                out_b[j] = b1 if h1 else b2 if h2 else b3 if h3 else ob
            odd += (o != o) & ~(h1 | h2 | h3)
        if odd == 0:
            return
    first = 0  # the first entry left, a NaN last_t included
    while first < n and out_a[first] == out_a[first]:
        first += 1
    cache_a, cache_b = NO_DECAY, NO_DECAY
    for j in range(first, n):
        if math.isnan(out_a[j]):
            e = max(t - last_t[j], 0.0)
            out_a[j], cache_a = decay(e, rate_a, cache_a)
            if both:
                out_b[j], cache_b = decay(e, rate_b, cache_b)


@jit
def decays(t: float, last_t: FloatArray, rate: float, out: FloatArray) -> None:
    """``out[j] = exp2(max(t - last_t[j], 0) * rate)``: one vectorized pass with the first
    column's elapsed time, then ``_decays_rest`` for the columns whose time differs."""
    n = last_t.shape[0]
    if n == 0:
        return
    e0 = max(t - last_t[0], 0.0)
    d0 = np.exp2(e0 * rate)
    odd = 0
    for j in range(n):
        e = max(t - last_t[j], 0.0)
        same = e == e0
        out[j] = d0 if same else np.nan
        odd += not same
    if odd:
        _decays_rest(t, last_t, (rate, rate), e0, odd, out, out, False)


@jit
def decays2(
    t: float, last_t: FloatArray, rate_a: float, rate_b: float, out_a: FloatArray, out_b: FloatArray
) -> None:
    """``decays`` at two rates from one ``last_t`` in one pass."""
    n = last_t.shape[0]
    if n == 0:
        return
    e0 = max(t - last_t[0], 0.0)
    a0, b0 = np.exp2(e0 * rate_a), np.exp2(e0 * rate_b)
    odd = 0
    for j in range(n):
        e = max(t - last_t[j], 0.0)
        same = e == e0
        out_a[j] = a0 if same else np.nan
        out_b[j] = b0 if same else np.nan
        odd += not same
    if odd:
        _decays_rest(t, last_t, (rate_a, rate_b), e0, odd, out_a, out_b, True)


@jit
def positive(a: float) -> float:
    """``max(a, 0.0)`` without a branch (a + |a| is 2a or 0, both exact; a finite)."""
    return (a + abs(a)) * 0.5


@jit
def fold(z: float, direction: int) -> float:
    """base.directional for one value: the non-negative part the direction allows, capped."""
    up = z * (direction >= 0)
    down = -z * (direction <= 0)
    return min(max(max(up, down), 0.0), SCORE_CAP)


@jit
def ew_params(p: FloatArray) -> tuple[float, float, float, float, float]:
    """``ew_column``'s parameters from a baseline's parameter array."""
    return p[P_WARMUP], p[P_CLIP], p[P_FLOOR_REL], p[P_FLOOR_ABS], p[P_RELEARN]


@jit
def ew_column(
    t: float,
    xj: float,
    j: int,
    state: tuple[FloatArray, ...],
    dj: float,
    p: tuple[float, float, float, float, float],
) -> tuple[float, bool]:
    """``ew_step`` for column ``j`` (value ``xj``, decay ``dj`` since its last observation):
    updates its state, returns (signed z capped at ±SCORE_CAP, 0 unless past warm-up; whether
    observed and past warm-up). ``p`` = the parameters ``P_WARMUP`` to ``P_RELEARN`` as
    scalars (read from the parameter array inside the loop, they would be reloaded after every
    store: the array might alias the state). Branch-free, so a loop calling it vectorizes (it
    is inlined, as long as the loop calls nothing else that takes arrays: fused with the peer
    update in one loop it was not, and ran 3-4x slower)."""
    mean, var, w_mean, w_var, count, last_t = state
    warmup, clip, floor_rel, floor_abs, relearn = p
    obs = abs(xj) <= MAX_ABS_VALUE  # NaN compares False
    # every load unconditional, choices by selection: the loop vectorizes
    m, v, lt, wm, wv, c = mean[j], var[j], last_t[j], w_mean[j], w_var[j], count[j]
    elapsed = (t - lt) if obs else 0.0
    d = dj if obs else 1.0
    wm = wm * d
    wv = wv * d
    c = c * (wm >= FORGOTTEN_WEIGHT)  # no weight left: forgotten, warm up again
    warm = c >= warmup
    floor = m * floor_rel
    floor = floor * floor + floor_abs
    sigma = math.sqrt(max(floor, v))
    resid = (xj - m) if obs else 0.0
    zj = resid / sigma
    bound = (sigma * clip) if warm else np.inf  # nothing to clip with during warm-up
    resid = max(min(resid, bound), -bound)
    # Anomalous points keep out of the variance while it still has evidence.
    accept = obs & ((abs(zj) <= clip) | (c < warmup) | (wv < relearn))
    wm = wm + obs
    wv = wv + accept
    b = accept / max(wv, 1.0)
    mean[j] = m + resid / max(wm, 1.0)
    var[j] = (resid * resid * b + v) * (1.0 - b)  # West: the variance never goes negative
    w_mean[j] = wm
    w_var[j] = wv
    count[j] = c + obs
    last_t[j] = lt + elapsed
    return max(min(zj, SCORE_CAP), -SCORE_CAP) * warm, warm & obs


@jit
def ew_step(
    t: float,
    x_row: FloatArray,
    cols: IntArray | None,
    state: tuple[FloatArray, ...],
    p: FloatArray,
    direction: IntArray,
    z_out: FloatArray,
    scored_out: BoolArray,
) -> None:
    """Score then learn one tick of every column (the zscore.py contract; ``x_row``, ``cols``
    and ``z_out`` by the module docstring's column convention). ``state`` = (mean,
    var, w_mean, w_var, count, last_t) of a ``RobustEWBaseline`` with parameters ``p``
    (``P_*`` order). ``z_out`` gets the signed z before the update, capped at ±SCORE_CAP, 0
    unless scored (``direction`` empty) or the directional score (``direction`` per column);
    ``scored_out`` the mask of columns observed and past warm-up. Unobserved columns keep
    their state bit for bit (no time passes for them, nothing is learnt)."""
    x = gathered(x_row, cols)
    zs = scratch(z_out, cols)
    n = x.shape[0]
    d_all = np.empty(n)
    decays(t, state[5], p[P_NEG_INV_HALF_LIFE], d_all)
    params = ew_params(p)
    for j in range(n):
        zs[j], scored_out[j] = ew_column(t, x[j], j, state, d_all[j], params)
    if direction.shape[0] > 0:
        for j in range(n):
            zs[j] = fold(zs[j], direction[j])
    scatter(zs, cols, z_out)


@jit
def cusum_step(
    t: float,
    x_row: FloatArray,
    cols: IntArray | None,
    base: tuple[FloatArray, ...],
    p: FloatArray,
    cusum: tuple[FloatArray, ...],
    q: FloatArray,
    direction: IntArray,
    score_out: FloatArray,
) -> None:
    """One ChangePoint tick (changepoint.py) over every column, its baseline included
    (``x_row``, ``cols`` and ``score_out`` by the module docstring's column convention).

    ``base`` = (mean, var, w_mean, w_var, count, last_t) of the slow baseline with parameters
    ``p``; ``cusum`` = (s_pos, s_neg, n_pos, n_neg, last_t, change_t, peak);
    ``q`` = (k, h, alarm_z / h, clip, -1 / memory half-life, 1 / hold half-life)."""
    s_pos, s_neg, n_pos, n_neg, last_t, change_t, peak = cusum
    x = gathered(x_row, cols)
    scores = scratch(score_out, cols)
    k, h, scale, clip, neg_inv_memory, inv_hold = q[0], q[1], q[2], q[3], q[4], q[5]
    n = x.shape[0]
    # The pre-update mean and variance matter only where a change is detected (rare).
    mean_before, var_before = base[0].copy(), base[1].copy()
    z_all = np.empty(n)
    scored_all = np.empty(n, dtype=np.bool_)
    ew_step(t, x, None, base, p, np.empty(0, dtype=np.int64), z_all, scored_all)
    fade_all = np.empty(n)
    decays(t, last_t, neg_inv_memory, fade_all)
    changes = 0
    for j in range(n):
        scored = scored_all[j]
        sp0, sn0, np0, nn0, lt = s_pos[j], s_neg[j], n_pos[j], n_neg[j], last_t[j]
        u = min(max(z_all[j], -clip), clip)
        fd = fade_all[j]
        sp = positive(sp0 * fd + u - k)
        sn = positive(sn0 * fd - u - k)
        np_ = (np0 * fd + 1.0) * (sp > 0.0)  # a 0/1 factor times a finite value: exact
        nn = (nn0 * fd + 1.0) * (sn > 0.0)
        dj = direction[j]
        score = min(max(sp * (dj >= 0), sn * (dj <= 0)) * scale, SCORE_CAP)
        s_pos[j] = sp if scored else keep(sp0)
        s_neg[j] = sn if scored else keep(sn0)
        n_pos[j] = np_ if scored else keep(np0)
        n_neg[j] = nn if scored else keep(nn0)
        last_t[j] = t if scored else keep(lt)
        scores[j] = score if scored else 0.0
        changes += scored & ((sp >= h) | (sn >= h))
    mean, w_mean = base[0], base[2]
    for j in range(n if changes else 0):
        sp, sn = s_pos[j], s_neg[j]
        if not (scored_all[j] and (sp >= h or sn >= h)):
            continue
        # A change: the baseline moves to the post-change level the CUSUM estimates (from
        # the pre-update mean and sigma), backed by the excursion's observations. Only on a
        # side the column's direction scores: a change it ignores (a link state's brief rise)
        # is left to the slow baseline, else the return to the usual level would read as a
        # change the other way, the one that scores.
        floor = p[P_FLOOR_REL] * mean_before[j]
        floor = floor * floor + p[P_FLOOR_ABS]
        sigma_before = math.sqrt(max(var_before[j], floor))
        if sp >= h:
            shift = (k + sp / max(n_pos[j], 1.0)) * sigma_before
            weight = n_pos[j]
            scored_side = direction[j] >= 0
        else:
            shift = -(k + sn / max(n_neg[j], 1.0)) * sigma_before
            weight = n_neg[j]
            scored_side = direction[j] <= 0
        if scored_side:
            mean[j] = mean_before[j] + shift
            w_mean[j] = min(w_mean[j], max(weight, 1.0))
        change_t[j] = t
        peak[j] = scores[j]
        s_pos[j], s_neg[j], n_pos[j], n_neg[j] = 0.0, 0.0, 0.0, 0.0
    for j in range(n):  # a detected change's score is held and fades (a zero peak holds none)
        if peak[j] != 0.0 and scored_all[j]:
            held = np.exp2((change_t[j] - t) * inv_hold) * peak[j]
            scores[j] = max(scores[j], held)
    scatter(scores, cols, score_out)
