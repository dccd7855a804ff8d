"""Limits: what the detector does at the edges of its input, and that it stays bounded there.

- a target that suddenly exposes a million series is capped (max_series_per_target): warned,
  logged, counted in scrape_samples_scraped, and the series index grows by the cap only;
- a body past the byte cap is refused (ScrapeError "body_too_large") after reading no more
  than the cap, whatever the exporter would send;
- dumps with samples out of order and duplicate timestamps read in time order, equal times in
  file order (dumps.py), so the last sample written wins its tick (frame.py), in every format
  and through the external merge sort alike;
- gaps of hours: no alert storm from a 6- or 30-hour gap; history whose weight decayed to
  nothing is forgotten and warm-up starts again;
- counter resets: NaN rate for that tick, no alert; NaN and +/-Inf values never make a score
  NaN, infinite or out of [0, 1].
"""

from __future__ import annotations

import asyncio
import gzip
import json
import math
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import httpx
import numpy as np
import pytest
import structlog

from detector.config.load import load_config
from detector.config.rules import load_signal_rules
from detector.config.schema import DEFAULT_THRESHOLD
from detector.ingest.dumps.read import read_dump
from detector.ingest.scrape import Scraper
from detector.ingest.targets import make_target
from detector.loop import LoopTick as TickResult
from detector.loop import TickLoop
from detector.model import ColumnLayout, FloatArray, Frame
from detector.scorers.changepoint import ChangePoint
from detector.scorers.zscore import RobustZScore
from detector.series.frame import frames_from_batches
from detector.series.index import SeriesIndex
from detector.signals.map import SignalMap

T0 = 1_700_000_040.0  # a multiple of the 30 s step: tick times equal sample times
STEP = 30.0
HOUR = 3600.0
HANG_GUARD_S = 120.0


def scraper(handler: Callable[[httpx.Request], httpx.Response], **limits: int) -> Scraper:
    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    return Scraper(client, timeout_s=30.0, jitter_fraction=0.0, **limits)  # type: ignore[arg-type]


# --- scrape caps ------------------------------------------------------------------------------


@pytest.mark.slow
async def test_million_series_target_is_capped_and_the_index_grows_by_the_cap_only() -> None:
    """A target jumping from 20 to 1,000,000 series keeps its first 1,000 (warning, log, the
    exposed count in scrape_samples_scraped); repeated rounds do not grow the index again."""
    small = "".join(f'temp{{gpu="{g}"}} {40 + g}\n' for g in range(20)).encode()
    huge = "".join(f'cardinality{{id="{i}"}} {i}\n' for i in range(1_000_000)).encode()
    pages = iter([small, huge, huge])
    handler = lambda request: httpx.Response(200, content=next(pages))  # noqa: E731
    index = SeriesIndex()
    target = make_target("http://node-01:9400/metrics")
    async with scraper(handler, max_series_per_target=1000, body_limit_bytes=64 << 20) as s:
        first = await asyncio.wait_for(s.scrape_all([target], index, T0), HANG_GUARD_S)
        width = len(index)
        with structlog.testing.capture_logs() as logs:
            second = await asyncio.wait_for(s.scrape_all([target], index, T0 + STEP), HANG_GUARD_S)
        after_cap = len(index)
        third = await asyncio.wait_for(s.scrape_all([target], index, T0 + 2 * STEP), HANG_GUARD_S)
    assert 20 + 3 == width  # 20 series and the three health series
    assert width + 1000 == after_cap == len(index)
    assert len(index) == second.frame.values.shape[0] == third.frame.values.shape[0]
    result = second.targets[0]
    assert result.up
    assert [("too_many_series", "1000000 series exposed, first 1000 kept")] == [
        (w.reason, w.detail) for w in result.warnings
    ]
    assert [("series capped", 1_000_000, 1000)] == [
        (e["event"], e["exposed"], e["kept"]) for e in logs if e["event"] == "series capped"
    ]
    samples = index.column_of("scrape_samples_scraped", (("node", "node-01"),))
    assert samples is not None
    assert [20.0, 1_000_000.0] == [first.frame.values[samples], second.frame.values[samples]]
    kept = [info for info in index.infos if info.metric == "cardinality"]
    assert [str(i) for i in range(1000)] == [dict(info.labels)["id"] for info in kept]


async def test_body_past_the_cap_is_refused_after_reading_only_the_cap() -> None:
    """An endless streamed body (no content-length) is cut at the byte cap: the target is down
    with "body_too_large", the index is untouched and at most the cap (plus one chunk) was read."""
    chunk = b'm{i="0"} 1\n' * 6000  # 66 kB
    pulled = 0

    async def endless() -> AsyncIterator[bytes]:
        nonlocal pulled
        while pulled < 10_000:  # 660 MB if nothing stopped the read (a bug fails, not hangs)
            pulled += 1
            yield chunk

    handler = lambda request: httpx.Response(200, content=endless())  # noqa: E731
    index = SeriesIndex()
    async with scraper(handler, body_limit_bytes=1 << 20) as s:
        round_ = await asyncio.wait_for(
            s.scrape_all([make_target("http://a:9100/metrics")], index, T0), HANG_GUARD_S
        )
    result = round_.targets[0]
    assert result.error is not None
    assert ("body_too_large", False) == (result.error.reason, result.up)
    assert (1 << 20) // len(chunk) + 1 >= pulled
    assert {"up", "scrape_duration_seconds", "scrape_samples_scraped"} == {
        info.metric for info in index.infos
    }


# --- dumps: order and duplicates --------------------------------------------------------------

# (value, seconds after T0) in file order: out of order, three samples at +30 s, one at +60 s
WRITTEN = [(1.0, 60), (2.0, 0), (3.0, 30), (4.0, 30), (5.0, 30), (6.0, 90), (7.0, 60)]


def write_dump(path: Path, fmt: str) -> Path:
    if fmt == "openmetrics":
        text = "".join(f'm{{i="a"}} {v} {T0 + dt:.0f}\n' for v, dt in WRITTEN) + "# EOF\n"
    elif fmt == "tsdb-dump":
        text = "".join(f'{{__name__="m", i="a"}} {v} {(T0 + dt) * 1000:.0f}\n' for v, dt in WRITTEN)
    else:
        values = [[T0 + dt, str(v)] for v, dt in WRITTEN]
        result = [{"metric": {"__name__": "m", "i": "a"}, "values": values}]
        text = json.dumps({"status": "success", "data": {"resultType": "matrix", "result": result}})
    path.write_bytes(gzip.compress(text.encode()))
    return path


@pytest.mark.parametrize("fmt", ["openmetrics", "tsdb-dump", "prometheus-json"])
@pytest.mark.parametrize("chunk_samples", [1_000_000, 2])
def test_out_of_order_and_duplicate_samples_read_sorted_and_last_written_wins(
    fmt: str, chunk_samples: int, tmp_path: Path
) -> None:
    """Samples come back sorted by time with equal times in file order (also through the
    external merge of 2-sample runs), so the frame of each tick holds the last one written."""
    path = write_dump(tmp_path / "dump.gz", fmt)
    index = SeriesIndex()
    batches = list(read_dump(path, index, chunk_samples=chunk_samples, cache_dir=tmp_path / "c"))
    times = [t - T0 for b in batches for t in b.times.tolist()]
    values = [v for b in batches for v in b.values.tolist()]
    assert [0, 30, 30, 30, 60, 60, 90] == times
    assert [2.0, 3.0, 4.0, 5.0, 1.0, 7.0, 6.0] == values
    frames = list(frames_from_batches(batches, lambda: len(index), STEP))
    assert [(0, 2.0), (30, 5.0), (60, 7.0), (90, 6.0)] == [
        (f.time - T0, float(f.values[0])) for f in frames
    ]


# --- a synthetic fleet through the production pipeline ----------------------------------------

COUNTERS = ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "node_nfs_rpc_retransmissions_total")


class Fleet:
    """6 nodes x 4 GPUs: temperature and power gauges, the XID gauge, a PCIe replay counter per
    GPU and an NFS retransmission counter per node, fed to the production pipeline."""

    def __init__(self, nodes: int = 6, gpus: int = 4) -> None:
        self.index = SeriesIndex()
        self.rng = np.random.default_rng(7)
        self.gauges: list[tuple[int, float, float]] = []  # column, mean, noise
        self.counters: list[tuple[int, int, float]] = []  # column, node, mean increase a tick
        for node in range(nodes):
            for gpu in range(gpus):
                labels = (("Hostname", f"node{node}"), ("UUID", f"GPU-{node}-{gpu}"))
                labels += (("gpu", str(gpu)),)
                add = self.index.add
                self.gauges.append((add("DCGM_FI_DEV_GPU_TEMP", labels), 60.0 + gpu, 0.5))
                self.gauges.append((add("DCGM_FI_DEV_POWER_USAGE", labels), 600.0, 10.0))
                self.gauges.append((add("DCGM_FI_DEV_XID_ERRORS", labels), 0.0, 0.0))
                self.counters.append((add(COUNTERS[0], labels), node, 2.0))
            target = (("instance", f"node{node}:9100"),)
            self.counters.append((self.index.add(COUNTERS[1], target), node, 20.0))
        self.totals = np.zeros(len(self.counters))
        self.last_t: float | None = None
        self.pipeline = TickLoop.from_config(load_config(None, env={}), self.index)

    def frame(self, t: float, reboot: int | None = None) -> Frame:
        """One tick's values; ``reboot``: that node's counters restart from zero. Counters
        count in real time: across a gap they advance by the events of the whole gap."""
        values = np.full(len(self.index), np.nan)
        for column, mean, noise in self.gauges:
            values[column] = mean + self.rng.normal(0.0, noise) if noise else mean
        steps = 1.0 if self.last_t is None else (t - self.last_t) / STEP
        self.last_t = t
        for i, (_, node, rate) in enumerate(self.counters):
            events = self.rng.poisson(rate * steps)
            self.totals[i] = 0.0 if node == reboot else self.totals[i] + events
        values[[c for c, _, _ in self.counters]] = self.totals
        return Frame(t, values)

    def run(
        self, times: list[float], edit: Callable[[int, Frame], Frame] | None = None
    ) -> list[TickResult]:
        out = []
        for k, t in enumerate(times):
            frame = self.frame(t)
            out.append(self.pipeline.step(edit(k, frame) if edit else frame))
        return out


def ticks(start: float, count: int) -> list[float]:
    return [start + STEP * k for k in range(count)]


def alerts_started(results: list[TickResult]) -> list[str]:
    return [f"{a.node}@{a.start - T0:.0f}s" for r in results for a in r.started]


def scores(results: list[TickResult]) -> FloatArray:
    return np.concatenate([np.concatenate((r.node_score, r.scores.gpu_score)) for r in results])


@pytest.mark.slow
@pytest.mark.parametrize("gap_hours", [6, 30])
def test_hours_long_gap_raises_no_alert_storm(gap_hours: int) -> None:
    """Two hours, a silence of hours (30 h: 30 z-score half-lives, enough for those columns
    to forget and warm up again), two more hours: no alert, every score finite, and from the
    second tick after the gap every score below the alert threshold. (The first tick carries
    the whole gap's counter events; its Poisson surprise may spike once: bench/RESULTS.md.)"""
    fleet = Fleet()
    before = fleet.run(ticks(T0, 240))
    after = fleet.run(ticks(T0 + 240 * STEP + gap_hours * HOUR, 240))
    assert [] == alerts_started(before + after)
    assert [] == fleet.pipeline.open_alerts()
    assert bool(np.isfinite(scores(after)).all())
    assert float(scores(after[1:]).max()) < DEFAULT_THRESHOLD


@pytest.mark.parametrize("scorer", [RobustZScore, ChangePoint])
def test_history_of_negligible_weight_is_forgotten_and_warm_up_restarts(
    scorer: Callable[..., RobustZScore | ChangePoint],
) -> None:
    """A jump after 1 half-life of silence scores high; the same jump after 40 half-lives
    (the history's weight, ~86 observations, decayed below 1e-6) scores 0: the old history is
    forgotten and the column is in warm-up again."""
    layout = ColumnLayout(
        *(np.zeros(1, dtype=np.int64) for _ in range(5)), signal_names=("s",), node_names=("n",)
    )
    rng = np.random.default_rng(0)

    def jump_after(gap_half_lives: float) -> float:
        model = scorer(half_life_s=60.0, warmup=5)
        for t in range(50):
            model.update(float(t), np.array([10.0 + rng.normal(0.0, 1.0)]), layout)
        jump = model.update(49.0 + gap_half_lives * 60.0, np.array([40.0]), layout)
        return float(jump[0])

    assert jump_after(1.0) > 5.0
    assert 0.0 == jump_after(40.0)


@pytest.mark.slow
def test_counter_reset_gives_a_nan_rate_for_that_tick_and_no_alert() -> None:
    """A node reboot resets its counters to zero: their rate is NaN on that tick only (not a
    huge negative or positive rate), and nothing alerts."""
    fleet = Fleet()
    rates = SignalMap(load_signal_rules(), fleet.index)
    rates.sync()
    columns = {
        i for i in range(len(rates)) if rates.column_names(i)[:2] in
        {("pcie_replay", "node2"), ("nfs_rpc_retransmissions", "node2")}
    }  # fmt: skip
    assert 5 == len(columns)  # 4 GPUs' PCIe replay counters and the node's NFS counter
    seen: list[FloatArray] = []

    def reboot_at_100(k: int, frame: Frame) -> Frame:
        if k == 100:
            frame = fleet.frame(frame.time, reboot=2)
        seen.append(rates.compute(frame.time, frame.values)[sorted(columns)])
        return frame

    results = fleet.run(ticks(T0, 200), reboot_at_100)
    assert [] == alerts_started(results)
    assert bool(np.isnan(seen[100]).all())
    assert bool(np.isfinite(np.array(seen[101:])).all())
    assert float(np.abs(np.array(seen[101:])).max()) < 100.0  # per-second rates of ~2 and ~20


@pytest.mark.slow
def test_nan_and_infinite_values_never_make_a_score_nan_infinite_or_out_of_range() -> None:
    """NaN, +Inf and -Inf sprinkled over gauges and counters for 20 ticks: every node and GPU
    score stays in [0, 1] (NaN only for an entity that sent nothing) and nothing alerts."""
    fleet = Fleet()
    rng = np.random.default_rng(3)
    poison = np.array([math.nan, math.inf, -math.inf])

    def sprinkle(k: int, frame: Frame) -> Frame:
        if 120 <= k < 140:
            hit = rng.choice(len(frame.values), size=len(frame.values) // 10, replace=False)
            frame.values[hit] = rng.choice(poison, size=hit.size)
        return frame

    results = fleet.run(ticks(T0, 240), sprinkle)
    all_scores = scores(results)
    sent = ~np.isnan(all_scores)
    assert bool(((all_scores[sent] >= 0.0) & (all_scores[sent] <= 1.0)).all())
    assert bool(np.isfinite(scores(results[140:])).all())
    assert [] == alerts_started(results)


def test_label_churn_stops_at_the_index_capacity() -> None:
    """A target whose label values change every scrape adds new series each time; once the
    index holds max_series_total series, new ones are refused (column -1, counted) while
    known series and scrape health keep their columns."""
    from detector.ingest.parse import split_series
    from detector.series.index import SeriesIndex

    index = SeriesIndex(capacity=50)
    target = (("instance", "n1:9100"), ("node", "n1"))
    for scrape in range(20):
        keys = ["node_load1"] + [f'churn{{id="{scrape}-{i}"}}' for i in range(10)]
        cols = index.columns(keys, split_series, target)
        health = index.columns(["up"], split_series, target, essential=True)
        assert cols[0] >= 0
        assert health[0] >= 0
    assert 50 == len(index)
    assert 20 * 10 - (50 - 2) == index.refused  # every churned series past the capacity
    # a new target's scrape health still gets its column when the index is full
    other = (("instance", "n2:9100"), ("node", "n2"))
    assert [50] == index.columns(["up"], split_series, other, essential=True).tolist()
