"""The signal stage's per-tick arithmetic: series values -> signal column values.

``SignalMap`` (signals.py) decides which columns exist and keeps their per-column index
arrays (``a``, its ``_tick_arrays``: which columns are levels, rates, edges, ratios, rounded,
in log space, presence or frozen-target columns, and which series and entity each reads);
these functions turn one tick's series values into the columns' values with whole-array
numpy, no Python loop over columns or series.

Transforms, per column, with ``prev`` the last *observed* value of its series:
- level: ``value * scale``.
- rate: ``(value - prev) / dt * scale`` per second. NaN on the first observation, when
  ``dt <= 0``, and on a counter reset (a decrease): the counter's value before the reset is
  unknown, so ``value / dt`` would invent a spike at every driver reload; one lost tick is cheap.
- edge: 1.0 when the value differs from ``prev``, else 0.0; NaN on the first observation.
- every transformed value is rounded to its rule's ``resolution`` when one is set, or taken
  to log space, ``ln(1 + max(value, 0) / log_unit)``, when its rule sets ``log_unit``
  (rules.SignalRule: a latency, whose spread grows with its level).
- ratio: increase of the counter per increase of its ``denominator`` counter (the series of that
  metric with the same identity labels): NFS seconds of RTT per operation rather than per second,
  which would only measure volume. NaN when either is unobserved, reset, or the denominator did
  not increase; NaN until the denominator series has been seen (it may appear later).
- presence (computed): ``health_series_missing_fraction`` per GPU = fraction of the GPU's
  previously observed series missing this tick (XID series, which come and go by design, do
  not count); ``health_gpu_count`` per node = GPUs of the node
  with any series observed this tick. Both are NaN for a node with no GPU series at all this
  tick: with exporters on different scrape intervals that tick simply had no DCGM scrape, and a
  dead exporter is reported by ``health_up``. So presence measures a *partial* loss: a GPU that
  vanished while its neighbours still report (fell off the bus). Beside the columns,
  ``presence_values`` returns per GPU whether it is *gone*: every one of its observed series
  missing while its node's page answered with other GPUs; a GPU becoming gone is definitive
  structural evidence (``SignalMap.vanished``), alerted at once (loop/alerts.py).
  ``health_targets_frozen_fraction`` per node = share of the node's targets (exporters) whose
  page has repeated byte for byte for longer than ``repeat_hold_s`` (repeats.py): a hung
  exporter, whose cached repeats are otherwise no observations at all.
"""

from __future__ import annotations

import numpy as np

from ..model import BoolArray, FloatArray, IntArray


def transformed(
    a: dict[str, np.ndarray],
    t: float,
    cur: FloatArray,
    observed: BoolArray,
    values: FloatArray,
    prev: FloatArray,
    prev_t: FloatArray,
    prev_den: FloatArray,
) -> FloatArray:
    """Per column, its transformed value at ``t``: ``cur`` = the value of the series it reads
    (NaN: not observed; ``observed`` = not NaN, the caller's), ``values`` = every series'
    value (a ratio's denominator is read there), ``prev`` / ``prev_t`` = its series' last
    observed value and time. Rates are NaN on a first observation, a non-positive elapsed
    time or a counter reset (a decrease); ratios also where the denominator is unknown, reset
    or did not increase. ``prev_den`` (the denominators' last observed values) is updated in
    place; ``prev`` and ``prev_t`` are the caller's to update."""
    have_prev = observed & ~np.isnan(prev)
    # Whole-width arithmetic (contiguous) beats gathering each kind's columns: every
    # column starts as its level value and the other kinds overwrite theirs below.
    out: FloatArray = np.multiply(cur, a["scale"])
    dt = np.subtract(t, prev_t)
    dv = np.subtract(cur, prev)
    positive = dt > 0
    ok = have_prev & positive
    ok &= dv >= 0
    with np.errstate(invalid="ignore", divide="ignore"):
        np.divide(dv, dt, out=dv, where=positive)  # dv / 1.0 elsewhere: dv stays
        dv *= a["scale"]
    np.copyto(dv, np.nan, where=~ok)
    np.copyto(out, dv, where=a["is_rate"])
    ed = a["edge"]
    out[ed] = np.where(have_prev[ed], (cur[ed] != prev[ed]).astype(np.float64), np.nan)
    ra = a["ratio"]
    if ra.size:
        den_col = a["denom"][ra]
        known = den_col >= 0
        den = np.where(known, values[np.where(known, den_col, 0)], np.nan)
        d_num = cur[ra] - prev[ra]
        d_den = den - prev_den[ra]
        ok = have_prev[ra] & (d_num >= 0) & (d_den > 0)
        with np.errstate(invalid="ignore", divide="ignore"):
            out[ra] = np.where(ok, d_num / np.where(ok, d_den, 1.0) * a["scale"][ra], np.nan)
        den_seen = ~np.isnan(den)
        prev_den[ra[den_seen]] = den[den_seen]
    rd = a["rounded"]
    if rd.size:
        step = a["resolution"][rd]
        out[rd] = np.round(out[rd] / step) * step
    lg = a["logged"]
    if lg.size:  # NaN stays NaN
        out[lg] = np.log1p(np.maximum(out[lg], 0.0) / a["log_unit"][lg])
    return out


def retire_replaced(slot: IntArray, first: BoolArray, missing: BoolArray, seen: BoolArray) -> None:
    """A GPU series seen for the first time replaces the series of the same metric and GPU
    that went silent as it came (``seen`` cleared for those): its target was relabelled,
    e.g. with its node's next job, and every series came back under a new identity. Counted
    as missing, the old ones held each GPU's missing fraction at 0.5 from then on (a health
    alert at every job change). A GPU off the bus brings no new series, so its series stay
    missing; two series of a metric both present (MIG instances) both stay known; one that
    comes back replaces its successor in turn. ``slot``: per series its (GPU, metric) slot,
    -1 off a GPU; ``first``: observed for the first time this tick."""
    n = slot.shape[0]
    new_slots = np.unique(slot[first[:n]])
    new_slots = new_slots[new_slots >= 0]
    if new_slots.size:
        seen[:n][seen[:n] & missing[:n] & np.isin(slot, new_slots)] = False


def known_per_gpu(a: dict[str, np.ndarray], seen: BoolArray) -> FloatArray:
    """Per GPU entity, how many of its series were ever observed (changes rarely: the caller
    caches it until a series is first observed)."""
    observed = seen[a["gpu_series"]]
    n_entities = a["entity_node"].shape[0]
    counts = np.bincount(a["gpu_series_entity"][observed], minlength=n_entities)
    return counts.astype(np.float64)


def presence_values(
    a: dict[str, np.ndarray],
    missing: BoolArray,
    seen: BoolArray,
    known: FloatArray,
    n_nodes: int,
    out: FloatArray,
) -> FloatArray:
    """Into ``out``: each GPU's missing fraction (its series ever observed, ``seen``, that are
    ``missing`` this tick, over ``known``, their number) and each node's GPU count (GPUs with
    a series observed); NaN for a node with no GPU series observed this tick. Counts come
    from the few series that are missing (per-entity totals are fixed per layout), not from
    every series. Returns per GPU whether it is gone (1.0): series observed before, every one
    of them missing (fraction 1) while its node has GPU data this tick; NaN where the node has
    none (a target down or a lost scrape is no evidence about one GPU)."""
    n_entities = a["entity_node"].shape[0]
    if n_entities == 0:
        return np.zeros(0)
    absent = np.flatnonzero(missing)
    ent = a["series_entity"][absent]
    on_gpu = ent >= 0
    absent, ent = absent[on_gpu], ent[on_gpu]
    observed_per_gpu = a["entity_series"] - np.bincount(ent, minlength=n_entities)
    gpu_up = observed_per_gpu > 0
    gpus_per_node = np.bincount(
        a["entity_node"], weights=gpu_up.astype(np.float64), minlength=n_nodes
    )
    node_has_data = gpus_per_node > 0
    was_seen = seen[absent]
    missing_n = np.bincount(ent[was_seen], minlength=n_entities).astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        fraction = np.where(known > 0, missing_n / known, np.nan)
    fraction[~node_has_data[a["entity_node"]]] = np.nan
    mi = a["missing"]
    out[mi] = fraction[a["entity"][mi]]
    co = a["count"]
    node_of = a["entity"][co]
    out[co] = np.where(node_has_data[node_of], gpus_per_node[node_of], np.nan)
    gone = (fraction >= 1.0).astype(np.float64)  # nothing known (NaN) is not gone
    return np.where(node_has_data[a["entity_node"]], gone, np.nan)


def frozen_values(
    a: dict[str, np.ndarray],
    scraped: BoolArray | None,
    frozen: BoolArray | None,
    n_nodes: int,
    out: FloatArray,
) -> None:
    """Into ``out``: per node, the share of its targets scraped this tick (``scraped``, per
    target in ``a["target_node"]``'s order) that are ``frozen``; NaN for a node none of whose
    targets sent anything, and for every node when there are no targets to compare (None,
    or arrays of another length)."""
    node_of = a["target_node"]
    if scraped is None or frozen is None or frozen.shape[0] != node_of.shape[0]:
        out[a["frozen"]] = np.nan
        return
    known = node_of >= 0
    targets = np.bincount(node_of[known & scraped], minlength=n_nodes)
    stuck = np.bincount(node_of[known & frozen], minlength=n_nodes)
    with np.errstate(invalid="ignore", divide="ignore"):
        share = np.where(targets > 0, stuck / targets, np.nan)
    fz = a["frozen"]
    out[fz] = share[a["entity"][fz]]
