"""One scrape round of a simulated cluster: the Scraper against a naive sequential scraper.

    python bench/scrape_bench.py [--nodes 63] [--gpus 8] [--repeat 7]

The simulator's live exporters (dcgm-exporter and node-exporter pages of every node, served
over loopback HTTP by ``detector.simulate.serve`` in this process) are scraped by:

- baseline: a sequential ``httpx.Client`` loop, each page parsed with prometheus_client's
  ``text_string_to_metric_families`` into a dict (series -> value), i.e. the obvious script;
- Scraper.scrape_all: every target concurrently, parsed and mapped to the series index, the
  frame built (what one daemon tick does before scoring).

Each repeat times both once, in turn, by wall clock (the exporters run in this process, so CPU
time would count the server's work too). The table shows medians and the baseline / Scraper
ratio from the same run. The first (cold) round of each is excluded: it fills caches.
"""

from __future__ import annotations

import argparse
import asyncio
import http.server
import statistics
import time

import httpx
from prometheus_client.parser import text_string_to_metric_families

from detector.ingest.scrape import Scraper
from detector.ingest.targets import Target, make_target
from detector.series.index import SeriesIndex
from detector.sim import Scenario, serve


def baseline_round(client: httpx.Client, targets: list[Target]) -> int:
    values: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for target in targets:
        text = client.get(target.url, timeout=10.0).text
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                labels = tuple(sorted(sample.labels.items())) + target.labels
                values[(sample.name, labels)] = sample.value
    return len(values)


async def scraper_rounds(targets: list[Target], repeat: int) -> tuple[list[float], int]:
    index = SeriesIndex()
    times = []
    async with Scraper(timeout_s=10.0, jitter_fraction=0.0) as scraper:
        for _ in range(repeat + 1):
            start = time.perf_counter()
            round_ = await scraper.scrape_all(targets, index, time.time())
            times.append(time.perf_counter() - start)
            if round_.errors:
                raise RuntimeError(f"scrape errors: {round_.errors[:3]}")
    return times[1:], int((round_.frame.values == round_.frame.values).sum())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=63)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    scenario = Scenario(
        nodes=args.nodes, gpus=args.gpus, days=0.01, seed=1, failure_count=0, fault_trace=None
    )
    # All targets share one simulator port, and socketserver listens with a backlog of 5:
    # 126 simultaneous connects overflow it and the kernel's SYN retries (1 s, 3 s, ...) would
    # be measured instead of the scrapers. Real exporters listen with the system's backlog.
    http.server.ThreadingHTTPServer.request_queue_size = 1024
    exporters = serve(scenario, port=0, clock=lambda: 0.0)  # frozen on the first tick
    try:
        targets = [
            make_target(url, node=node, labels={"job": job})
            for node, pair in exporters.urls.items()
            for url, job in zip(pair, ("dcgm", "node"), strict=True)
        ]
        base_times = []
        with httpx.Client() as client:
            for _ in range(args.repeat + 1):
                start = time.perf_counter()
                base_series = baseline_round(client, targets)
                base_times.append(time.perf_counter() - start)
        ours_times, ours_values = asyncio.run(scraper_rounds(targets, args.repeat))
    finally:
        exporters.close()
    base, ours = statistics.median(base_times[1:]), statistics.median(ours_times)
    print(f"{len(targets)} targets ({args.nodes} nodes x 2 exporters), {args.repeat} rounds each")
    print(f"{'contender':<28}{'median round (ms)':>18}{'series':>9}{'speed-up':>10}")
    print(f"{'baseline (sequential)':<28}{base * 1e3:>18.1f}{base_series:>9}{1.0:>10.2f}")
    print(f"{'Scraper.scrape_all':<28}{ours * 1e3:>18.1f}{ours_values:>9}{base / ours:>10.2f}")


if __name__ == "__main__":
    main()
