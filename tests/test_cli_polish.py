"""Operator experience: the progress bar (unit, and through a real pseudo-terminal), help
examples that really parse, and every exit code of ``detector`` (0, 1, 2, 3, 130)."""

from __future__ import annotations

import io
import os
import re
import select
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from detector.cli.main import COMMANDS, _parser, main
from detector.ingest.dumps.read import write_openmetrics
from detector.model import Sample
from detector.replay.progress import ProgressBar
from detector.replay.run import dump_frames
from detector.series.index import SeriesIndex

DAY = 86400.0
REPO = Path(__file__).resolve().parent.parent


class FakeClock:
    """Wall clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class FakeTerminal(io.StringIO):
    """A text stream that says it is a terminal."""

    def isatty(self) -> bool:
        return True


def segments(written: str) -> list[str]:
    """The successive redraws of a bar (each starts with a carriage return)."""
    return written.rstrip("\n").split("\r")[1:]


# -- the bar itself ---------------------------------------------------------------------------


def test_bar_is_off_when_the_stream_is_not_a_terminal() -> None:
    """A pipe or file gets no bar at all (for_stream returns None, so nothing is computed)."""
    assert ProgressBar.for_stream(io.StringIO(), env={}) is None
    assert ProgressBar.for_stream(FakeTerminal(), env={}) is not None


@pytest.mark.parametrize(
    ("quiet", "env", "drawn"),
    [
        (True, {}, False),
        (False, {"CI": "true"}, False),
        (False, {"CI": "1"}, False),
        (False, {"CI": "false"}, True),
        (False, {"CI": ""}, True),
    ],
)
def test_bar_is_off_under_quiet_or_ci(quiet: bool, env: dict[str, str], drawn: bool) -> None:
    """--quiet or a CI environment silences the bar even on a terminal; CI=false does not."""
    bar = ProgressBar.for_stream(FakeTerminal(), quiet=quiet, env=env)
    assert drawn == (bar is not None)


def test_bar_shows_percent_days_throughput_and_eta() -> None:
    """Half of a 2-day span replayed in 30 s: 50%, 1.00 of 2.00 days, 2.0 days/min, ETA 0:30."""
    clock, out = FakeClock(), FakeTerminal()
    bar = ProgressBar(out, span=(1000.0, 1000.0 + 2 * DAY), clock=clock)
    bar.update(1000.0)
    clock.now = 30.0
    bar.update(1000.0 + DAY)
    assert (
        "[############------------]  50.0%  1.00 of 2.00 days  2.0 days/min  ETA 0:30"
        == (segments(out.getvalue())[-1])
    )


def test_bar_without_a_span_shows_ticks_and_days_but_no_percent() -> None:
    """An unknown span draws ticks, data days covered and throughput, never a made-up %."""
    clock, out = FakeClock(), FakeTerminal()
    bar = ProgressBar(out, clock=clock)
    for k in range(9):
        clock.now = 6.0 * k
        bar.update(k * DAY / 8)
    bar.close(complete=True)
    last = segments(out.getvalue())[-1]
    assert "%" not in last
    assert "9 ticks  1.00 days  1.2 days/min" in last
    assert "<=>" in last


def test_a_span_learnt_midway_switches_the_bar_to_percent() -> None:
    """set_span (a dump's range, known once it is read) turns the ticks view into percent."""
    clock, out = FakeClock(), FakeTerminal()
    bar = ProgressBar(out, clock=clock)
    bar.update(0.0)
    assert "%" not in segments(out.getvalue())[-1]
    bar.set_span(0.0, 4 * DAY)
    clock.now = 1.0
    bar.update(DAY)
    assert "25.0%  1.00 of 4.00 days" in segments(out.getvalue())[-1]


def test_redraws_are_rate_limited() -> None:
    """1000 ticks over 0.98 s of wall time redraw once per 1/8 s interval: 8 times, not 1000."""
    clock, out = FakeClock(), FakeTerminal()
    bar = ProgressBar(out, span=(0.0, 1000.0), min_interval_s=0.125, clock=clock)
    for k in range(1000):
        clock.now = k / 1024  # exact binary fractions: no rounding at the interval edges
        bar.update(float(k))
    assert 8 == bar.redraws
    assert 8 == out.getvalue().count("\r")


def test_close_draws_100_percent_and_ends_the_line_once() -> None:
    """A completed replay ends at 100% (even if its last tick fell short of the last sample)
    with one newline; a second close writes nothing."""
    clock, out = FakeClock(), FakeTerminal()
    bar = ProgressBar(out, span=(0.0, DAY), clock=clock)
    bar.update(0.0)
    clock.now = 10.0
    bar.update(DAY - 30.0)
    bar.close(complete=True)
    written = out.getvalue()
    assert written.endswith("\n")
    assert "100.0%  1.00 of 1.00 days" in segments(written)[-1]
    bar.close()
    assert written == out.getvalue()


def test_an_interrupted_bar_keeps_its_true_position() -> None:
    """close() without complete (the replay was interrupted) shows where it stopped."""
    clock, out = FakeClock(), FakeTerminal()
    bar = ProgressBar(out, span=(0.0, 4 * DAY), clock=clock)
    bar.update(0.0)
    clock.now = 0.01  # inside the rate limit: only close draws the last position
    bar.update(DAY)
    bar.close()
    assert "25.0%" in segments(out.getvalue())[-1]
    assert out.getvalue().endswith("\n")


def test_a_bar_that_never_started_writes_nothing() -> None:
    """A replay with no tick leaves the terminal untouched (no stray empty line)."""
    out = FakeTerminal()
    ProgressBar(out, span=(0.0, DAY)).close(complete=True)
    assert "" == out.getvalue()


def test_a_shorter_redraw_blanks_the_rest_of_the_longer_line() -> None:
    """When the ETA shrinks from H:MM:SS to M:SS the leftover characters are overwritten."""
    clock, out = FakeClock(), FakeTerminal()
    bar = ProgressBar(out, span=(0.0, 10 * DAY), clock=clock)
    bar.update(0.0)
    clock.now = 600.0
    bar.update(DAY)  # 0.1 days/min: ETA 1:30:00
    clock.now = 660.0
    bar.update(9 * DAY)  # faster: ETA 1:13
    drawn = segments(out.getvalue())
    assert "ETA 1:30:00" in drawn[1]
    assert "ETA 1:13" == drawn[2].rstrip()[-8:]
    assert len(drawn[1]) == len(drawn[2])


def test_dump_frames_announce_the_dump_span_before_the_first_frame(tmp_path: Path) -> None:
    """A dump replay learns its span (first and last sample) from the reader's cache before
    the first frame reaches the pipeline, so its bar can show percent from the start."""
    dump = tmp_path / "d.om"
    t0 = 1_700_000_010.0  # on the 30 s grid, so the first frame's time is the first sample's
    samples = [Sample("up", (("instance", "n1"),), 1.0, t0 + 30 * k) for k in range(50)]
    write_openmetrics(dump, samples, {"up": "gauge"})
    spans: list[tuple[float, float]] = []
    frames = dump_frames([dump], SeriesIndex(), None, on_span=lambda a, b: spans.append((a, b)))
    first = next(frames)
    assert [(t0, t0 + 30 * 49)] == spans
    assert t0 == first.time


# -- the bar in a real terminal ---------------------------------------------------------------


@pytest.fixture(scope="module")
def small_dump(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A simulated 0.05-day dump of 3 nodes x 2 GPUs (no failure in it) and its events file."""
    folder = tmp_path_factory.mktemp("small-dump")
    dump, events = folder / "sim.om.gz", folder / "sim.jsonl"
    simulate = ["simulate", "--nodes", "3", "--gpus", "2", "--days", "0.05", "--seed", "7"]
    assert 0 == main([*simulate, "--out", str(dump), "--events", str(events)])
    return dump, events


def child_env(**extra: str) -> dict[str, str]:
    """The environment of a CLI child: this one without CI (CI runs this suite with CI set)."""
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "DETECTOR_DEBUG")}
    env.update(extra)
    return env


def run_cli(
    args: list[str],
    cwd: Path,
    *,
    env: dict[str, str],
    terminal: bool = True,
    interrupt_on: str | None = None,
) -> tuple[int, str, str]:
    """Run ``python -m detector.cli ARGS`` with stderr on a pseudo-terminal (or a pipe);
    optionally send SIGINT once ``interrupt_on`` appears there. Returns (rc, stderr, stdout)."""
    stdout_path = cwd / f"stdout-{time.monotonic_ns()}.txt"
    master, slave = os.openpty() if terminal else os.pipe()
    with stdout_path.open("wb") as stdout:
        proc = subprocess.Popen(
            [sys.executable, "-m", "detector.cli", *args],
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=slave,
            # A test runner may have inherited SIGINT as ignored; the CLI must see the default.
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
    os.close(slave)
    received = b""
    interrupted = False
    try:
        while True:
            ready, _, _ = select.select([master], [], [], 120.0)  # a hang guard, not a timing
            if not ready:
                proc.kill()
                raise AssertionError(f"detector {args} wrote nothing for 120 s")
            try:
                data = os.read(master, 4096)
            except OSError:  # EIO: the child closed its end of the terminal
                break
            if not data:
                break
            received += data
            if interrupt_on and not interrupted and interrupt_on.encode() in received:
                proc.send_signal(signal.SIGINT)
                interrupted = True
    finally:
        os.close(master)
    rc = proc.wait(timeout=300)  # a hang guard: a loaded machine starts Python slowly
    return rc, received.decode(), stdout_path.read_text()


def test_replay_draws_the_bar_on_a_terminal(tmp_path: Path) -> None:
    """`detector replay --days 0.05 --nodes 4` with stderr on a pty: the bar is redrawn in place
    and ends at 100% with a newline; stdout (the summary) carries no bar."""
    rc, err, out = run_cli(["replay", "--days", "0.05", "--nodes", "4"], tmp_path, env=child_env())
    assert 0 == rc
    last = segments(err.replace("\r\n", "\n"))[-1]
    assert re.fullmatch(
        r"\[#{24}\] 100\.0%  0\.05 of 0\.05 days  [\d.]+ days/min  ETA 0:00 *", last
    ), last
    assert err.endswith("\r\n")  # the pty turns the bar's final newline into CR LF
    assert "\r" not in out
    assert "replayed 0.05 days" in out


@pytest.mark.parametrize(
    ("terminal", "extra_args", "extra_env"),
    [(False, [], {}), (True, ["--quiet"], {}), (True, [], {"CI": "true"})],
    ids=["pipe", "quiet", "ci"],
)
def test_replay_draws_no_bar_into_a_pipe_or_when_quiet_or_in_ci(
    tmp_path: Path, terminal: bool, extra_args: list[str], extra_env: dict[str, str]
) -> None:
    """stderr as a pipe, --quiet or CI=true: nothing on stderr, the summary unchanged."""
    args = ["replay", "--days", "0.05", "--nodes", "4", *extra_args]
    rc, err, out = run_cli(args, tmp_path, env=child_env(**extra_env), terminal=terminal)
    assert 0 == rc
    assert "" == err
    assert "replayed 0.05 days" in out


def test_dump_replay_bar_shows_the_dump_span(small_dump: tuple[Path, Path], tmp_path: Path) -> None:
    """A dump replay on a terminal knows the dump's span, so its bar has percent and days."""
    dump, events = small_dump
    rc, err, _ = run_cli(["replay", str(dump), "--events", str(events)], tmp_path, env=child_env())
    assert 0 == rc
    assert "100.0%  0.05 of 0.05 days" in segments(err.replace("\r\n", "\n"))[-1]


def test_interrupt_exits_130_after_ending_the_bar_line(tmp_path: Path) -> None:
    """Ctrl-C during a replay: exit 130, 'interrupted' on a line of its own, no traceback."""
    rc, err, _ = run_cli(
        ["replay", "--days", "3", "--nodes", "4"], tmp_path, env=child_env(), interrupt_on="%"
    )
    assert 130 == rc
    assert "\r\ndetector: interrupted\r\n" in err
    assert "Traceback" not in err
    assert "100.0%" not in err


# -- help and exit codes ----------------------------------------------------------------------


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_help_example_is_a_valid_invocation(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each subcommand's --help ends with its examples, and every example parses with today's
    arguments (an example naming a renamed or removed flag fails here)."""
    with pytest.raises(SystemExit) as exited:
        main([command, "--help"])
    assert 0 == exited.value.code
    shown = capsys.readouterr().out.split("examples:\n", 1)[1]
    lines = [ln.split("#", 1)[0].strip() for ln in shown.splitlines()]
    invocations = [shlex.split(ln) for ln in lines if ln]
    assert invocations
    for words in invocations:
        words = [w for w in words if not re.fullmatch(r"[A-Z_]+=.*", w)]  # env assignments
        assert ["detector", command] == words[:2]
        assert command == _parser().parse_args(words[1:]).command


def test_an_internal_error_exits_1_asking_for_a_report(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A bug exits 1 with one line and a request to report it; the traceback only with
    DETECTOR_DEBUG=1."""

    def broken(_args: object) -> int:
        raise ZeroDivisionError("division by zero")

    commands = {**COMMANDS, "check-config": broken}
    assert 1 == main(["check-config", "x.yaml"], commands=commands, env={})
    err = capsys.readouterr().err
    assert "detector: internal error: ZeroDivisionError: division by zero" in err
    assert "please report it" in err
    assert "DETECTOR_DEBUG=1" in err
    assert "Traceback" not in err
    assert 1 == main(["check-config", "x.yaml"], commands=commands, env={"DETECTOR_DEBUG": "1"})
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err
    assert "please report it" in err


def test_a_bad_dump_line_exits_2_naming_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A dump whose bad lines exceed the tolerance names the first bad line as file:line."""
    dump = tmp_path / "bad.om"
    good = [f'up{{instance="n1"}} 1 {1000 + 30 * k}' for k in range(3)]
    dump.write_text("\n".join([*good, *(["up{instance= 1 2"] * 12)]) + "\n")
    assert 2 == main(["replay", str(dump), "--quiet"])
    err = capsys.readouterr().err
    assert f"{dump}:4:" in err
    assert "Traceback" not in err


def test_a_bad_config_exits_2_naming_file_and_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """replay --config with an invalid value names the file and the dotted field."""
    config = tmp_path / "config.yaml"
    config.write_text("alerts:\n  min_duration_s: -5\n")
    assert 2 == main(["replay", "--days", "0.01", "--nodes", "2", "--config", str(config)])
    err = capsys.readouterr().err
    assert str(config) in err
    assert "alerts.min_duration_s" in err


def test_a_bad_events_line_exits_2_naming_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An events file with a broken second line names file and line 2."""
    events = tmp_path / "xids.jsonl"
    events.write_text('{"time": 1735700000, "node": "n1", "xid": 79}\n{"time": \n')
    assert 2 == main(["replay", "--days", "0.01", "--nodes", "2", "--events", str(events)])
    assert f"{events}:2" in capsys.readouterr().err


@pytest.mark.parametrize("option", ["dump", "--events", "--config", "--calibration"])
def test_an_unreadable_input_path_exits_2_naming_it(
    option: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A directory where a file is expected (unreadable as one) exits 2 and names the path."""
    folder = tmp_path / "not-a-file"
    (folder / "empty").mkdir(parents=True)  # a dump directory holding no dump file
    args = [str(folder)] if option == "dump" else ["--days", "0.01", option, str(folder)]
    assert 2 == main(["replay", *args, "--quiet"])
    err = capsys.readouterr().err
    assert str(folder) in err
    assert "Traceback" not in err


def test_an_unwritable_output_path_exits_2_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--report-json into a missing directory exits 2 naming the path, not as a bug."""
    report = tmp_path / "missing-dir" / "report.json"
    args = ["replay", "--days", "0.01", "--nodes", "2", "--quiet", "--report-json", str(report)]
    assert 2 == main(args)
    err = capsys.readouterr().err
    assert f"detector: error: {report}: No such file or directory" in err
    assert "internal error" not in err


def test_calibration_over_budget_exits_3_and_still_writes_the_file(
    small_dump: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """With no failures and alerts allowed to fire on one tick, even the highest candidate
    threshold (the maximum score) alerts once: a budget of 0 FP/day cannot be met -> exit 3,
    and the calibration file is written anyway."""
    dump, events = small_dump
    assert "" == events.read_text()  # the premise: this history holds no failure
    config = tmp_path / "config.yaml"
    config.write_text("alerts:\n  min_duration_s: 0\n  min_observations: 1\n")
    out = tmp_path / "calibration.json"
    args = ["calibrate", str(dump), "--config", str(config), "--fp-per-day", "0", "--quiet"]
    assert 3 == main([*args, "--out", str(out)])
    assert "(over-budget)" in capsys.readouterr().out
    assert out.is_file()
