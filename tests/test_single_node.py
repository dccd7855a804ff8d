"""A single server's unnamed metrics (no rule names them, no cohort labels, no peers) are
scored against their own past: ``detector calibrate`` fits a threshold within the budget and
``detector replay`` alerts before the failure, through the CLI."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest

from detector.cli.main import main
from detector.config import load_signal_rules
from detector.config.calibration_file import load_calibration
from detector.ingest.dumps.writer import write_openmetrics
from detector.ingest.events import write_events
from detector.ingest.parse import iter_samples, parse_exposition
from detector.model import Sample, XidEvent

T0 = 1_700_000_000.0
STEP = 15.0  # the default scrape interval: the own-past preset counts observations of it
TICKS = 960  # 4 h
FAIL_TICK = 900
CHANGE_TICK = FAIL_TICK - 80  # 20 min before the failure three gauges triple
NODE = "server1"


def unnamed_series(real_data: Path) -> tuple[list[Sample], dict[str, str]]:
    """Every 45th node-level series of node_exporter's real e2e payload that no rule names
    (61 of 2,730: counters, gauges, untyped), and the declared types."""
    page = (real_data / "exporters" / "node_exporter" / "e2e-output.txt").read_text()
    exp = parse_exposition(page, "e2e-output.txt")
    rules = load_signal_rules()
    unnamed = [s for s in iter_samples(exp) if rules.classify(s.name) == "default"]
    types = {}
    for name in {s.name for s in unnamed}:
        declared = exp.types.get(name) or exp.types.get(name.removesuffix("_total"))
        if declared:
            types[name] = declared
    return unnamed[::45], types


def one_node_samples(series: list[Sample], types: dict[str, str]) -> tuple[list[Sample], list[str]]:
    """The payload replayed every STEP seconds as ``instance="server1:9100"``: gauges with 2 %
    noise, counters rising at a noisy rate; three gauges triple from CHANGE_TICK on."""
    rng = np.random.default_rng(0)
    counter = [types.get(s.name) == "counter" for s in series]
    planted = [i for i, s in enumerate(series) if types.get(s.name) == "gauge" and s.value][:3]
    totals = np.array([s.value for s in series])
    samples = []
    for k in range(TICKS):
        t = T0 + STEP * k
        for i, s in enumerate(series):
            labels = (*s.labels, ("instance", f"{NODE}:9100"))
            if counter[i]:
                totals[i] += max(abs(s.value) / 86400.0, 1.0) * STEP * (1 + 0.1 * rng.normal())
                value = float(totals[i])
            else:
                level = 3.0 * s.value if i in planted and k >= CHANGE_TICK else s.value
                value = level * (1 + 0.02 * rng.normal())
            samples.append(Sample(s.name, labels, value, t))
    return samples, [series[i].name for i in planted]


@pytest.fixture(scope="module")
def one_node_dump(
    real_data: Path, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, Path, list[str]]:
    """The dump (written by the project's writer), its events file (one failure on server1)
    and the names of the planted gauges."""
    folder = tmp_path_factory.mktemp("one-node")
    dump, events = folder / "server1.om", folder / "events.jsonl"
    series, types = unnamed_series(real_data)
    samples, planted = one_node_samples(series, types)
    write_openmetrics(dump, samples, {s.name: types[s.name] for s in series if s.name in types})
    write_events(events, [XidEvent(T0 + STEP * FAIL_TICK, NODE, None, 79)])
    return dump, events, planted


def test_calibrate_fits_a_threshold_within_the_budget_on_one_node(
    one_node_dump: tuple[Path, Path, list[str]], tmp_path: Path
) -> None:
    """Scores exist (no 'nothing to calibrate'); the threshold catches the failure before
    its XID with false positives within the budget of 1 a day."""
    dump, events, _ = one_node_dump
    out = tmp_path / "calibration.json"
    argv = ["calibrate", str(dump), "--events", str(events), "--fp-per-day", "1"]
    assert 0 == main([*argv, "--no-signal-weights", "--out", str(out), "--quiet"])
    calibration = load_calibration(out)
    assert 0 < calibration.threshold <= 1
    assert calibration.achieved.fp_per_day <= calibration.fp_budget_per_day
    assert (1, 1) == (calibration.achieved.detected, calibration.achieved.detected_before)


def test_replay_alerts_before_the_failure_on_its_own_past(
    one_node_dump: tuple[Path, Path, list[str]], tmp_path: Path
) -> None:
    """At the uncalibrated default threshold: one alert on server1, before the XID, led by
    the planted gauges; scores are written for the node."""
    dump, events, planted = one_node_dump
    report, scores = tmp_path / "report.json", tmp_path / "scores.csv"
    argv = ["replay", str(dump), "--events", str(events), "--report-json", str(report)]
    assert 0 == main([*argv, "--scores-out", str(scores), "--quiet"])
    doc = json.loads(report.read_text())
    assert (1, 1, 0) == (
        doc["summary"]["detected"],
        doc["summary"]["detected_before_failure"],
        doc["summary"]["false_positives"],
    )
    # the precursor's alert, then the alert the events file's XID forces (it joins the tick
    # loop at its time, as the kernel log's would in `detector run`)
    alert, forced = doc["alerts"]
    assert ["xid_79"] == forced["signals"]
    with scores.open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    # one node, named by its instance (the fixture's DRBD series' node="remote" is the
    # replication peer, not a host)
    [node] = {r["node"] for r in rows}
    assert NODE == node == alert["node"] == forced["node"]
    assert T0 + STEP * CHANGE_TICK <= alert["start"] < T0 + STEP * FAIL_TICK
    assert set(alert["signals"]) & set(planted)
    assert TICKS == len(rows)
    assert max(float(r["score"]) for r in rows) > 0.6
