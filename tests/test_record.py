"""detector record: scraped pages written as rotating dumps that replay and promtool read."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pytest
from e2e.procs import promtool_backfill, require_tool

from detector.config.load import Config
from detector.errors import ScrapeError
from detector.ingest.dumps.read import read_dump
from detector.ingest.parse import parse_exposition, split_series
from detector.ingest.record import record, relabel, run_record
from detector.ingest.scrape import Scraper, TargetScrape
from detector.ingest.targets import Target, make_target
from detector.series.index import SeriesIndex
from detector.sim import Scenario, serve

Rows = dict[tuple[int, float], float]  # (column, time) -> value


class Counting:
    """Wraps a scraper: keeps every round's results and stops the recording after ``rounds``."""

    def __init__(self, inner: Scraper | Canned, stop: asyncio.Event, rounds: int) -> None:
        self.inner, self.stop, self.rounds = inner, stop, rounds
        self.seen: list[list[TargetScrape]] = []

    async def scrape_targets(self, targets: Sequence[Target]) -> list[TargetScrape]:
        results = await self.inner.scrape_targets(targets)
        self.seen.append(results)
        if len(self.seen) >= self.rounds:
            self.stop.set()
        return results


class Canned:
    """A scraper fake: every target answers the page it was given (None: down)."""

    def __init__(self, pages: dict[str, bytes | None]) -> None:
        self.pages = pages

    async def scrape_targets(self, targets: Sequence[Target]) -> list[TargetScrape]:
        out = []
        for target in targets:
            page = self.pages[target.url]
            if page is None:
                out.append(TargetScrape(target, 0.01, error=ScrapeError(target.url, "connect")))
            else:
                exp = parse_exposition(page, target.url)
                out.append(TargetScrape(target, 0.02, len(exp.keys), exposition=exp))
        return out


class Wall:
    """A wall clock that moves ``step`` seconds on every reading."""

    def __init__(self, start: float = 1_735_689_600.0, step: float = 15.0) -> None:
        self.now, self.step = start - step, step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


def rows_of_dump(files: list[Path], index: SeriesIndex) -> Rows:
    rows: Rows = {}
    for batch in read_dump(files, index, cache=False):
        columns, times, values = batch.columns.tolist(), batch.times.tolist(), batch.values.tolist()
        rows.update(((c, t), v) for c, t, v in zip(columns, times, values, strict=True))
    return rows


def rows_scraped(seen: list[list[TargetScrape]], times: list[float], index: SeriesIndex) -> Rows:
    rows: Rows = {}
    for results, t in zip(seen, times, strict=True):
        for r in results:
            if r.exposition is not None:
                columns = index.columns(r.exposition.keys, split_series, r.target.labels)
                for c, v in zip(columns.tolist(), r.exposition.values, strict=True):
                    rows[(c, t)] = v
            health = index.columns(
                ("up", "scrape_duration_seconds", "scrape_samples_scraped"),
                split_series,
                r.target.labels,
            ).tolist()
            rows[(health[0], t)] = 1.0 if r.up else 0.0
            rows[(health[1], t)] = r.duration_s
            rows[(health[2], t)] = float(r.samples)
    return rows


def same(expected: Rows, actual: Rows) -> bool:
    if expected.keys() != actual.keys():
        return False
    e = np.array([expected[k] for k in expected])
    a = np.array([actual[k] for k in expected])
    return bool(np.array_equal(e, a, equal_nan=True))


@pytest.fixture
def live_targets() -> Iterator[list[Target]]:
    """The simulator's exporters for 2 nodes, each exporter with its own job label."""
    scenario = Scenario(nodes=2, gpus=2, days=0.01, seed=9, failure_count=0, fault_trace=None)
    exporters = serve(scenario, port=0, speed=600.0)
    try:
        yield [
            make_target(url, node=node, kind=kind, labels={"job": kind})
            for node, pair in exporters.urls.items()
            for url, kind in zip(pair, ("dcgm", "node"), strict=True)
        ]
    finally:
        exporters.close()


async def test_recorded_dump_replays_the_scraped_values(
    live_targets: list[Target], tmp_path: Path
) -> None:
    """read_dump over the recorded files yields every scraped sample (and up/duration/count)
    at its scrape time, with the target labels."""
    stop = asyncio.Event()
    wall = Wall()
    async with Scraper(timeout_s=2.0) as scraper:
        counting = Counting(scraper, stop, rounds=3)
        files = await record(
            live_targets, counting, tmp_path, interval_s=0.01, stop_event=stop, wall=wall
        )
    times = [wall.now - wall.step * k for k in (2, 1, 0)]
    assert 1 == len(files)
    index = SeriesIndex()
    expected = rows_scraped(counting.seen, times, index)
    assert same(expected, rows_of_dump(files, index))
    assert {"node-01", "node-02"} == set(index.nodes())
    assert all(r.up for results in counting.seen for r in results)


async def test_files_rotate_by_size_each_complete_and_in_name_order(tmp_path: Path) -> None:
    """A small rotate_bytes gives several files; each reads alone; together they hold every
    sample; name order is time order."""
    page = "".join(f'temp{{gpu="{g}"}} {40 + g}\n' for g in range(8)).encode()
    target = make_target("http://gpu-01:9400/metrics")
    stop = asyncio.Event()
    counting = Counting(Canned({target.url: page}), stop, rounds=6)
    files = await record(
        [target],
        counting,
        tmp_path,
        interval_s=0.001,
        rotate_bytes=1500,
        stop_event=stop,
        wall=Wall(),
    )
    assert 2 < len(files)
    assert files == sorted(files) == sorted(p for p in tmp_path.iterdir())
    index = SeriesIndex()
    parts = [rows_of_dump([f], index) for f in files]
    firsts = [min(t for _, t in part) for part in parts]
    assert firsts == sorted(firsts)
    merged = {k: v for part in parts for k, v in part.items()}
    assert 6 * (8 + 3) == len(merged)
    assert same(merged, rows_of_dump(files, index))


async def test_files_rotate_by_age(tmp_path: Path) -> None:
    """rotate_s closes a file once its first scrape is that old (15 s ticks, 30 s files)."""
    target = make_target("http://gpu-01:9400/metrics")
    stop = asyncio.Event()
    counting = Counting(Canned({target.url: b"m 1\n"}), stop, rounds=6)
    files = await record(
        [target], counting, tmp_path, interval_s=0.001, rotate_s=30.0, stop_event=stop, wall=Wall()
    )
    index = SeriesIndex()
    assert [3, 3] == [len({t for _, t in rows_of_dump([f], index)}) for f in files]


async def test_down_target_is_recorded_as_up_zero(tmp_path: Path) -> None:
    """A target that fails is in the dump as up 0 and scrape_samples_scraped 0."""
    good, bad = make_target("http://a:9100/metrics"), make_target("http://b:9100/metrics")
    stop = asyncio.Event()
    counting = Counting(Canned({good.url: b"m 1\n", bad.url: None}), stop, rounds=1)
    files = await record([good, bad], counting, tmp_path, interval_s=0.001, stop_event=stop)
    index = SeriesIndex()
    rows = rows_of_dump(files, index)
    (t,) = {t for _, t in rows}
    health = ("up", "scrape_samples_scraped")
    for node, expected in (("a", [1.0, 1.0]), ("b", [0.0, 0.0])):
        columns = [index.column_of(metric, (("node", node),)) for metric in health]
        assert expected == [rows[(c, t)] for c in columns if c is not None]


async def test_cancelled_recording_still_writes_what_it_has(tmp_path: Path) -> None:
    """Cancelling the task (Ctrl-C) closes the current file with the rounds so far."""
    target = make_target("http://gpu-01:9400/metrics")
    stop = asyncio.Event()
    counting = Counting(Canned({target.url: b"m 1\n"}), stop, rounds=10**9)
    task = asyncio.create_task(
        record([target], counting, tmp_path, interval_s=0.01, stop_event=stop, wall=Wall())
    )
    while len(counting.seen) < 2:
        await asyncio.sleep(0.005)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    files = [p for p in tmp_path.iterdir() if not p.name.startswith(".")]
    assert 1 == len(files)
    rows = rows_of_dump(files, SeriesIndex())
    assert len(counting.seen) * 4 == len(rows)  # m + up, duration, samples per round


async def test_no_targets_writes_no_file(tmp_path: Path) -> None:
    """Nothing scraped, nothing written: no empty dump that replay would reject."""
    stop = asyncio.Event()
    counting = Counting(Canned({}), stop, rounds=2)
    assert [] == await record([], counting, tmp_path, interval_s=0.001, stop_event=stop)
    assert [] == list(tmp_path.iterdir())


def test_relabel_adds_target_labels_and_keeps_clashing_ones_as_exported() -> None:
    """instance/node from the target win; the exporter's own become exported_*."""
    target_labels = (("instance", "h:9400"), ("node", "gpu-01"))
    key = 'm{instance="x",exported_instance="y",gpu="0"}'
    assert (  # Prometheus: the clashing label moves to the first free exported_ name
        'm{exported_exported_instance="x",exported_instance="y",gpu="0",instance="h:9400",'
        'node="gpu-01"}'
    ) == relabel(key, target_labels)
    shadowing = relabel('m{a="x",exported_a="y"}', (("a", "t"),))
    assert 'm{a="t",exported_a="y",exported_exported_a="x"}' == shadowing
    assert 'up{instance="h:9400",node="gpu-01"}' == relabel("up", target_labels)


def test_run_record_records_a_configured_target_for_a_duration(
    live_targets: list[Target], tmp_path: Path
) -> None:
    """run_record (the CLI entry) scrapes the config's static targets until the duration."""
    static = [{"url": t.url, "node": t.node, "labels": {"job": t.kind}} for t in live_targets]
    config = Config.model_validate(
        {"targets": {"static": static}, "scrape": {"interval_s": 0.2, "timeout_s": 0.1}}
    )
    files = run_record(config, tmp_path / "out", duration_s=1.0)
    assert 1 == len(files)
    index = SeriesIndex()
    rows = rows_of_dump(files, index)
    assert {"node-01", "node-02"} == set(index.nodes())
    assert 2 <= len({t for _, t in rows})


@pytest.mark.tools
async def test_promtool_backfills_a_recorded_file(
    live_targets: list[Target], tmp_path: Path
) -> None:
    """promtool tsdb create-blocks-from openmetrics accepts a recorded file."""
    require_tool("promtool")  # before recording: skip early when it is missing
    stop = asyncio.Event()
    async with Scraper(timeout_s=2.0) as scraper:
        counting = Counting(scraper, stop, rounds=2)
        files = await record(
            live_targets, counting, tmp_path / "rec", interval_s=0.01, stop_event=stop, wall=Wall()
        )
    done = promtool_backfill(files[0], tmp_path / "db")
    assert 0 == done.returncode, done.stderr
    blocks = [p for p in (tmp_path / "db").iterdir() if (p / "meta.json").is_file()]
    assert 1 == len(blocks), done.stdout
    written = sum(r.samples + 3 for results in counting.seen for r in results)
    assert f" {written} " in done.stdout  # promtool's block table: NUM SAMPLES
