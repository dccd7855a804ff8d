"""Failures on cue: ``detector simulate --failure-at OFFSET:XID[@NODE[/GPU]]`` and ``--speed``,
the plan printed on stderr, and the planted failure in the simulated cluster's ground truth."""

from __future__ import annotations

import dataclasses
import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from detector.cli.main import main
from detector.errors import ConfigError
from detector.sim import (
    FailureCue,
    FailureSpec,
    Scenario,
    SimulatedCluster,
    parse_cue,
    plan_lines,
    plant_cues,
)

REPO = Path(__file__).resolve().parents[1]
SMALL = Scenario(nodes=4, gpus=8, days=0.5, seed=7, fault_trace=None)


def error_of(capsys: pytest.CaptureFixture[str]) -> str:
    return capsys.readouterr().err


def test_a_cue_reads_offset_units_xid_node_and_gpu() -> None:
    """Offsets in s, m or h (bare: seconds); node and GPU are optional."""
    assert FailureCue("5m:79", 300.0, 79) == parse_cue("5m:79")
    assert FailureCue("90:94", 90.0, 94) == parse_cue("90:94")
    assert FailureCue("1.5h:64@node-03", 5400.0, 64, "node-03") == parse_cue("1.5h:64@node-03")
    assert FailureCue("20s:79@node-03/2", 20.0, 79, "node-03", 2) == parse_cue("20s:79@node-03/2")


@pytest.mark.parametrize(
    ("flag", "message"),
    [
        ("5x:79", "'5x:79' is not OFFSET:XID[@NODE[/GPU]] (e.g. 5m:79"),
        ("5m", "'5m' is not OFFSET:XID[@NODE[/GPU]]"),
        ("5m:79@node-03/a", "is not OFFSET:XID[@NODE[/GPU]]"),
        ("0m:79", "'0m:79': the offset must be > 0"),
        ("5m:31", "'5m:31': XID 31 cannot be planted; the simulator plants 13, 43, 64, 74, 79,"),
    ],
)
def test_a_bad_cue_is_an_argument_error_naming_the_flag(
    flag: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A malformed cue or an XID the simulator cannot plant: argparse's exit 2 with usage."""
    with pytest.raises(SystemExit) as exited:
        main(["simulate", "--serve", "--failure-at", flag])
    assert 2 == exited.value.code
    err = error_of(capsys)
    assert "usage: detector simulate" in err
    assert "argument --failure-at: " in err
    assert message in err


def test_failure_at_and_failures_exclude_each_other(capsys: pytest.CaptureFixture[str]) -> None:
    """Cues replace the drawn failures, so asking for both is an argument error."""
    with pytest.raises(SystemExit) as exited:
        main(["simulate", "--serve", "--failures", "3", "--failure-at", "5m:79"])
    assert 2 == exited.value.code
    assert "not allowed with argument" in error_of(capsys)


def test_speed_without_serve_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """A dump is written at full speed: --speed there is a mistake, exit 2 saying so."""
    argv = ["simulate", "--speed", "60", "--out", str(tmp_path / "d.om")]
    assert 2 == main([*argv, "--events", str(tmp_path / "e.jsonl")])
    assert "--speed needs --serve" in error_of(capsys)


@pytest.mark.parametrize(
    ("cue", "message"),
    [
        ("5m:79@node-09", "--failure-at 5m:79@node-09: no node node-09 (node-01..node-04)"),
        ("5m:79@node-02/8", "--failure-at 5m:79@node-02/8: no GPU 8 (GPUs 0..7)"),
        ("13h:79", "--failure-at 13h:79: 0.542 simulated days in (at --speed 1), past the "),
    ],
)
def test_a_cue_outside_the_cluster_is_named(cue: str, message: str) -> None:
    """A node, GPU or time the simulated cluster does not have: ConfigError naming the cue."""
    with pytest.raises(ConfigError) as raised:
        plant_cues(SMALL, (parse_cue(cue),))
    assert message in str(raised.value)


def test_a_cue_plants_its_xid_at_offset_times_speed_on_the_named_gpu() -> None:
    """5m at 60x is 5 simulated hours; XID 79 is the PCIe fault (the GPU falls off the bus);
    the precursor starts after the start of the serve."""
    (spec,) = plant_cues(SMALL, (parse_cue("5m:79@node-03/2"),), speed=60.0)
    assert ("pcie", 2, 2, 18000.0, 79) == (spec.kind, spec.node, spec.gpu, spec.at_s, spec.xid)
    assert spec.lead_s is not None
    assert 0.0 < spec.lead_s <= 0.8 * spec.at_s


def test_an_open_node_and_gpu_are_fixed_by_the_seed() -> None:
    """Same seed, same place; the seed decides (several seeds do not all pick one GPU)."""
    cue = (parse_cue("2m:79"),)
    assert plant_cues(SMALL, cue) == plant_cues(SMALL, cue)
    places = {
        (s.node, s.gpu)
        for seed in range(8)
        for s in plant_cues(dataclasses.replace(SMALL, seed=seed), cue)
    }
    assert len(places) > 1


def test_the_planted_failure_is_in_the_clusters_ground_truth() -> None:
    """The cluster raises the cue's XID at start + offset x speed on the cue's node and GPU."""
    specs = plant_cues(SMALL, (parse_cue("2m:79@node-02/5"),), speed=60.0)
    cluster = SimulatedCluster(dataclasses.replace(SMALL, failures=specs))
    failures = [(e.time - SMALL.start, e.node, e.gpu, e.xid) for e in cluster.events()]
    assert [(7200.0, "node-02", "5", 79)] == [f for f in failures if f[3] != 45]


def test_the_plan_names_node_gpu_xid_and_both_clocks() -> None:
    """Precursor onset and fault, each as wall time (UTC, offset) and simulated time."""
    spec = FailureSpec("pcie", node=1, gpu=5, at_s=7200.0, lead_s=900.0, xid=79)
    cluster = SimulatedCluster(dataclasses.replace(SMALL, failures=(spec,), repair_cap_s=3600))
    wall_start = 1_800_000_000.0  # 2027-01-15T08:00:00Z
    lines = plan_lines(SMALL, cluster.failures, 60.0, wall_start)
    assert [
        "plan: 1 failure(s) at --speed 60 (wall UTC, simulated):",
        "  node-02 GPU 5: pcie failure, XID 79, repaired 1h00m00s (simulated) later",
        "    precursor onset 08:01:45 (+1m45s), simulated 2025-01-01T01:45:00Z (+1h45m00s)",
        "    fault           08:02:00 (+2m00s), simulated 2025-01-01T02:00:00Z (+2h00m00s)",
    ] == lines


def test_serve_prints_the_plan_on_stderr_and_stops_on_sigterm() -> None:
    """simulate --serve --failure-at prints the plan before the config, and SIGTERM (how a
    supervisor or a test stops it) ends it cleanly with exit 0."""
    argv = ["simulate", "--serve", "--nodes", "2", "--gpus", "2", "--days", "1", "--port", "0"]
    argv += ["--speed", "60", "--failure-at", "2m:79@node-02/1"]
    with subprocess.Popen(
        [sys.executable, "-m", "detector.cli", *argv],
        cwd=REPO,  # this tree's detector package, not an installed one
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as proc:
        try:
            assert proc.stderr is not None
            head = [proc.stderr.readline() for _ in range(5)]
            proc.send_signal(signal.SIGTERM)
            out, err = proc.communicate(timeout=60)
        finally:
            proc.kill()
    assert 0 == proc.returncode
    assert "at --speed 60; Ctrl-C stops." in head[0]
    assert "plan: 1 failure(s) at --speed 60 (wall UTC, simulated):\n" == head[1]
    assert head[2].startswith("  node-02 GPU 1: pcie failure, XID 79, repaired ")
    assert "(+2m00s), simulated 2025-01-01T02:00:00Z (+2h00m00s)" in head[4]
    assert head[4].startswith("    fault ")
    assert "stopped" in err
    assert out.startswith("targets:\n  static:\n")


def test_a_dump_plants_the_cue_at_its_simulated_offset(tmp_path: Path) -> None:
    """Without --serve the offset is simulated time (no clock to scale): 10m:79 is an XID 79
    ten simulated minutes into the dump's events."""
    dump, events = tmp_path / "sim.om", tmp_path / "events.jsonl"
    argv = ["simulate", "--nodes", "2", "--gpus", "2", "--days", "0.02", "--seed", "7"]
    argv += ["--failure-at", "10m:79@node-02/1", "--out", str(dump), "--events", str(events)]
    assert 0 == main(argv)
    rows = [json.loads(line) for line in events.read_text().splitlines()]
    failures = [(r["time"], r["node"], r["gpu"], r["xid"]) for r in rows if r["xid"] != 45]
    assert [(SMALL.start + 600.0, "node-02", "1", 79)] == failures
