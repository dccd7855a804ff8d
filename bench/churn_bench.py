"""Series churn: series that come and go for as long as the daemon runs.

    python bench/churn_bench.py [--hours 24] [--pods-per-hour 60] [--pod-minutes 30]
                                [--run-hours 4]

Two ways a node keeps bringing series the detector has never seen:

- containers: every container brings a virtual network device (a veth pair) that
  node-exporter reports with its own series until the container is gone. Without a filter
  each one takes a column of the series index for the life of the process, with its signal
  columns and scorer state: memory and the tick's CPU grow for as long as the daemon runs.
  ``labels.drop`` (config; its defaults name the container devices and mounts) keeps them out.
  A container starts every ``3600 / pods-per-hour`` s and lives ``pod-minutes``; each device's
  27 lines are copied from the page's ``eth0``, renamed ``veth<n>``. Variants: the default
  config, and ``labels.drop: {}`` (the index before the filter existed).
- relabels: the scheduler writes the node's job into its target labels (``training_job``,
  the cohort label, ``labels.cohort_labels``), a new run id every ``run-hours``, so every
  series of the page comes back under a new identity. The index gives each the column of the
  series it relabels (series.py, ``SeriesIndex._known``): no new series, signal column
  or scorer state. Variant: the default config with the cohort label.

What runs: node-exporter's real end-to-end page (tests/data/exporters/node_exporter/
e2e-output.txt, 5,483 lines) plus the churn above. Each 15 s tick does what the daemon does
after the HTTP fetch: ``parse_exposition``, ``SeriesIndex.columns`` (the target's labels
added), the frame, ``Pipeline.step`` (the production pipeline of the config). Each variant runs
in a fresh process. Printed per variant: series in the index and signal columns at the end,
CPU ms per tick (median over the first and the last 10% of ticks, and the mean over the last
10%: a tick that adds series also rebuilds per-series arrays, which the median leaves out),
and the process's resident memory after the first tick and at the end (after a full garbage
collection).
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np
from fresh_process import in_fresh_process, resident_mb

PAGE = Path(__file__).resolve().parents[1] / "tests/data/exporters/node_exporter/e2e-output.txt"
STEP_S = 15.0
TARGET = (("instance", "10.0.0.1:9100"), ("job", "node"))


def run_variant(variant: str, ticks: int, every: int, life: int, run_ticks: int) -> dict[str, Any]:
    """One variant's run (in a fresh process: ``main``); its figures."""
    from detector.config.load import Config
    from detector.ingest.parse import parse_exposition, split_series
    from detector.model import Frame
    from detector.pipeline.build import build_pipeline
    from detector.series.index import SeriesIndex
    from detector.series.labels import LabelRules

    page = PAGE.read_text()
    eth0 = [ln for ln in page.splitlines() if 'device="eth0"' in ln and not ln.startswith("#")]
    labels = {
        "no filter": {"drop": {}},
        "filter": {},
        "relabel": {"cohort_labels": ["training_job"]},
    }[variant]
    config = Config.model_validate({"labels": labels})
    index = SeriesIndex(LabelRules.from_config(config.labels))
    pipeline = build_pipeline(config, index)
    cpu: list[float] = []
    rss_first = 0.0
    for k in range(ticks):
        if variant == "relabel":
            body = page.encode()
            target: tuple[tuple[str, str], ...] = (
                *TARGET,
                ("training_job", f"run-{k // run_ticks}"),
            )
        else:
            live = range(max(0, (k - life) // every + 1), k // every + 1)
            devices = "\n".join(
                ln.replace('device="eth0"', f'device="veth{pod:07x}"')
                for pod in live
                for ln in eth0
            )
            body = (page + devices + "\n").encode()
            target = TARGET
        began = time.process_time()
        exp = parse_exposition(body, source="bench")
        cols = index.columns(exp.keys, split_series, target)
        frame = np.full(len(index), np.nan)
        kept = cols >= 0
        frame[cols[kept]] = np.asarray(exp.values, dtype=np.float64)[kept]
        pipeline.step(Frame(1.7e9 + STEP_S * k, frame))
        cpu.append(time.process_time() - began)
        if k == 0:
            rss_first = resident_mb()
    tenth = max(1, ticks // 10)
    return {
        "series": len(index),
        "signals": len(pipeline.signal_map),
        "dropped": index.dropped,
        "first_ms": statistics.median(cpu[1 : tenth + 1]) * 1e3,
        "last_ms": statistics.median(cpu[-tenth:]) * 1e3,
        "last_mean_ms": statistics.fmean(cpu[-tenth:]) * 1e3,
        "rss_first": rss_first,
        "rss_end": resident_mb(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hours", type=float, default=24.0)
    parser.add_argument("--pods-per-hour", type=float, default=60.0)
    parser.add_argument("--pod-minutes", type=float, default=30.0)
    parser.add_argument("--run-hours", type=float, default=4.0)
    args = parser.parse_args()
    ticks = int(args.hours * 3600 / STEP_S)
    every = max(1, round(3600 / args.pods_per_hour / STEP_S))
    life = max(1, round(args.pod_minutes * 60 / STEP_S))
    run_ticks = max(1, round(args.run_hours * 3600 / STEP_S))
    print(
        f"{args.hours:g} h of 15 s ticks ({ticks}); containers: one every {every * STEP_S:g} s "
        f"living {life * STEP_S / 60:g} min ({life // every + 1} at a time, 27 series each); "
        f"relabels: a new run id every {run_ticks * STEP_S / 3600:g} h"
    )
    names = {
        "no filter": "containers, labels.drop: {}",
        "filter": "containers, default labels.drop",
        "relabel": "relabels, cohort label",
    }
    rows = {}
    for variant in names:
        rows[variant] = in_fresh_process(run_variant, variant, ticks, every, life, run_ticks)
    print(
        f"{'variant':<34}{'series':>9}{'signals':>9}{'dropped':>9}{'ms/tick first':>15}"
        f"{'last':>7}{'last mean':>11}{'RSS MB first':>14}{'RSS MB end':>12}"
    )
    for variant, r in rows.items():
        print(
            f"{names[variant]:<34}{r['series']:>9,}{r['signals']:>9,}{r['dropped']:>9,}"
            f"{r['first_ms']:>15.2f}{r['last_ms']:>7.2f}{r['last_mean_ms']:>11.2f}"
            f"{r['rss_first']:>14.1f}{r['rss_end']:>12.1f}"
        )
    base, new = rows["no filter"], rows["filter"]
    grown = base["series"] - new["series"]
    more_mb = base["rss_end"] - new["rss_end"]
    ratio = base["last_mean_ms"] / new["last_mean_ms"]
    print(
        f"containers without the filter: {grown:,} series more, +{more_mb:.1f} MB, "
        f"{ratio:.2f}x the filtered run's mean CPU a tick over the last 10% of ticks"
    )


if __name__ == "__main__":
    main()
