"""A new operator's first hour with ``detector``: the rough edges found by following the README
and feeding the CLI broken inputs, each pinned so it stays fixed (bad input exits 2 with a
message naming what is wrong; flags that would be ignored are refused; help says the defaults)."""

from __future__ import annotations

import gzip
import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from detector.cli.main import main
from detector.config.load import load_config
from detector.ingest.dumps.read import write_openmetrics
from detector.model import Sample

T0 = 1_735_689_600.0  # the built-in cluster's start, 2025-01-01T00:00:00Z
SHORT = ["--days", "0.01", "--nodes", "2", "--quiet"]  # the built-in cluster, 14 minutes


def tiny_dump(path: Path, ticks: int) -> Path:
    """An OpenMetrics dump of one node's `up` series sampled every 30 s."""
    samples = [Sample("up", (("instance", "n1"),), 1.0, T0 + 30 * k) for k in range(ticks)]
    write_openmetrics(path, samples, {"up": "gauge"})
    return path


def error_of(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert "internal error" not in err
    return err


# -- environment ------------------------------------------------------------------------------


def test_detector_debug_is_not_taken_for_a_config_override(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """DETECTOR_DEBUG=1 is not a config key; a misspelt DETECTOR_* variable still fails."""
    config = tmp_path / "config.yaml"
    config.write_text("")
    monkeypatch.setenv("DETECTOR_DEBUG", "1")
    monkeypatch.setenv("DETECTOR_FAULT_TRACE", str(tmp_path / "trace.csv"))
    assert 0 == main(["check-config", str(config)])
    assert "environment overrides" not in capsys.readouterr().out
    monkeypatch.setenv("DETECTOR_DEBUGG", "1")
    assert 2 == main(["check-config", str(config)])
    assert "DETECTOR_DEBUGG: debugg: unknown key" in error_of(capsys)


@pytest.mark.parametrize(
    ("yaml_text", "expected"),
    [
        (
            "targets:\n  static:\n    - http://gpu-1:9400/metrics\n",
            "targets.static[0]: must be a mapping of keys (a section), not a single value "
            "(got 'http://gpu-1:9400/metrics'); write the item as 'url: http://gpu-1:9400/metrics'",
        ),
        (
            "alerts:\n  alertmanager_urls: http://am:9093\n",
            "alerts.alertmanager_urls: must be a list (got 'http://am:9093'); write "
            "[http://am:9093], or one '- ' line per item",
        ),
        (
            "scrape: [1, 2]\n",
            "scrape: must be a mapping of keys (a section), not a list (got [1, 2])",
        ),
    ],
    ids=["bare-target-string", "string-for-a-list", "list-for-a-section"],
)
def test_a_config_shape_mistake_says_how_to_write_it(
    yaml_text: str, expected: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Common YAML shape slips name the field, the kind found and how to write it."""
    config = tmp_path / "config.yaml"
    config.write_text(yaml_text)
    assert 2 == main(["check-config", str(config)])
    assert f"detector: error: {config}: {expected}\n" == error_of(capsys)


@pytest.mark.parametrize(
    ("key", "name", "content", "expected"),
    [
        ("calibration:\n  path", "calibration.json", '{"version": 1}', "invalid calibration"),
        ("rules:\n  signals", "signals.yaml", "signals:\n  - name: x\n", "signals[0]"),
    ],
    ids=["calibration", "signal-rules"],
)
def test_check_config_validates_the_files_the_config_names(
    key: str,
    name: str,
    content: str,
    expected: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """check-config exits 2 on an invalid calibration or rules file the config names."""
    (tmp_path / name).write_text(content)
    config = tmp_path / "config.yaml"
    config.write_text(f"{key}: {name}\n")
    assert 2 == main(["check-config", str(config)])
    err = error_of(capsys)
    assert f"{tmp_path / name}" in err
    assert expected in err
    (tmp_path / name).unlink()  # absent: a warning, as before (it may appear later)
    assert 0 == main(["check-config", str(config)])
    assert f"warning: {tmp_path / name} does not exist" in capsys.readouterr().out


# -- dumps with nothing to replay -------------------------------------------------------------


def test_an_empty_dump_file_says_it_is_empty(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A zero-byte dump names the file and says it is empty (not "it starts with ''")."""
    dump = tmp_path / "empty.om"
    dump.write_bytes(b"")
    assert 2 == main(["replay", str(dump), "--quiet"])
    assert f"{dump}: the file is empty" in error_of(capsys)


@pytest.mark.parametrize(
    ("name", "content"),
    [
        ("eof.om", "# EOF\n"),
        ("vector.json", '{"status":"success","data":{"resultType":"matrix","result":[]}}'),
    ],
)
def test_a_dump_without_samples_exits_2_not_as_a_bug(
    name: str, content: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A well-formed dump with no sample exits 2 naming the file (it was exit 1, a 'bug')."""
    dump = tmp_path / name
    dump.write_text(content)
    assert 2 == main(["replay", str(dump), "--quiet"])
    assert f"{dump}: no samples" in error_of(capsys)


def test_a_single_tick_dump_exits_2_naming_file_and_time(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """One tick spans no time to evaluate: exit 2, naming the file and the tick's UTC time."""
    dump = tiny_dump(tmp_path / "one.om", ticks=1)
    assert 2 == main(["replay", str(dump), "--quiet"])
    assert f"{dump}: one tick of data (at 2025-01-01 00:00:00 UTC)" in error_of(capsys)


def test_a_built_in_cluster_too_short_for_two_ticks_exits_2(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """--days shorter than one sample interval is bad input, not a bug."""
    assert 2 == main(["replay", "--days", "0.0003", "--nodes", "2", "--quiet"])
    assert "built-in simulated cluster" in error_of(capsys)


def test_a_saved_metrics_page_says_what_writes_a_replayable_dump(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A saved /metrics page (no timestamps) names the line and points to detector record."""
    dump = tmp_path / "page.prom"
    dump.write_text('# TYPE up gauge\nup{instance="a"} 1\nup{instance="b"} 1\n')
    assert 2 == main(["replay", str(dump), "--quiet"])
    err = error_of(capsys)
    assert f"{dump}:2: sample without timestamp (a dump needs one on every sample;" in err
    assert "`detector record`" in err


def test_a_pipe_given_as_a_dump_is_not_called_missing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A named pipe given as a dump is 'not a regular file', not 'no such dump file'."""
    fifo = tmp_path / "dump.fifo"
    os.mkfifo(fifo)
    assert 2 == main(["replay", str(fifo), "--quiet"])
    assert f"{fifo}: not a regular file; save the dump to a file first" in error_of(capsys)


def test_a_query_error_without_an_error_type_does_not_print_none(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A Prometheus API error document lacking errorType shows its error, not 'None: ...'."""
    dump = tmp_path / "failed.json"
    dump.write_text('{"status": "error", "error": "query timed out"}')
    assert 2 == main(["replay", str(dump), "--quiet"])
    err = error_of(capsys)
    assert "the query failed: query timed out" in err
    assert "None" not in err


# -- flags the chosen source would ignore -----------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "flag", "message"),
    [
        (["replay", "--seed", "-1"], "--seed", "must be >= 0"),
        (["simulate", "--seed", "-4"], "--seed", "must be >= 0"),
        (["replay", "--step", "0"], "--step", "must be a number > 0"),
        (["replay", "--days", "nan"], "--days", "must be a number > 0"),
        (["simulate", "--gpus", "0"], "--gpus", "must be >= 1"),
        (["calibrate", "--calibration", "c.json", "--fp-per-day", "1", "--out", "o.json"], "", ""),
    ],
)
def test_bad_numeric_flags_are_refused_by_the_parser(
    argv: list[str], flag: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Out-of-range numeric flags, and calibrate --calibration, are argument errors (exit 2)."""
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert 2 == exited.value.code
    err = capsys.readouterr().err
    expected = f"argument {flag}: {message}" if flag else "unrecognized arguments: --calibration"
    assert expected in err


def test_an_infinite_fp_budget_exits_2_not_as_a_bug(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--fp-per-day inf passed the CLI's '>= 0' check and failed deep in calibrate (exit 1)."""
    out = tmp_path / "calibration.json"
    assert 2 == main(["calibrate", *SHORT, "--fp-per-day", "inf", "--out", str(out)])
    assert "--fp-per-day must be a finite number >= 0 (got inf)" in error_of(capsys)
    assert not out.exists()


def test_built_in_cluster_flags_with_a_dump_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--days/--nodes/--seed with a DUMP were silently ignored; now they are refused, named."""
    dump = tiny_dump(tmp_path / "d.om", ticks=3)
    assert 2 == main(["replay", str(dump), "--days", "0.1", "--nodes", "3", "--quiet"])
    assert "--days and --nodes apply to the built-in simulated cluster only" in error_of(capsys)


def test_step_without_a_dump_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    """--step only sets a dump replay's tick; with the built-in cluster it was ignored."""
    assert 2 == main(["replay", "--step", "60", *SHORT])
    assert "--step sets the tick length of a DUMP replay" in error_of(capsys)


# -- outputs ----------------------------------------------------------------------------------


def test_an_output_in_a_missing_directory_fails_before_any_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An output in a missing directory fails first, naming the path given; nothing is written."""
    out, events = tmp_path / "nodir" / "sim.om", tmp_path / "sim.jsonl"
    args = ["simulate", "--nodes", "2", "--days", "0.01", "--out", str(out)]
    assert 2 == main([*args, "--events", str(events)])
    err = error_of(capsys)
    assert f"{out}: No such file or directory" in err
    assert f"the directory {out.parent} does not exist" in err
    assert ".tmp-" not in err
    assert not events.exists()


@pytest.mark.parametrize("option", ["--report-json", "--scores-out", "--html"])
def test_an_output_that_is_a_directory_exits_2(
    option: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A replay output naming a directory is refused before the replay, naming it."""
    assert 2 == main(["replay", *SHORT, option, str(tmp_path)])
    assert f"{tmp_path}: is a directory" in error_of(capsys)


def test_unmatchable_failures_are_warned_and_scores_out_is_announced(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Failures on unknown nodes or outside the span are warned; --scores-out is announced."""
    events = tmp_path / "xids.jsonl"
    rows = [
        {"time": T0 + 360, "node": "gpu-node-01", "xid": 79},  # in span, unknown node
        {"time": T0 + 360, "node": "node-02", "xid": 79},  # in span, known node: no warning
        {"time": T0 + 86400, "node": "node-02", "xid": 79},  # a day after the replay
    ]
    events.write_text("".join(json.dumps(r) + "\n" for r in rows))
    scores = tmp_path / "scores.csv"
    assert 0 == main(["replay", *SHORT, "--events", str(events), "--scores-out", str(scores)])
    captured = capsys.readouterr()
    assert f"scores written to {scores}" in captured.out
    assert (
        "detector: warning: 1 node(s) with failures are not in the data: gpu-node-01 "
        "(its nodes are named like node-01); their failures count as missed"
    ) in captured.err
    assert "1 failure(s) fall outside the replayed span (2025-01-01 00:00 to" in captured.err


def test_a_replay_whose_failures_all_match_the_data_warns_nothing(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The built-in cluster's own failures are on its nodes and in its span: no warning."""
    assert 0 == main(["replay", *SHORT])
    assert "" == capsys.readouterr().err


# -- events and calibration files -------------------------------------------------------------


@pytest.mark.parametrize("name", ["xids.jsonl", "xids.jsonl.gz"])
def test_an_events_file_with_a_byte_order_mark_is_read(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A UTF-8 BOM (Windows editors) no longer fails line 1 with 'Unexpected UTF-8 BOM',
    plain or gzipped."""
    events = tmp_path / name
    line = b'\xef\xbb\xbf{"time": 1735690000, "node": "node-01", "xid": 79}\n'
    events.write_bytes(gzip.compress(line) if name.endswith(".gz") else line)
    assert 0 == main(["replay", *SHORT, "--events", str(events)])
    assert "2025-01-01 00:06     node-01" in capsys.readouterr().out


def test_an_events_line_that_is_not_an_object_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A JSON list on line 2 names file and line without a made-up field '<line>'."""
    events = tmp_path / "xids.jsonl"
    events.write_text('{"time": 1735690000, "node": "node-01", "xid": 79}\n[1, 2]\n')
    assert 2 == main(["replay", *SHORT, "--events", str(events)])
    err = error_of(capsys)
    assert f"{events}:2: expected one JSON object per line, got a JSON list" in err
    assert "<line>" not in err


@pytest.mark.parametrize(
    ("option", "what"), [("--events", "events file"), ("--calibration", "calibration file")]
)
def test_a_missing_input_file_is_named_once(
    option: str, what: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A missing events or calibration file is named once, without '[Errno 2] ...' noise."""
    missing = tmp_path / "missing.jsonl"
    assert 2 == main(["replay", *SHORT, option, str(missing)])
    err = error_of(capsys)
    assert f"{missing}: cannot read {what}: No such file or directory\n" in err
    assert "Errno" not in err


def test_a_binary_file_given_as_calibration_says_it_is_not_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A dump passed as --calibration by mistake: not a codec error with byte offsets."""
    wrong = tmp_path / "sim.om.gz"
    with gzip.open(wrong, "wt") as fh:
        fh.write("up 1 1735689600\n")
    assert 2 == main(["replay", *SHORT, "--calibration", str(wrong)])
    err = error_of(capsys)
    assert f"{wrong}: not a calibration file (not UTF-8 text;" in err
    assert "codec" not in err


# -- record and help --------------------------------------------------------------------------


def test_record_without_targets_exits_2_saying_what_to_set(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """record with a config naming no target used to run and write nothing, exit 0."""
    config = tmp_path / "config.yaml"
    config.write_text("scrape:\n  interval_s: 15\n")
    out = tmp_path / "dumps"
    assert 2 == main(["record", "--config", str(config), "--out", str(out), "--duration", "1"])
    err = error_of(capsys)
    assert f"record: nothing to record: {config} names no targets" in err
    assert "targets.static" in err
    assert not out.exists()


def test_record_into_a_file_or_for_a_negative_duration_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--out naming a file said only 'File exists'; --duration -5 recorded one scrape."""
    config = tmp_path / "config.yaml"
    config.write_text("targets:\n  static:\n    - url: http://127.0.0.1:1/metrics\n")
    a_file = tmp_path / "dumps.om"
    a_file.write_text("")
    assert 2 == main(["record", "--config", str(config), "--out", str(a_file)])
    assert f"{a_file}: not a directory; record --out takes a directory" in error_of(capsys)
    with pytest.raises(SystemExit) as exited:
        main(["record", "--config", str(config), "--out", str(tmp_path), "--duration", "-5"])
    assert 2 == exited.value.code
    assert "argument --duration: must be a number > 0 (got -5)" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exited:
        main(["record", "--config", str(config), "--out", str(tmp_path), "--rotate-mb", "0"])
    assert 2 == exited.value.code
    assert "argument --rotate-mb: must be a number > 0 (got 0)" in capsys.readouterr().err


def test_simulate_help_shows_every_default(capsys: pytest.CaptureFixture[str]) -> None:
    """simulate --help shows each default; replay's cluster flags say 'built-in cluster only'."""
    with pytest.raises(SystemExit):
        main(["simulate", "--help"])
    shown = " ".join(capsys.readouterr().out.split())
    for text in ["nodes (default: 63)", "GPUs per node (default: 8)", "days (default: 3.0)"]:
        assert text in shown
    assert "random seed (default: 7)" in shown
    with pytest.raises(SystemExit):
        main(["replay", "--help"])
    shown = " ".join(capsys.readouterr().out.split())
    assert "--days DAYS built-in cluster only: simulated days (3)" in shown
    assert "--step SECONDS tick length of a DUMP replay" in shown


def test_simulate_writes_the_fields_dcgm_exporter_ships_on_unless_asked_for_all(
    tmp_path: Path,
) -> None:
    """simulate writes dcgm-exporter's default fields (its ECC counters shipped off); with
    --dcgm-fields all, those too: the dump to replay for what enabling them buys."""
    pages = {}
    for fields in ("default", "all"):
        dump, events = tmp_path / f"{fields}.om", tmp_path / f"{fields}.jsonl"
        argv = ["simulate", "--nodes", "1", "--gpus", "1", "--days", "0.002", "--seed", "7"]
        assert 0 == main(
            [*argv, "--dcgm-fields", fields, "--out", str(dump), "--events", str(events)]
        )
        pages[fields] = dump.read_text()
    assert "DCGM_FI_DEV_GPU_TEMP{" in pages["default"]
    assert "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL" not in pages["default"]
    assert "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL{" in pages["all"]


def test_calibrate_explains_a_threshold_set_by_the_budget_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """calibrate explains '(budget)' and warns of a config threshold and a short history."""
    dump, events = tmp_path / "sim.om", tmp_path / "sim.jsonl"
    simulate = ["simulate", "--nodes", "2", "--gpus", "2", "--days", "0.02", "--seed", "7"]
    assert 0 == main([*simulate, "--out", str(dump), "--events", str(events)])
    assert "" == events.read_text()  # the premise: nothing to catch
    out = tmp_path / "calibration.json"
    config = tmp_path / "config.yaml"
    config.write_text("alerts:\n  threshold: 0.7\n")
    argv = ["calibrate", str(dump), "--fp-per-day", "1", "--out", str(out), "--quiet"]
    assert 0 == main([*argv, "--config", str(config)])
    captured = capsys.readouterr()
    assert "(budget): detected 0/0" in captured.out
    assert "(budget: no failure could be caught within the budget, so the budget alone" in (
        captured.out
    )
    assert "the config's alerts.threshold (0.7) overrides any calibration file's" in captured.err
    assert "the history covers 0.02 days; a threshold fitted on less than 1 day" in captured.err


# -- simulate --serve -------------------------------------------------------------------------


def test_simulate_serve_keeps_serving_until_interrupted(tmp_path: Path) -> None:
    """simulate --serve prints a working targets config and serves until Ctrl-C (exit 0)."""
    argv = ["simulate", "--serve", "--nodes", "1", "--gpus", "1", "--port", "0"]
    with subprocess.Popen(
        [sys.executable, "-m", "detector.cli", *argv],
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # A test runner may have inherited SIGINT as ignored; the CLI must see the default.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    ) as proc:
        try:
            assert proc.stdout is not None
            printed = [proc.stdout.readline() for _ in range(4)]  # targets:, static:, 2 targets
            config = tmp_path / "served.yaml"
            config.write_text("".join(printed))
            targets = load_config(config).targets.static
            assert [("node-01", "dcgm"), ("node-01", "node")] == [(t.node, t.kind) for t in targets]
            pages = [httpx.get(t.url, timeout=120.0).text for t in targets]  # hang guards
            assert "DCGM_FI_DEV_GPU_TEMP" in pages[0]
            assert "node_load1" in pages[1]
            assert proc.poll() is None  # still serving after the scrapes
            proc.send_signal(signal.SIGINT)
            _, err = proc.communicate(timeout=120)
        finally:
            proc.kill()
    assert 0 == proc.returncode
    assert "Ctrl-C stops" in err
    assert "Traceback" not in err


def test_simulate_serve_on_a_busy_port_exits_2_naming_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A port already in use is bad input naming the port, not an internal error."""
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        argv = ["simulate", "--serve", "--nodes", "1", "--gpus", "1", "--port", str(port)]
        assert 2 == main(argv)
    assert f"--port {port}: cannot listen: Address already in use" in error_of(capsys)


# -- which threshold a replay used ------------------------------------------------------------


def calibration_file(path: Path, threshold: float) -> Path:
    """A calibration file as `detector calibrate` writes it."""
    document = {
        "version": 1,
        "threshold": threshold,
        "fp_budget_per_day": 1.0,
        "fitted_on": {"dump": "history.om", "days": 3.0, "failures": 0},
        "achieved": {"detected": 0, "detected_before": 0, "fp_per_day": 0.0},
        "created": "2025-01-01T00:00:00Z",
    }
    path.write_text(json.dumps(document))
    return path


def test_replay_says_which_threshold_it_used_and_from_where(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """replay prints its threshold and its source: default, calibration file or config."""
    monkeypatch.delenv("DETECTOR_ALERTS__THRESHOLD", raising=False)
    calibration = calibration_file(tmp_path / "calibration.json", 0.45)
    config = tmp_path / "config.yaml"
    config.write_text("alerts:\n  threshold: 0.7\n")
    runs = [
        ([], "threshold 0.6000 (uncalibrated default; see detector calibrate)"),
        (["--calibration", str(calibration)], f"threshold 0.4500 (calibrated: {calibration})"),
        (
            ["--calibration", str(calibration), "--config", str(config)],
            f"threshold 0.7000 (alerts.threshold in {config}, which overrides {calibration}'s "
            "0.4500)",
        ),
    ]
    for extra, expected in runs:
        assert 0 == main(["replay", *SHORT, *extra])
        assert expected == capsys.readouterr().out.splitlines()[1]
    monkeypatch.setenv("DETECTOR_ALERTS__THRESHOLD", "0.5")
    assert 0 == main(["replay", *SHORT, "--config", str(config)])
    shown = capsys.readouterr().out.splitlines()[1]
    assert "threshold 0.5000 (DETECTOR_ALERTS__THRESHOLD)" == shown


def test_simulate_failures_plants_that_many(tmp_path: Path) -> None:
    """simulate --failures N plants N failures (the trace rate gives ~none in 3 days)."""
    dump, events = tmp_path / "sim.om", tmp_path / "sim.jsonl"
    simulate = ["simulate", "--nodes", "4", "--gpus", "2", "--days", "0.05", "--failures", "2"]
    assert 0 == main([*simulate, "--out", str(dump), "--events", str(events)])
    rows = [json.loads(line) for line in events.read_text().splitlines()]
    failures = [(e["node"], e["xid"]) for e in rows if e["xid"] != 45]  # 45: job teardown
    assert [("node-01", 79), ("node-02", 149)] == failures
