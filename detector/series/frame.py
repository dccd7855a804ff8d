"""Frame assembly: time-ordered sample batches -> one value vector per tick.

A tick covers the half-open interval ``(k*step - step, k*step]``; within it, the latest sample of
each series wins. Ticks with no samples at all are skipped (scorers are time-aware, a gap is
just a longer dt). The frame's length is the index length when the frame is emitted; columns
never seen in that tick are NaN.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

import numpy as np

from ..model import FloatArray, Frame, SampleBatch


def merge_frames(base: Frame, top: Frame) -> Frame:
    """One tick's frame from two sources aligned to one index (a scrape round and remote
    write): ``top``'s observed values win, ``base`` fills the rest; ``base``'s time. The
    shorter vector is NaN-padded (the index grows between the two)."""
    width = max(base.values.shape[0], top.values.shape[0])
    values: FloatArray = np.full(width, np.nan)
    values[: base.values.shape[0]] = base.values
    observed = np.flatnonzero(~np.isnan(top.values))
    values[observed] = top.values[observed]
    return Frame(base.time, values)


def infer_step(batch: SampleBatch, default: float = 30.0) -> float:
    """The data's own scrape interval: the median positive gap between samples of a series,
    as whole seconds when it is within 0.5% of them. Raw scrape times jitter by milliseconds
    (a TSDB dump): a median of 15.0003 s would let the ticks drift 1.7 s a day against the
    scrapes, until a scrape changes tick and every series of its target misses one."""
    if len(batch) < 2:
        return default
    order = np.lexsort((batch.times, batch.columns))
    cols = batch.columns[order]
    times = batch.times[order]
    same = cols[1:] == cols[:-1]
    gaps = np.diff(times)[same]
    gaps = gaps[gaps > 0]
    if gaps.size == 0:
        return default
    median = float(np.median(gaps))
    whole = round(median)
    return float(whole) if whole >= 1 and abs(median - whole) <= 0.005 * median else median


def frames_from_batches(
    batches: Iterable[SampleBatch], width: Callable[[], int], step_s: float | None = None
) -> Iterator[Frame]:
    """Yield one Frame per non-empty tick. ``width()`` is the current series-index length."""
    step = step_s
    pending_bin: float | None = None
    pending_cols: list[np.ndarray] = []
    pending_vals: list[np.ndarray] = []

    def emit(bin_id: float, cols: list[np.ndarray], vals: list[np.ndarray]) -> Frame:
        values: FloatArray = np.full(width(), np.nan)
        # Batches are time-ordered, so a later assignment to the same column is a later sample.
        for c, v in zip(cols, vals, strict=True):
            values[c] = v
        assert step is not None
        return Frame(bin_id * step, values)

    for batch in batches:
        if len(batch) == 0:
            continue
        if step is None:
            step = infer_step(batch)
        bins = np.ceil(batch.times / step)
        # boundaries where the bin changes
        cut = np.flatnonzero(np.diff(bins)) + 1
        starts = np.concatenate(([0], cut))
        ends = np.concatenate((cut, [len(batch)]))
        for s, e in zip(starts.tolist(), ends.tolist(), strict=True):
            b = float(bins[s])
            if pending_bin is not None and b != pending_bin:
                yield emit(pending_bin, pending_cols, pending_vals)
                pending_cols, pending_vals = [], []
            pending_bin = b
            pending_cols.append(batch.columns[s:e])
            pending_vals.append(batch.values[s:e])
    if pending_bin is not None:
        yield emit(pending_bin, pending_cols, pending_vals)
