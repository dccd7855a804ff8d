"""Exposition parser speed against prometheus_client, on the real node_exporter payload.

    python bench/parse_bench.py [--repeat N] [--file PATH] [--parse-only]

Each repeat times every contender once, in turn (so machine noise hits all of them alike),
and the table shows medians: lines/s and the speed-up over prometheus_client measured in the
same run. Times are CPU time of this process (``time.process_time``), so other load on a shared
machine does not count as parse time. Contenders:

- prometheus_client: ``text_string_to_metric_families``, every family and sample consumed.
- parse_exposition: our columnar parse (raw keys; labels not split), what a scrape tick does.
- + iter_samples, cold: parse plus every key split into name and labels with an empty
  ``split_series`` cache, i.e. the first scrape of a new target (full parity with the
  reference's output).
- + iter_samples, warm: the same with the cache filled, i.e. every later scrape.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from detector.ingest.parse import iter_samples, parse_exposition, split_series

DEFAULT_FILE = (
    Path(__file__).resolve().parent.parent / "tests/data/exporters/node_exporter/e2e-output.txt"
)


def _reference(text: str) -> int:
    return sum(len(family.samples) for family in text_string_to_metric_families(text))


def _ours(text: str) -> int:
    return len(parse_exposition(text, "bench").keys)


def _ours_full_cold(text: str) -> int:
    split_series.cache_clear()
    return sum(1 for _ in iter_samples(parse_exposition(text, "bench")))


def _ours_full_warm(text: str) -> int:
    return sum(1 for _ in iter_samples(parse_exposition(text, "bench")))


def _time(fn: Callable[[str], int], text: str) -> float:
    # CPU time of this process: the machine is shared, and time spent descheduled is not the
    # parser's; both contenders are measured the same way.
    start = time.process_time()
    fn(text)
    return time.process_time() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15, help="timed rounds (default 15)")
    parser.add_argument("--file", type=Path, default=DEFAULT_FILE, help="exposition text")
    parser.add_argument(
        "--parse-only",
        action="store_true",
        help="time only prometheus_client and parse_exposition (no label-splitting rounds)",
    )
    args = parser.parse_args()
    text = args.file.read_text()
    lines = text.count("\n")
    contenders: dict[str, Callable[[str], int]] = {
        "prometheus_client": _reference,
        "parse_exposition": _ours,
        "+ iter_samples, cold cache": _ours_full_cold,
        "+ iter_samples, warm cache": _ours_full_warm,
    }
    if args.parse_only:
        contenders = dict(list(contenders.items())[:2])
    samples = {name: fn(text) for name, fn in contenders.items()}  # warm-up, and a check
    if len(set(samples.values())) != 1:
        raise SystemExit(f"contenders disagree on the sample count: {samples}")
    times: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(args.repeat):
        for name, fn in contenders.items():
            times[name].append(_time(fn, text))
    medians = {name: statistics.median(values) for name, values in times.items()}
    base = medians["prometheus_client"]
    print(f"{args.file.name}: {lines} lines, {samples['parse_exposition']} samples, ", end="")
    print(f"median CPU time of {args.repeat} rounds")
    print(f"| {'parser':<28} | {'median ms':>9} | {'lines/s':>11} | {'vs prometheus_client':>20} |")
    print(f"|{'-' * 30}|{'-' * 11}|{'-' * 13}|{'-' * 22}|")
    for name, median in medians.items():
        ratio = f"{base / median:.1f}x"
        print(f"| {name:<28} | {median * 1e3:>9.2f} | {lines / median:>11,.0f} | {ratio:>20} |")


if __name__ == "__main__":
    main()
