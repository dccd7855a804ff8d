"""Reading a recorded dump: the fast path (ingest/dumps_fast.py) against the parser alone.

    python bench/dump_bench.py [--nodes 4] [--days 0.5] [--repeats 3]

Writes a simulated dump (``detector simulate``'s writer: OpenMetrics with timestamps, the
promtool backfill layout, dcgm-exporter's default fields) and a ``promtool tsdb dump``
rendering of the same samples, then reads each with ``read_dump`` (no cache: every read
parses) twice per repeat: as shipped, and with the fast path switched off (every block whole
through the format's own reader, as before dumps_fast). Prints samples/s of both, their ratio
(measured in the same run) and whether both read the same samples, bit for bit. Medians of
``--repeats`` runs of CPU time; the first read of the run (numba compiling or loading the
kernels) is not counted.
"""

from __future__ import annotations

import argparse
import gzip
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from detector.ingest.dumps.read import read_dump
from detector.series.index import SeriesIndex
from detector.sim import Scenario, write_dump

# The readers "as before" and the tsdb-dump line are the tests' own (tests/test_dumps_fast.py),
# so the bench measures against what the tests prove equal.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from test_dumps_fast import readers_as_before, tsdb_line


def read_all(path: Path) -> tuple[float, np.ndarray, np.ndarray, np.ndarray]:
    """CPU seconds to read ``path`` whole, and its times, columns and values."""
    start = time.process_time()
    batches = list(read_dump([path], SeriesIndex(), cache=False))
    spent = time.process_time() - start
    return (
        spent,
        np.concatenate([b.times for b in batches]),
        np.concatenate([b.columns for b in batches]),
        np.concatenate([b.values for b in batches]),
    )


def tsdb_rendering(openmetrics: Path, out: Path) -> None:
    """The dump's sample lines as ``promtool tsdb dump`` prints them (integer ms)."""
    with gzip.open(openmetrics, "rt") as src, out.open("w") as dst:
        for line in src:
            if not line.startswith("#"):
                key, value, stamp = line.rstrip("\n").rsplit(" ", 2)
                dst.write(tsdb_line(key, value, str(round(float(stamp) * 1000))))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--days", type=float, default=0.5)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        om, tsdb = Path(tmp) / "sim.om.gz", Path(tmp) / "sim.tsdb"
        scenario = Scenario(nodes=args.nodes, days=args.days, seed=7, failure_count=0)
        write_dump(scenario, om, Path(tmp) / "sim.jsonl")
        tsdb_rendering(om, tsdb)
        read_all(om)  # numba compiles or loads the kernels
        print(f"{args.nodes} nodes x 8 GPUs, {args.days:g} days at 30 s; medians of "
              f"{args.repeats} runs, CPU time")  # fmt: skip
        print("| format | samples | fast path samples/s | parser alone samples/s | ratio | same |")
        print("|---|---:|---:|---:|---:|---|")
        for label, path in (("OpenMetrics (.gz)", om), ("promtool tsdb dump", tsdb)):
            fast, alone = [], []
            for _ in range(args.repeats):
                spent, *got = read_all(path)
                fast.append(spent)
                with readers_as_before():
                    spent, *want = read_all(path)
                alone.append(spent)
            same = all(a.tobytes() == b.tobytes() for a, b in zip(got, want, strict=True))
            n = got[0].shape[0]
            f, a = statistics.median(fast), statistics.median(alone)
            print(f"| {label} | {n:,} | {n / f:,.0f} | {n / a:,.0f} | {a / f:.2f}x | {same} |")


if __name__ == "__main__":
    main()
