"""Reliability figures: chaos, kill -9 restarts, outages and bad inputs, in one table.

    python bench/chaos_bench.py [--ticks 18] [--kills 5] [--seed 20261129] [--no-outage]

What runs (the same code as the tests: tests/chaos/ and tests/test_{chaos,outages}.py):

1. chaos: the live daemon (in-process) over 63 simulated dcgm-exporter targets (a simulator
   process, 4 GPUs a node, 30x clock: one 30 s step per 1 s tick) of which 13 misbehave (hung,
   slow, garbage, oversized, HTTP 500, flapping, counter resets); then the baseline: the same
   run with the 13 bad targets left out. Tick time is the daemon's own (scrape included:
   hung targets hold every round until the scrape timeout, 0.7 s), medians of both runs and
   their ratio; ticks on time = ticks that finished within the 1 s interval.
2. restarts: the daemon's entry point in a subprocess, SIGKILLed at seeded random moments
   around two planted XID 119 failures (tests/chaos/crash.py); alerts counted at a fake
   Alertmanager: sent = distinct alerts, lost = planted failures that never arrived firing
   or never resolved, duplicated = alerts with more than one startsAt.
3. outage (root only: a tmpfs): Alertmanager down 10 simulated minutes, a dead target and one
   that returns, a full disk for state saves (tests/test_outages.py's timeline).
4. corrupt state files: truncated, random bytes, empty, other format, other pipeline version:
   the daemon must start clean and serve.

Prints one Markdown table; docs/reliability.md quotes it with this command.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent / "tests"
sys.path.insert(0, str(TESTS))

from chaos.alertmanager import FakeAlertmanager  # noqa: E402
from chaos.crash import crash_cluster, crash_daemon, kill_loop, ready, wait_for  # noqa: E402
from test_chaos import run_chaos  # noqa: E402
from test_crash_restart import CORRUPTIONS  # noqa: E402

from detector.logs import configure_logging  # noqa: E402
from detector.service.state import load_state, save_state  # noqa: E402


def chaos_rows(tmp: Path, ticks: int) -> list[tuple[str, str]]:
    (tmp / "bad").mkdir()
    (tmp / "base").mkdir()
    bad = asyncio.run(run_chaos(tmp / "bad", ticks=ticks))
    base = asyncio.run(run_chaos(tmp / "base", ticks=ticks, with_bad=False))
    interval = bad.config.scrape.interval_s
    on_time = sum(d <= interval for d in bad.durations)
    kinds = Counter(bad.plan.values())
    threshold = bad.config.alerts.resolve_threshold(None)
    false_alerts = [s for s in bad.started if s[0] in bad.healthy]
    false_alerts += [a for a in bad.received if a.labels.get("node") in bad.healthy]
    over = sum(1 for tick in bad.scores[6:] for n in bad.healthy if tick.get(n, 0.0) >= threshold)
    gpu_alerts = [s for s in bad.started if s[0] in bad.plan and s[1] is not None]
    med_bad, med_base = statistics.median(bad.durations), statistics.median(base.durations)
    scrapes = ticks * len(bad.plan)
    return [
        ("targets (healthy + misbehaving)", f"{len(bad.healthy)} + {len(bad.plan)}"),
        ("misbehaving targets by kind", ", ".join(f"{k} {n}" for k, n in sorted(kinds.items()))),
        ("ticks run / on time (within the interval)", f"{len(bad.durations)} / {on_time}"),
        (
            "median tick, chaos / baseline without the bad targets",
            f"{med_bad:.3f} s / {med_base:.3f} s = {med_bad / med_base:.2f}x",
        ),
        ("healthy-node false alerts", str(len(false_alerts))),
        ("healthy-node scores at or above the threshold", f"{over} (threshold {threshold})"),
        ("GPU alerts naming a misbehaving node", str(len(gpu_alerts))),
        ("bad scrape responses served", str(scrapes)),
    ]


def restart_rows(tmp: Path, kills: int, seed: int) -> list[tuple[str, str]]:
    run = kill_loop(tmp, seed=seed, kills=max(kills, 4))
    sent = sum(len(e) for e in run.starts)
    lost = sum(not (f and r) for f, r in zip(run.fired, run.resolved, strict=True))
    duplicated = sum(1 for e in run.starts for starts in e.values() if len(starts) > 1)
    phases = Counter(run.phases)
    return [
        ("kill -9 restarts (kills before / during / after the alerts)",
         f"{len(run.phases)} ({phases['before']} / {phases['firing']} / {phases['resolved']})"),
        ("restarts that restored the state file", f"{run.restored} / {len(run.phases)}"),
        ("alerts sent / lost / duplicated across the restarts", f"{sent} / {lost} / {duplicated}"),
        ("re-warms (z-score observation count dropped)",
         str(sum(b <= a for a, b in zip(run.observations, run.observations[1:], strict=False)))),
    ]  # fmt: skip


def outage_rows(tmp: Path) -> list[tuple[str, str]]:
    from test_outages import AM_DOWN, AM_UP, run_outage

    run = asyncio.run(run_outage(tmp, tmp / "daemon.log"))
    assert run.am is not None
    arrived = {n for n, _ in run.started if run.am.alerts(node=n)}
    resolved = {n for n, _ in run.ended if run.am.resolved(node=n)}
    saves = run.saves[-1]
    return [
        ("Alertmanager outage survived (simulated minutes)", f"{(AM_UP - AM_DOWN) / 60:.0f}"),
        ("alerts raised during it that arrived after / resolved",
         f"{len(arrived)} of {len(run.started)} / {len(resolved)} of {len(run.ended)}"),
        ("ticks during the outage run / overruns", f"{run.ticks} / {run.overruns}"),
        ("state saves failed on a full disk / then saved", f"{saves[2]} / {saves[1]}"),
    ]  # fmt: skip


def corrupt_rows(tmp: Path) -> list[tuple[str, str]]:
    started_clean = 0
    with crash_cluster() as cluster, FakeAlertmanager() as am:
        for name, (damage, _) in sorted(CORRUPTIONS.items()):
            where = tmp / name
            where.mkdir()
            state = where / "state.npz"
            save_state(state, {"x": [1.0]}, {"pipeline": {}})
            damage(state)
            proc = crash_daemon(where, cluster, am.url)
            proc.start()
            try:
                wait_for(lambda proc=proc: ready(proc), 30, f"{name}: /readyz")
                wait_for(lambda s=state: load_state(s) is not None, 10, f"{name}: a new state")
                started_clean += proc.stop() == 0
            finally:
                proc.kill9()
    return [("corrupt state files tried / started clean", f"{len(CORRUPTIONS)} / {started_clean}")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ticks", type=int, default=18, help="ticks of each chaos run")
    parser.add_argument(
        "--kills",
        type=int,
        default=5,
        help="kill -9 restarts (at least 4: before, in each alert, after)",
    )
    parser.add_argument("--seed", type=int, default=20261129, help="seed of the kill times")
    parser.add_argument("--no-outage", action="store_true", help="skip the outage run")
    args = parser.parse_args()
    configure_logging("error", "console")
    began = time.monotonic()
    rows: list[tuple[str, str]] = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for name in ("chaos", "restarts", "outage", "corrupt"):
            (root / name).mkdir()
        rows += chaos_rows(root / "chaos", args.ticks)
        rows += restart_rows(root / "restarts", args.kills, args.seed)
        if not args.no_outage and os.geteuid() == 0:
            rows += outage_rows(root / "outage")
            configure_logging("error", "console")  # the outage run restores the defaults
        rows += corrupt_rows(root / "corrupt")
    width = max(len(r[0]) for r in rows)
    print(f"| {'figure':<{width}} | value |")
    print(f"|{'-' * (width + 2)}|-------|")
    for label, value in rows:
        print(f"| {label:<{width}} | {value} |")
    took, load = time.monotonic() - began, os.getloadavg()[0]
    print(f"\n(whole bench {took:.0f} s; load average {load:.1f})")


if __name__ == "__main__":
    main()
