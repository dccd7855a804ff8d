"""Frame assembly: tick binning (k*step - step, k*step], latest wins, gaps, batch splits."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from detector.model import Frame, SampleBatch
from detector.series.frame import frames_from_batches, infer_step


def batch(rows: list[tuple[float, int, float]]) -> SampleBatch:
    """(time, column, value) rows, already time-ordered."""
    t, c, v = zip(*rows, strict=True) if rows else ((), (), ())
    return SampleBatch(
        np.asarray(t, dtype=np.float64), np.asarray(c, dtype=np.int64), np.asarray(v, dtype=float)
    )


def frames(batches: list[SampleBatch], width: int = 3, step: float | None = 30.0) -> list[Frame]:
    return list(frames_from_batches(batches, lambda: width, step))


def as_rows(out: list[Frame]) -> list[tuple[float, list[float]]]:
    return [(f.time, [None if np.isnan(v) else v for v in f.values.tolist()]) for f in out]


def test_tick_covers_half_open_interval_ending_at_its_time() -> None:
    """Samples at 0.5 and 30 belong to tick 30; 30.5 and 60 to tick 60."""
    out = frames([batch([(0.5, 0, 1.0), (30.0, 1, 2.0), (30.5, 0, 3.0), (60.0, 1, 4.0)])])
    assert [(30.0, [1.0, 2.0, None]), (60.0, [3.0, 4.0, None])] == as_rows(out)


def test_latest_sample_of_a_series_within_a_tick_wins() -> None:
    """Two samples of one series in one tick: the later one is the tick's value."""
    out = frames([batch([(31.0, 0, 1.0), (40.0, 0, 2.0), (45.0, 1, 5.0), (59.0, 0, 3.0)])])
    assert [(60.0, [3.0, 5.0, None])] == as_rows(out)


def test_empty_ticks_are_skipped() -> None:
    """A gap in the data yields no frame for the ticks in between."""
    out = frames([batch([(30.0, 0, 1.0), (150.0, 0, 2.0)])])
    assert [30.0, 150.0] == [f.time for f in out]


def test_a_tick_split_across_batches_is_one_frame() -> None:
    """Batch boundaries mid-tick do not split the tick; empty batches are ignored."""
    out = frames(
        [
            batch([(10.0, 0, 1.0)]),
            batch([]),
            batch([(20.0, 1, 2.0)]),
            batch([(25.0, 2, 3.0), (35.0, 0, 4.0)]),
        ]
    )
    assert [(30.0, [1.0, 2.0, 3.0]), (60.0, [4.0, None, None])] == as_rows(out)


def test_latest_wins_across_batches_of_one_tick() -> None:
    """The later batch's sample of a series overrides the earlier batch's in the same tick."""
    out = frames([batch([(10.0, 0, 1.0)]), batch([(20.0, 0, 2.0)])])
    assert [(30.0, [2.0, None, None])] == as_rows(out)


def test_frame_width_follows_the_growing_index() -> None:
    """A frame is as wide as the index when emitted; columns unseen in its tick are NaN."""
    width = [1]

    def grow_while_reading() -> Iterator[SampleBatch]:
        yield batch([(30.0, 0, 1.0)])
        width[0] = 4  # the reader met new series
        yield batch([(60.0, 3, 2.0)])

    out = list(frames_from_batches(grow_while_reading(), lambda: width[0], 30.0))
    assert [(30.0, [1.0, None, None, None]), (60.0, [None, None, None, 2.0])] == as_rows(out)


def test_step_is_inferred_from_the_data_when_not_given() -> None:
    """15 s scrapes: ticks every 15 s."""
    rows = [(float(t), c, float(t)) for t in range(15, 91, 15) for c in (0, 1)]
    out = frames([batch(rows)], step=None)
    assert [15.0, 30.0, 45.0, 60.0, 75.0, 90.0] == [f.time for f in out]


def test_infer_step_is_the_median_positive_gap_per_series() -> None:
    """Interleaved series at 10 s, a duplicate timestamp and one long gap: 10 s."""
    rows = [(float(t), c, 1.0) for t in range(0, 100, 10) for c in (0, 1)]
    rows += [(90.0, 0, 2.0), (400.0, 0, 3.0)]
    rows.sort(key=lambda r: r[0])
    assert 10.0 == infer_step(batch(rows))


def test_infer_step_falls_back_to_default_without_gaps() -> None:
    """One sample, or samples all at one time, give the default."""
    assert 30.0 == infer_step(batch([(5.0, 0, 1.0)]))
    assert 7.0 == infer_step(batch([(5.0, 0, 1.0), (5.0, 1, 1.0)]), default=7.0)


def test_a_jittery_scrape_interval_is_read_as_whole_seconds() -> None:
    """Raw scrape times (a TSDB dump) jitter by milliseconds around 15 s: the step is 15, so
    the ticks do not drift against the scrapes; 0.25 s and 7.5 s steps stay as they are."""
    rng = np.random.default_rng(1)
    jitter = [(15.0 * k + 7.3 + rng.uniform(0.0, 0.004), 0, 1.0) for k in range(200)]
    assert 15.0 == infer_step(batch(jitter))
    assert 0.25 == infer_step(batch([(0.25 * k, 0, 1.0) for k in range(10)]))
    assert 7.5 == infer_step(batch([(7.5 * k, 0, 1.0) for k in range(10)]))
