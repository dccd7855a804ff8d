"""``detector record``: scrape the targets on the scrape interval and write rotating dumps.

Contract
    :func:`record` scrapes every ``interval_s`` until ``stop_event`` is set and writes what
    the targets expose, unmodified except for the target labels added to every series as
    Prometheus adds them (``instance``, ``node`` and any configured target label; an exposed
    label of the same name is kept as ``exported_<name>``), plus Prometheus' per-target
    ``up``, ``scrape_duration_seconds`` and ``scrape_samples_scraped``. Samples carry the
    scrape's wall-clock time unless the exporter gave their own timestamp.

    Output: OpenMetrics files in ``out_dir`` (written by
    :class:`~detector.ingest.dumps_writer.OpenMetricsWriter`), named
    ``<prefix>-<UTC time of the first scrape>-<sequence>.om`` so that name order is time
    order (``detector replay DIR`` reads a directory in name order). A file is closed and a
    new one started when its estimated size reaches ``rotate_bytes`` or its first scrape is
    ``rotate_s`` old. Every file is complete on its own (``# EOF``, sorted series): each
    one can be given to ``detector replay`` or ``promtool tsdb create-blocks-from
    openmetrics``. A file appears atomically when closed; stopping (event, cancellation, an
    error) closes the current file with everything scraped so far. No empty file is written.

    ``detector run`` with ``record.dir`` writes each tick through the same
    :class:`RoundRecorder`, with the tick's remote-written samples after its scrape round
    (stamped with the tick's time, labelled as Prometheus wrote them): the recording replays
    to the frames the daemon scored, whichever source brought them.

    A tick that overruns the interval skips the ticks it missed (logged) rather than
    scraping in a burst.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol

from ..config import Config
from ..logs import get_logger
from ..model import Exposition, Labels, Sample
from .dumps.writer import OpenMetricsWriter, series_text
from .kubernetes import PodDiscovery
from .parse import split_series
from .scrape import HEALTH_METRICS, Scraper, TargetScrape
from .targets import Target, TargetSource

__all__ = [
    "DEFAULT_ROTATE_BYTES",
    "DEFAULT_ROTATE_S",
    "RoundRecorder",
    "TargetScraper",
    "record",
    "run_record",
]

DEFAULT_ROTATE_BYTES = 256 * 1024 * 1024
DEFAULT_ROTATE_S = 3600.0
_HEALTH_TYPES = dict.fromkeys(HEALTH_METRICS, "gauge")
_LINE_OVERHEAD = 32  # bytes per written line beyond the series text: value, time, blanks
_log = get_logger(component="record")


class TargetScraper(Protocol):
    """What :func:`record` needs from a scraper (``Scraper`` or a test fake)."""

    async def scrape_targets(self, targets: Sequence[Target]) -> list[TargetScrape]: ...


def relabel(key: str, target_labels: Labels) -> str:
    """A raw series key with the target labels added; a clashing exposed label is renamed
    ``exported_<name>`` (again while that name is taken, as Prometheus does)."""
    name, labels = split_series(key)
    mine = {k for k, _ in target_labels}
    taken = mine | {k for k, _ in labels}
    out = list(target_labels)
    for label, value in labels:
        if label in mine:
            while label in taken:
                label = f"exported_{label}"
            taken.add(label)
        out.append((label, value))
    return series_text(name, tuple(sorted(out)))


class _Segment:
    """One output file being filled."""

    def __init__(self, out_dir: Path, prefix: str, seq: int, first: float) -> None:
        stamp = datetime.fromtimestamp(first, UTC).strftime("%Y%m%dT%H%M%SZ")
        self.path = out_dir / f"{prefix}-{stamp}-{seq:05d}.om"
        self.writer = OpenMetricsWriter(self.path, _HEALTH_TYPES)
        self.first = first
        self.bytes = 0

    def add(self, result: TargetScrape, now: float, keys: dict[tuple[Labels, str], str]) -> None:
        target_labels = result.target.labels
        exp = result.exposition
        if exp is not None and exp.keys:
            relabeled = []
            for key in exp.keys:
                text = keys.get((target_labels, key))
                if text is None:
                    text = keys[(target_labels, key)] = relabel(key, target_labels)
                relabeled.append(text)
            out = Exposition(exp.source, relabeled, exp.values, exp.timestamps, exp.types)
            self.writer.add_exposition(out, default_time=now)
            self.bytes += sum(map(len, relabeled)) + _LINE_OVERHEAD * len(relabeled)

    def add_written(self, samples: Sequence[Sample]) -> None:
        """Remote-written samples, as written (Prometheus added its target labels already)."""
        self.writer.add_many(samples)
        self.bytes += sum(len(series_text(s.name, s.labels)) + _LINE_OVERHEAD for s in samples)

    def add_health(
        self, target_labels: Labels, health: tuple[float, float, float], now: float
    ) -> None:
        """``up``, ``scrape_duration_seconds`` and ``scrape_samples_scraped`` of a target."""
        for metric, value in zip(_HEALTH_TYPES, health, strict=True):
            self.writer.add(Sample(metric, target_labels, value, now))
        self.bytes += 3 * (len(series_text("up", target_labels)) + _LINE_OVERHEAD)


class RoundRecorder:
    """Scrape rounds into rotating OpenMetrics dumps (module docstring): ``record`` and
    ``detector run`` (``record.dir``) write what they scraped through this one writer."""

    def __init__(
        self,
        out_dir: Path,
        *,
        rotate_bytes: int = DEFAULT_ROTATE_BYTES,
        rotate_s: float = DEFAULT_ROTATE_S,
        prefix: str = "detector-record",
    ) -> None:
        out_dir.mkdir(parents=True, exist_ok=True)
        self.out_dir, self.prefix = out_dir, prefix
        self.rotate_bytes, self.rotate_s = rotate_bytes, rotate_s
        self.files: list[Path] = []
        self._keys: dict[tuple[Labels, str], str] = {}
        self._segment: _Segment | None = None

    def add(
        self, results: Sequence[TargetScrape], now: float, written: Sequence[Sample] = ()
    ) -> None:
        """Write one round, stamped ``now`` (samples without their own timestamp), and the
        tick's remote-written samples (``RemoteWriteSource.written``: stamped with the tick,
        labelled as written) after it, as the tick's frame takes them over a scraped value."""
        if not results and not written:
            return
        if self._segment is None:
            self._segment = _Segment(self.out_dir, self.prefix, len(self.files), now)
        health: dict[Labels, tuple[float, float, float]] = {}
        for result in results:
            self._segment.add(result, now, self._keys)
            # Targets of one label set share their health series: combined as the scrape's
            # frame combines them (ingest/scrape.py: down if any is, the slowest, the sum).
            up, duration, samples = health.get(result.target.labels, (1.0, 0.0, 0.0))
            health[result.target.labels] = (
                min(up, 1.0 if result.up else 0.0),
                max(duration, result.duration_s),
                samples + float(result.samples),
            )
        for labels, values in health.items():
            self._segment.add_health(labels, values, now)
        self._segment.add_written(written)
        if self._segment.bytes >= self.rotate_bytes or now - self._segment.first >= self.rotate_s:
            self.close()

    def close(self) -> None:
        """Close the current file (it appears atomically); the next round starts another."""
        segment, self._segment = self._segment, None
        if segment is not None:
            segment.writer.close()
            self.files.append(segment.path)
            self._keys.clear()  # relabelled keys of series since gone must not pile up
            _log.info("dump written", file=str(segment.path), samples=segment.writer.samples)


def _log_changes(results: Sequence[TargetScrape], last: dict[str, str]) -> None:
    """Log a target's failure when it starts or changes reason, and its recovery."""
    for result in results:
        url, before = result.target.url, last.get(result.target.url, "")
        now = result.error.reason if result.error is not None else ""
        if now != before:
            if now:
                _log.warning("target down", target=url, error=str(result.error))
            else:
                _log.info("target up", target=url)
            last[url] = now


async def record(
    targets: Sequence[Target] | Callable[[], Sequence[Target]],
    scraper: TargetScraper,
    out_dir: Path,
    *,
    interval_s: float,
    rotate_bytes: int = DEFAULT_ROTATE_BYTES,
    rotate_s: float = DEFAULT_ROTATE_S,
    stop_event: asyncio.Event,
    wall: Callable[[], float] = time.time,
    prefix: str = "detector-record",
) -> list[Path]:
    """Record until ``stop_event`` is set; returns the files written, oldest first."""
    if interval_s <= 0:
        raise ValueError(f"interval_s must be > 0 (got {interval_s})")
    current = targets if callable(targets) else (lambda: targets)
    loop = asyncio.get_running_loop()
    recorder = RoundRecorder(out_dir, rotate_bytes=rotate_bytes, rotate_s=rotate_s, prefix=prefix)
    status: dict[str, str] = {}
    start, tick = loop.time(), 0
    try:
        while not stop_event.is_set():
            now = wall()
            results = await scraper.scrape_targets(current())
            _log_changes(results, status)
            recorder.add(results, now)
            tick += 1
            behind = int((loop.time() - start) // interval_s) + 1
            if behind > tick:
                _log.warning("record fell behind, ticks skipped", skipped=behind - tick)
                tick = behind
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop_event.wait(), start + tick * interval_s - loop.time())
    finally:
        recorder.close()
    return recorder.files


def run_record(
    config: Config,
    out_dir: Path,
    duration_s: float | None = None,
    *,
    rotate_bytes: int = DEFAULT_ROTATE_BYTES,
    rotate_s: float = DEFAULT_ROTATE_S,
) -> list[Path]:
    """``detector record``: record the config's targets (file_sd reloaded, shard applied)
    into ``out_dir`` for ``duration_s`` (None: until SIGINT/SIGTERM, which finish the
    current file cleanly). Returns the files written."""

    async def main() -> list[Path]:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            # Not available off the main thread or on some platforms: then Ctrl-C cancels,
            # and record() still closes its file on the way out.
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.add_signal_handler(signum, stop.set)
        if duration_s is not None:
            loop.call_later(duration_s, stop.set)
        pods = PodDiscovery.for_agent(config)  # agent mode in Kubernetes: followed meanwhile
        source = TargetSource(config, pods=pods)
        following = asyncio.create_task(pods.run()) if pods is not None else None
        try:
            async with Scraper.from_config(config.scrape) as scraper:
                return await record(
                    source.current,
                    scraper,
                    out_dir,
                    interval_s=config.scrape.interval_s,
                    rotate_bytes=rotate_bytes,
                    rotate_s=rotate_s,
                    stop_event=stop,
                )
        finally:
            if following is not None and pods is not None:
                following.cancel()
                await asyncio.gather(following, return_exceptions=True)
                await pods.aclose()

    return asyncio.run(main())
