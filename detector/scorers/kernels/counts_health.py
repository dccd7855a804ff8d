"""Fused per-column kernels (numba) of CountBurst (counts.py) and TelemetryHealth (health.py).

Same approach and caveats as kernels.py: the arithmetic of the scorer's docstring in the
former numpy code's order of operations, state in the scorers' arrays, updated in place.
"""

from __future__ import annotations

import math

import numpy as np

from ...jit import jit
from ...model import FloatArray, IntArray
from ..base import SCORE_CAP
from .ew import MAX_ABS_VALUE, decays, ew_step, gathered, scatter, scratch

# TelemetryHealth's kinds (health.py re-exports them)
KIND_UP, KIND_DEFICIT, KIND_EXCESS, KIND_LOGZ = 1, 2, 3, 4


@jit
def _count_column(
    j: int,
    t: float,
    x: FloatArray,
    state: tuple[FloatArray, ...],
    q: FloatArray,
    dd: float,
    scores: FloatArray,
) -> None:
    """The whole CountBurst update of column ``j``, observed (``x[j]`` finite, >= 0) and seen
    before; ``dd`` its decay over the elapsed time. count_step runs it where a tick has events
    (rare), its vectorized pass the same arithmetic for every other column."""
    events, elapsed, last_t, observed_s, spread, spread_n = state[:6]
    bursts, burst_zsum, run_cut, run_zh, last_burst = state[6:]
    prior_events, prior_time, learn_clip = q[1], q[2], q[3]
    warmup, window, prior_n, clip2 = q[4], q[5], q[6], q[7] * q[7]
    habituation, burst_z = q[8], q[9]
    onset = False
    xj = x[j]
    dt = max(t - last_t[j], 0.0)
    last_t[j] = t
    k = np.rint(xj * dt) if dt > 0.0 else 0.0
    learn = k
    e, el = events[j], elapsed[j]
    # The prior keeps a quiet counter's rate above zero; a busy counter's own rate wins.
    own = e / max(el, 1e-300) if el > 0.0 else 0.0
    rate = max((e + prior_events) / (el + prior_time), own)
    mu = rate * dt
    # Dispersion: variance / mean of the tick counts, from winsorized Pearson residuals,
    # never below 1 (Poisson); a prior of ``prior_n`` ticks at 1.
    phi = max((spread[j] + prior_n) / (spread_n[j] + prior_n), 1.0)
    if k > 0.0:
        # A tick spanning more than the burst window is judged at the window's scale;
        # an overdispersed counter at the scale of its dispersion (quasi-Poisson).
        shrink = min(1.0, window / dt) / phi
        kk = max(k * shrink, 1.0)
        z = 3.0 * math.sqrt(kk) * (1.0 - 1.0 / (9.0 * kk) - np.cbrt(mu * shrink / kk))
        if observed_s[j] >= warmup:
            # A column that keeps bursting anew (a flapping link) has its bursts discounted
            # by how many separate bursts it had lately, up to their usual size: a burst
            # beyond the habitual ones keeps its excess in full. Ticks less than a burst
            # window after a burst tick belong to its run and are judged at the discount of
            # the run's onset, so a sustained burst (a failing device's errors piling up)
            # counts in full.
            burst = z >= burst_z
            in_run = t - last_burst[j] <= window
            b = bursts[j]
            if burst and not in_run:
                run_cut[j] = b / (habituation + b)
                run_zh[j] = burst_zsum[j] / b if b > 0.0 else 0.0
                onset = in_run = True
            if burst:
                last_burst[j] = t
            if in_run:
                cut, habit = run_cut[j], run_zh[j]
            else:
                cut, habit = b / (habituation + b), (burst_zsum[j] / b if b > 0.0 else 0.0)
            zd = z - cut * min(z, habit)
            if zd >= 1.0:  # below one sigma of surprise is ordinary counting noise
                scores[j] = min(zd, SCORE_CAP)
            learn = min(k, mu + learn_clip * math.sqrt(mu * phi) + 1.0)
    bursts[j] = bursts[j] * dd + (1.0 if onset else 0.0)
    burst_zsum[j] = burst_zsum[j] * dd + (z if onset else 0.0)
    observed_s[j] += dt
    events[j] = e * dd + learn
    elapsed[j] = el * dd + dt
    # The spread learns from ordinary ticks only: not from one beyond ``dispersion_clip``
    # of its own scale either way (a burst, a stop), nor from a tick after a gap.
    if 0.0 < dt <= window and mu > 0.0:
        r = k - mu
        if r * r <= clip2 * phi * mu:
            spread[j] = spread[j] * dd + r * r / mu
            spread_n[j] = spread_n[j] * dd + 1.0
        else:
            spread[j] *= dd
            spread_n[j] *= dd


@jit
def count_step(
    t: float,
    x_row: FloatArray,
    cols: IntArray | None,
    state: tuple[FloatArray, ...],
    q: FloatArray,
    score_out: FloatArray,
) -> None:
    """One CountBurst tick (counts.py) over every column (``x_row``, ``cols`` and
    ``score_out`` by kernels.py's column convention). ``state`` = (events, elapsed,
    last_t, observed_s, spread, spread_n, bursts, burst_zsum, run_cut, run_zh, last_burst);
    ``q`` = (half_life_s,
    prior_events, prior_time_s, learn_clip, warmup_s, burst_window_s, dispersion_prior_n,
    dispersion_clip, habituation_n, burst_z).

    Most counters see no event in a tick (k = 0: score 0, learn 0), so one branch-free pass
    (it vectorizes) does ``_count_column``'s arithmetic for those, specialized to k = 0, and
    leaves the columns with events untouched; ``_count_column`` then runs on those few.
    Unobserved columns: no time passes, nothing learnt; a first observation only starts the
    column's clock."""
    events, elapsed, last_t, observed_s, spread, spread_n, bursts, burst_zsum = state[:8]
    x = gathered(x_row, cols)
    scores = scratch(score_out, cols)
    prior_events, prior_time = q[1], q[2]
    window, prior_n, clip2 = q[5], q[6], q[7] * q[7]
    n = x.shape[0]
    dd_all = np.empty(n)
    decays(t, last_t, -1.0 / q[0], dd_all)
    rare = 0
    # the columns with events, flagged a byte each and scanned eight at a time (few are set)
    flags = np.zeros((n + 7) // 8 * 8, dtype=np.uint8)
    for j in range(n):  # every load unconditional, choices by selection: vectorizes
        xj, lt, e, el = x[j], last_t[j], events[j], elapsed[j]
        sp, spn, obs_s, dd = spread[j], spread_n[j], observed_s[j], dd_all[j]
        b, bz = bursts[j], burst_zsum[j]
        observed = (xj >= 0.0) & (xj < np.inf)  # finite and >= 0 (NaN compares False)
        first = lt != lt  # never observed: NaN
        dt = max(t - lt, 0.0)
        k = np.rint(xj * dt)
        k = k if dt > 0.0 else 0.0
        events_now = k > 0.0
        plain = observed & ~first & ~events_now  # k = 0: learn = k, no score
        has_events = observed & ~first & events_now
        rare += has_events
        flags[j] = has_events
        own = e / max(el, 1e-300)
        own = own if el > 0.0 else 0.0
        rate = max((e + prior_events) / (el + prior_time), own)
        mu = rate * dt
        phi = max((sp + prior_n) / (spn + prior_n), 1.0)
        r = k - mu
        within = r * r <= clip2 * phi * mu
        sp_new = (sp * dd + r * r / mu) if within else sp * dd
        spn_new = (spn * dd + 1.0) if within else spn * dd
        spread_learns = plain & (dt > 0.0) & (dt <= window) & (mu > 0.0)
        scores[j] = 0.0
        last_t[j] = t if (plain | (observed & first)) else lt
        observed_s[j] = (obs_s + dt) if plain else obs_s
        events[j] = (e * dd + k) if plain else e
        elapsed[j] = (el * dd + dt) if plain else el
        spread[j] = sp_new if spread_learns else sp
        spread_n[j] = spn_new if spread_learns else spn
        bursts[j] = b * dd if plain else b
        burst_zsum[j] = bz * dd if plain else bz
    words = flags.view(np.uint64)
    for w in range(words.shape[0] if rare else 0):
        if words[w] != 0:
            for j in range(8 * w, 8 * w + 8):
                if flags[j]:
                    _count_column(j, t, x, state, q, dd_all[j], scores)
    scatter(scores, cols, score_out)


@jit
def health_step(
    t: float,
    x: FloatArray,
    cols: IntArray | None,
    direction: IntArray,
    columns: IntArray,
    kinds: IntArray,
    tracked: tuple[FloatArray, FloatArray],
    q: FloatArray,
    base: tuple[FloatArray, ...],
    p: FloatArray,
    score_out: FloatArray,
) -> None:
    """One TelemetryHealth tick over its columns: health column ``c`` is the scorer's column
    ``columns[c]`` (which indexes ``direction``), read from and scored into position
    ``columns[c]`` of ``x`` and ``score_out``, or ``cols[columns[c]]`` where ``cols`` is given
    (kernels.py's column convention); other entries are left alone. The values are gathered
    and the scores scattered through the index in short scalar loops, the update between them
    is one vectorized pass. ``tracked`` = (expected,
    last_t) per health column; ``q`` = (down_z, full_fraction, -1 / memory half-life);
    ``base`` = the log-z baseline's arrays (one per health column) with parameters ``p``."""
    expected, last_t = tracked
    down_z, full, neg_inv_memory = q[0], q[1], q[2]
    m = columns.shape[0]
    at = columns if cols is None else np.empty(m, dtype=np.int64)
    if cols is not None:
        for c in range(m):
            at[c] = cols[columns[c]]
    # the values gathered; the log-z baseline sees only observed log-z columns (NaN: state
    # untouched)
    vals = np.empty(m)
    logv = np.empty(m)
    folds = np.empty(m, dtype=np.int64)
    for c in range(m):
        v = x[at[c]]
        vals[c] = v
        logz = abs(v) <= MAX_ABS_VALUE and kinds[c] == KIND_LOGZ
        logv[c] = math.log1p(max(v, 0.0)) if logz else np.nan
        folds[c] = direction[columns[c]]
    z = np.empty(m)
    ew_step(t, logv, None, base, p, folds, z, np.empty(m, dtype=np.bool_))
    keep_all = np.empty(m)  # the forgetting max/min's decay since the column's last value
    decays(t, last_t, neg_inv_memory, keep_all)
    scores = np.empty(m)
    # Every kind's arithmetic for every column, the kind's chosen by selection: no branch on
    # the kinds (interleaved node by node) or on a missing value, so the loop vectorizes
    # (one branch per kind and a decay cache per column cost ~12 us for 1,000 columns).
    for c in range(m):
        v, kind, e, lt = vals[c], kinds[c], expected[c], last_t[c]
        observed = abs(v) <= MAX_ABS_VALUE
        seen = lt > -np.inf
        deficit = (e - v) / (e * full)
        frac = (1.0 - v) if kind == KIND_UP else 0.0
        frac = (deficit if e > 0 else 0.0) if (kind == KIND_DEFICIT) & seen else frac
        frac = ((v - e) / full) if (kind == KIND_EXCESS) & seen else frac
        frac = min(max(frac, 0.0), 1.0)
        score = z[c] if kind == KIND_LOGZ else down_z * frac
        scores[c] = score if observed else 0.0
        relaxed = v + (e - v) * keep_all[c]  # the forgetting max (deficit) or min relaxes
        kept = max(v, relaxed) if kind == KIND_DEFICIT else min(v, relaxed)
        expected[c] = kept if observed else e
        last_t[c] = t if observed else lt
    for c in range(m):
        score_out[at[c]] = scores[c]
