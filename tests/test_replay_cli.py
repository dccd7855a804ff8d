"""``detector`` CLI in-process: replay of a written dump (report JSON contract, scores CSV),
calibrate -> calibration file -> replay, bad input exits 2 naming the file or field,
--version, --help examples, and the built-in simulated cluster."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import numpy as np
import pytest

from detector import __version__
from detector.cli.main import COMMANDS, main
from detector.config.calibration_file import load_calibration, save_calibration
from detector.config.load import load_config
from detector.evaluation.calibration import CalibrationPoint, calibrate, calibration_from_result
from detector.ingest.dumps.read import write_openmetrics
from detector.ingest.events import write_events
from detector.loop import TickLoop
from detector.model import Sample, XidEvent
from detector.replay import describe_learned
from detector.series.index import SeriesIndex

T0 = 1_700_000_010.0  # a multiple of the 30 s step: sample times are tick times
STEP = 30.0
NODES, GPUS, TICKS = 4, 4, 240
FAIL_TICK = 220  # node2 GPU 1 heats from tick 150, then XID 79

CONTRACT_SUMMARY = {
    "failures",
    "detected",
    "detected_before_failure",
    "recall",
    "precision",
    "false_positives",
    "fp_per_day",
    "days",
    "lead_time_s",
}
CONTRACT_FAILURE = {"time", "node", "gpu", "xid", "detected", "lead_time_s"}
CONTRACT_ALERT = {"node", "gpu", "start", "end", "peak_score", "signals", "matched"}
# Additive fields, documented in evaluation.Evaluation.to_json.
ADDITIVE_TOP = {"signals_first", "diagnosis", "recovery"}
ADDITIVE_SUMMARY = {"share_before", "failures_out_of_span", "false_positives_at_other_xids"}
ADDITIVE_FAILURE = {"gpu_matched"}
ADDITIVE_ALERT = {"other_xid", "failure_class", "action", "confidence"}


def cluster_samples(code: int = 79) -> list[Sample]:
    """Node 2's GPU 1 heats from tick 150 on and reports XID ``code`` at FAIL_TICK."""
    rng = np.random.default_rng(0)
    samples = []
    for k in range(TICKS):
        t = T0 + STEP * k
        for n in range(NODES):
            for g in range(GPUS):
                labels = (("Hostname", f"node{n}"), ("gpu", str(g)))
                temp = 60 + g + rng.normal(0, 0.5)
                failing = n == 2 and g == 1
                if failing and k >= 150:
                    temp += k - 150.0
                xid = float(code) if failing and k >= FAIL_TICK else 0.0
                power = 600 + rng.normal(0, 10)
                samples.append(Sample("DCGM_FI_DEV_GPU_TEMP", labels, round(temp, 2), t))
                samples.append(Sample("DCGM_FI_DEV_POWER_USAGE", labels, round(power, 2), t))
                samples.append(Sample("DCGM_FI_DEV_XID_ERRORS", labels, xid, t))
    return samples


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A 2 h dump of 4 nodes x 4 GPUs with a planted failure, and its events file."""
    folder = tmp_path_factory.mktemp("recorded")
    dump, events = folder / "dump.om", folder / "events.jsonl"
    types = dict.fromkeys(
        ("DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_XID_ERRORS"), "gauge"
    )
    write_openmetrics(dump, cluster_samples(), types)
    write_events(events, [XidEvent(T0 + STEP * FAIL_TICK, "node2", "1", 79)])
    return dump, events


def test_replay_says_which_named_signals_the_data_fed(
    recorded: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """A dump of GPU temperature and power only: the summary counts the rules' scored signals
    it found (those two) and names the first it did not, so a user sees what an export or a
    dcgm-exporter field list leaves the detector without; and where the failures came from."""
    dump, events = recorded
    assert 0 == main(["replay", str(dump), "--events", str(events)])
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("signals: "))
    counts = re.match(r"signals: (\d+) of (\d+) named in rules/signals.yaml", line)
    assert counts is not None, line
    found, total = int(counts[1]), int(counts[2])
    assert found == 2  # gpu_temp and power_usage
    assert total > 40
    assert "; not found: " in line
    assert "gpu_temp" not in line
    assert "power_usage" not in line
    # the one failure, reported by the events file and by the dump's gauge: one episode
    assert "failures by source (first report of each episode): events-file 1" in out


def test_replay_report_json_has_the_contract_keys(
    recorded: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The report has the ARCHITECTURE.md keys (plus only the documented additive ones) and
    finds the planted failure, detected before its XID on node2."""
    dump, events = recorded
    report = tmp_path / "report.json"
    argv = ["replay", str(dump), "--events", str(events), "--report-json", str(report)]
    assert 0 == main([*argv, "--quiet"])
    doc = json.loads(report.read_text())
    assert {"summary", "failures", "alerts"} | ADDITIVE_TOP == set(doc)
    assert CONTRACT_SUMMARY | ADDITIVE_SUMMARY == set(doc["summary"])
    assert {"p25", "median", "p75"} == set(doc["summary"]["lead_time_s"])
    assert all(CONTRACT_FAILURE | ADDITIVE_FAILURE == set(row) for row in doc["failures"])
    assert all(CONTRACT_ALERT | ADDITIVE_ALERT == set(row) for row in doc["alerts"])
    # the dump's own XID and the events file describe one failure
    assert 1 == doc["summary"]["failures"]
    (failure,) = doc["failures"]
    assert (T0 + STEP * FAIL_TICK, "node2", "1", 79) == (
        failure["time"],
        failure["node"],
        failure["gpu"],
        failure["xid"],
    )
    assert failure["detected"]
    assert failure["lead_time_s"] > 0
    assert 1 == doc["summary"]["detected_before_failure"]
    assert {"node2"} == {row["node"] for row in doc["alerts"] if row["matched"]}
    out = capsys.readouterr().out
    assert "failures 1  detected 1" in out
    assert f"report written to {report}" in out


def test_replay_scores_out_writes_time_node_gpu_score_csv(
    recorded: tuple[Path, Path], tmp_path: Path
) -> None:
    """--scores-out: header time,node,gpu,score; a node row (empty gpu) and a row per GPU each
    tick; scores in [0, 1]; the failing GPU scores highest."""
    dump, _ = recorded
    scores = tmp_path / "scores.csv"
    assert 0 == main(["replay", str(dump), "--scores-out", str(scores), "--quiet"])
    with scores.open(newline="") as fh:
        rows = list(csv.reader(fh))
    assert ["time", "node", "gpu", "score"] == rows[0]
    body = rows[1:]
    assert TICKS * NODES * (1 + GPUS) == len(body)
    first_tick = [r for r in body if float(r[0]) == T0]
    assert {(f"node{n}", "") for n in range(NODES)} <= {(r[1], r[2]) for r in first_tick}
    values = np.array([float(r[3]) for r in body])
    assert np.all((values >= 0) & (values <= 1))
    gpu_rows = [r for r in body if r[2] and float(r[0]) < T0 + STEP * FAIL_TICK]
    top = max(gpu_rows, key=lambda r: float(r[3]))
    assert ("node2", "1") == (top[1], top[2])


def test_calibrate_writes_a_file_that_load_and_replay_accept(
    recorded: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """calibrate -> a valid calibration file whose threshold the pipeline then alerts at;
    replay --calibration runs with it."""
    dump, events = recorded
    out = tmp_path / "calibration.json"
    argv = ["calibrate", str(dump), "--events", str(events), "--fp-per-day", "1"]
    assert 0 == main([*argv, "--out", str(out), "--quiet"])
    calibration = load_calibration(out)
    assert 0 < calibration.threshold <= 1
    assert 1.0 == calibration.fp_budget_per_day
    assert f"calibration written to {out}" in capsys.readouterr().out
    pipeline = TickLoop.from_config(load_config(None, env={}), SeriesIndex(), calibration)
    assert calibration.threshold == pipeline.threshold
    report = tmp_path / "report.json"
    replay = ["replay", str(dump), "--calibration", str(out), "--report-json", str(report)]
    assert 0 == main([*replay, "--quiet"])
    assert 0 == json.loads(report.read_text())["summary"]["false_positives"]


def test_bad_dump_exits_2_naming_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Unparseable or missing dumps exit 2 with the file named on stderr, no traceback."""
    bad = tmp_path / "garbage.om"
    bad.write_text("this is not a metric line\n")
    assert 2 == main(["replay", str(bad), "--quiet"])
    err = capsys.readouterr().err
    assert str(bad) in err
    assert "Traceback" not in err
    missing = tmp_path / "missing.om"
    assert 2 == main(["replay", str(missing), "--quiet"])
    assert str(missing) in capsys.readouterr().err


def test_bad_events_and_calibration_files_exit_2_naming_them(
    recorded: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A bad events line names file and field; a bad calibration file names file and field."""
    dump, _ = recorded
    events = tmp_path / "events.jsonl"
    events.write_text('{"time": 1700000000, "node": "n1", "xid": "abc"}\n')
    assert 2 == main(["replay", str(dump), "--events", str(events), "--quiet"])
    err = capsys.readouterr().err
    assert str(events) in err
    assert "xid" in err
    calibration = tmp_path / "calibration.json"
    calibration.write_text('{"version": 1, "threshold": 7}\n')
    assert 2 == main(["replay", str(dump), "--calibration", str(calibration), "--quiet"])
    err = capsys.readouterr().err
    assert str(calibration) in err
    assert "threshold" in err


def test_check_config_rejects_a_bad_field_with_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """check-config names the file and the dotted field; a valid file prints 'valid'."""
    bad = tmp_path / "config.yaml"
    bad.write_text("alerts:\n  clear_ratio: 2\n")
    assert 2 == main(["check-config", str(bad)])
    err = capsys.readouterr().err
    assert str(bad) in err
    assert "alerts.clear_ratio" in err
    good = tmp_path / "good.yaml"
    good.write_text("alerts:\n  clear_ratio: 0.5\n")
    assert 0 == main(["check-config", str(good)])
    assert f"{good}: valid" in capsys.readouterr().out


def test_version_prints_the_package_version(capsys: pytest.CaptureFixture[str]) -> None:
    """--version prints 'detector <version>' and exits 0."""
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert 0 == exited.value.code
    assert f"detector {__version__}" == capsys.readouterr().out.strip()


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_subcommand_help_shows_examples(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each subcommand's --help ends with an examples: section that uses the command."""
    with pytest.raises(SystemExit) as exited:
        main([command, "--help"])
    assert 0 == exited.value.code
    help_text = capsys.readouterr().out
    assert "examples:" in help_text
    examples = help_text.split("examples:", 1)[1]
    assert f"detector {command}" in examples


def test_replay_without_dump_runs_the_simulated_cluster(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`detector replay --days 0.05 --nodes 6 --quiet` replays the built-in cluster and prints
    a summary with its failures."""
    assert 0 == main(["replay", "--days", "0.05", "--nodes", "6", "--quiet"])
    out = capsys.readouterr().out
    assert "built-in simulated cluster (6 nodes" in out
    assert "6 nodes in" in out
    assert "failures " in out
    assert "lead time" in out


def test_calibrate_tries_signal_weights_and_reports_both_passes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """On a simulated history with failures, calibrate fits signal weights, replays with them
    and prints both passes; here the weighted pass is no better, so the file carries none.
    --no-signal-weights skips the second pass and says so."""
    out = tmp_path / "calibration.json"
    sim = ["--days", "0.5", "--nodes", "8", "--seed", "5", "--fp-per-day", "2", "--quiet"]
    assert 0 == main(["calibrate", *sim, "--out", str(out)])
    printed = capsys.readouterr().out
    assert re.search(r"signal weights \d+ \(", printed)
    assert "dropped: no better than without" in printed
    assert "  without weights " in printed
    assert "  with weights " in printed
    assert load_calibration(out).signal_weights is None
    learned = load_calibration(out).diagnosis  # the failures' leading signals, per class
    assert learned is not None
    assert f"diagnosis: {describe_learned(learned)}" in printed
    assert learned.failures
    assert set(learned.failures) == set(learned.signals)
    assert 0 == main(["calibrate", *sim, "--out", str(out), "--no-signal-weights"])
    assert "signal weights: not fitted (--no-signal-weights)" in capsys.readouterr().out


def test_replay_applies_and_reports_the_calibrated_signal_weights(
    recorded: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A calibration file whose weights halve gpu_temp: the replay prints them, the HTML report
    lists them, and the planted heating GPU's alert starts later than without them (its
    temperature counts half, so it takes a hotter GPU to cross the threshold)."""
    dump, events = recorded
    base = calibrate(lambda th: CalibrationPoint(th, 1, 1, 0, 0.0), [0.5], fp_budget_per_day=1)
    starts = []
    for weights in (None, {"gpu_temp": 0.5}):
        path = tmp_path / "calibration.json"
        save_calibration(
            path,
            calibration_from_result(base, dump="d", days=1.0, failures=1, signal_weights=weights),
        )
        report, html = tmp_path / "report.json", tmp_path / "report.html"
        argv = ["replay", str(dump), "--events", str(events), "--calibration", str(path)]
        assert 0 == main([*argv, "--report-json", str(report), "--html", str(html), "--quiet"])
        printed = capsys.readouterr().out
        alerts = json.loads(report.read_text())["alerts"]
        starts.append(min(a["start"] for a in alerts if a["node"] == "node2"))
        if weights is None:
            assert "calibrated signal weights" not in printed
            assert "Signal weights: the rules' own (none calibrated)" in html.read_text()
        else:
            assert "calibrated signal weights: 1 (gpu_temp x0.50)" in printed
            assert "Signal weights: 1 (gpu_temp x0.50)" in html.read_text()
    assert starts[1] > starts[0]


def test_replay_names_false_positives_at_an_xid_that_is_not_a_failure(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The heating GPU ends in XID 43, an application fault rules/xid.yaml does not count: its
    alert stays a false positive, and the summary and report say it came at that XID."""
    dump, report, html = tmp_path / "dump.om", tmp_path / "report.json", tmp_path / "r.html"
    types = dict.fromkeys(
        ("DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_XID_ERRORS"), "gauge"
    )
    write_openmetrics(dump, cluster_samples(code=43), types)
    argv = ["replay", str(dump), "--report-json", str(report), "--html", str(html), "--quiet"]
    assert 0 == main(argv)
    out = capsys.readouterr().out
    assert "failures 0 " in out
    assert (
        "false positives at an XID rules/xid.yaml does not count as a failure: 1 (XID 43: 1)" in out
    )
    document = json.loads(report.read_text())
    assert 1 == document["summary"]["false_positives"]
    assert 1 == document["summary"]["false_positives_at_other_xids"]
    assert [("node2", 43)] == [(a["node"], a["other_xid"]) for a in document["alerts"]]
    assert "does not count as a failure: 1 (XID 43: 1); the GPU flagged" in html.read_text()
