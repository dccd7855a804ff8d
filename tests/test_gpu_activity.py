"""GPUs at rest and working GPUs of a node where no label names their jobs
(detector/gpu_activity.py): they move apart only several at a time, and a lone GPU that stops
stays its job's deviant."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from detector.cli.main import main
from detector.config.load import load_config
from detector.loop import TickLoop
from detector.model import SeriesInfo
from detector.replay.run import run_replay, simulated_frames
from detector.series.index import SeriesIndex
from detector.series.labels import LabelRules, normalize
from detector.signals.gpu_activity import TOGETHER_S, GpuActivity
from detector.signals.gpu_teams import GpuTeams
from detector.sim import Scenario, SimulatedCluster

STEP = 30.0


def _activity(gpus: int = 8, nodes: int = 1) -> GpuActivity:
    activity = GpuActivity()
    for entity in range(gpus * nodes):
        activity.add_gpu(entity, entity // gpus)
    return activity


def _feed(activity: GpuActivity, util: list[list[float]], t0: float = 0.0) -> list:
    """One row of utilizations a tick; every change reported, with its tick."""
    changes = []
    for k, row in enumerate(util):
        activity.observe(t0 + k * STEP, np.asarray(row, dtype=float))
        changes += [(k, *change) for change in activity.take_changes()]
    return changes


def test_first_readings_set_each_gpus_side() -> None:
    """Idle GPUs read first are at rest (reported), working ones stay on the working side."""
    activity = _activity(4)
    assert [(0, 2, True, -1), (0, 3, True, -1)] == _feed(activity, [[98, 97, 0, 1]])
    assert [False, False, True, True] == activity.side.tolist()


def test_a_job_starting_on_some_gpus_leaves_the_idle_ones_at_rest() -> None:
    """Six GPUs of an idle node start a job together: they move to the working side; the two
    left idle stay at rest, so they are not the job's peers."""
    activity = _activity()
    idle, job = [0.0] * 8, [98.0] * 6 + [0.0, 1.0]
    changes = _feed(activity, [idle] * 5 + [job] * 5)
    assert [(5, e, False, -1) for e in range(6)] == changes[8:]
    assert [False] * 6 + [True] * 2 == activity.side.tolist()


def test_a_gpu_that_stops_alone_stays_with_its_job() -> None:
    """One GPU of a job drops to 0% while the others keep going: it stays on the working side
    for good (its peers must see it); when the whole job stops later, it goes with them."""
    activity = _activity()
    working, one_stopped, all_stopped = [98.0] * 8, [98.0] * 7 + [0.0], [0.0] * 8
    assert [] == _feed(activity, [working] * 3 + [one_stopped] * 200)
    assert not activity.side.any()
    changes = _feed(activity, [all_stopped] * 2, t0=203 * STEP)
    assert {e for _, e, resting, _ in changes if resting} == set(range(8))


def test_a_gpu_that_starts_alone_joins_the_working_side_after_a_while() -> None:
    """A one-GPU job beside idle GPUs: at rest it would be their deviant, so after working
    alone for TOGETHER_S it joins the working side; not before."""
    activity = _activity()
    idle, one = [0.0] * 8, [0.0] * 7 + [98.0]
    changes = _feed(activity, [idle] * 3 + [one] * 10)
    moved_at = 3 + int(TOGETHER_S // STEP) + 1
    assert [(moved_at, 7, False, -1)] == [c for c in changes if c[1] == 7 and c[0] > 0]


def test_a_job_that_starts_beside_a_running_one_is_a_crew_of_its_own() -> None:
    """Six GPUs train; later the two idle ones start a job together: they work in a crew of
    their own (named by GPU 6), not on the running job's side; when both jobs end and a
    whole-node job starts, every GPU is on the plain working side again."""
    activity = _activity()
    main_job, both, idle, whole = [98.0] * 6 + [0.0] * 2, [98.0] * 8, [0.0] * 8, [98.0] * 8
    changes = _feed(activity, [main_job] * 3 + [both] * 3)
    assert [(3, 6, False, 6), (3, 7, False, 6)] == [c for c in changes if c[0] > 0]
    assert [-1] * 6 + [6, 6] == activity.crew.tolist()
    changes = _feed(activity, [idle] * 3 + [whole] * 3, t0=6 * STEP)
    assert [(3, e, False, -1) for e in range(8)] == [c for c in changes if not c[2]]
    assert [-1] * 8 == activity.crew.tolist()


def test_a_dip_between_the_thresholds_keeps_the_state() -> None:
    """A checkpoint's dip to 12% is neither rest nor work: nothing moves."""
    activity = _activity()
    assert [] == _feed(activity, [[98.0] * 8] * 3 + [[12.0] * 8] * 5 + [[98.0] * 8] * 3)


def test_unobserved_gpus_take_no_part_and_the_state_survives_a_restart() -> None:
    """NaN readings change nothing; a saved state restores sides and pending changes, and
    reports the GPUs at rest again for the new teams."""
    activity = _activity(4)
    _feed(activity, [[0.0] * 4, [98.0, 98.0, np.nan, 0.0]])
    assert [False, False, True, True] == activity.side.tolist()
    restored = _activity(4)
    restored.load_state_dict(activity.state_dict())
    assert [(2, True, -1), (3, True, -1)] == restored.take_changes()
    assert activity.state_dict().keys() == restored.state_dict().keys()
    for key, value in activity.state_dict().items():
        assert np.array_equal(value, restored.state_dict()[key])
    with pytest.raises(ValueError, match="not the index's"):
        _activity(2, nodes=2).load_state_dict(activity.state_dict())


def _gpu_info(gpu: str, pod: str | None = None) -> SeriesInfo:
    labels = [("gpu", gpu), ("Hostname", "n1")] + ([("exported_pod", pod)] if pod else [])
    return SeriesInfo(0, *normalize("DCGM_FI_DEV_GPU_UTIL", tuple(labels), LabelRules()))


def test_the_side_at_rest_is_a_team_of_its_own_and_a_label_wins() -> None:
    """An unlabelled GPU at rest leaves its node's team; back at work it returns, or in a
    crew joins a team of its own; a GPU whose series name its pod keeps the pod's team."""
    teams = GpuTeams(LabelRules())
    teams.add_gpu(0, 0, _gpu_info("0"))
    teams.add_gpu(1, 0, _gpu_info("1", "train-a"))
    at_rest = teams.rest(0, True)
    assert at_rest not in (None, 0)
    assert teams.rest(1, True) is None  # the label wins
    assert 0 == teams.rest(0, False)
    crew = teams.rest(0, False, crew=0)
    assert crew not in (None, 0, at_rest)
    teams.rest(0, True)
    teams.note_split(0, "n1")
    assert set() == teams.inferred_split_nodes  # idle GPUs beside a job are no second job


# (idle, working, noise) per metric
METRICS = {
    "DCGM_FI_DEV_GPU_UTIL": (0.0, 98.0, 1.0),
    "DCGM_FI_DEV_POWER_USAGE": (140.0, 930.0, 8.0),
    "DCGM_FI_DEV_GPU_TEMP": (32.0, 68.0, 0.7),
    "DCGM_FI_DEV_SM_CLOCK": (345.0, 1965.0, 5.0),
}
T0 = 1_767_000_000


def _dump(path: Path, load: Callable[[int, int, float], float], hours: float = 2.0) -> None:
    """4 nodes x 8 GPUs of dcgm-exporter without pod mapping; ``load(node, gpu, hours)`` in
    [0, 1] sets each reading between its idle and working level."""
    rng = np.random.default_rng(11)
    ticks = int(hours * 3600 / STEP)
    with path.open("w") as fh:
        for name, (idle, busy, noise) in METRICS.items():
            fh.write(f"# TYPE {name} gauge\n")
            for node in range(4):
                for gpu in range(8):
                    labels = f'gpu="{gpu}",Hostname="node-{node}"'
                    for k in range(ticks):
                        h = k * STEP / 3600
                        value = idle + (busy - idle) * load(node, gpu, h) + rng.normal() * noise
                        value = max(value, 0.0)
                        fh.write(f"{name}{{{labels}}} {value:.6g} {T0 + k * STEP:.0f}\n")
        fh.write("# EOF\n")


def _alerts(tmp_path: Path, dump: Path, activity: str) -> set[tuple[str, str | None]]:
    config = tmp_path / "config.yaml"
    config.write_text(
        f"labels:\n  gpu_workload_labels: []\n  gpu_activity_signal: {activity or 'null'}\n"
    )
    report = tmp_path / "report.json"
    args = ["replay", str(dump), "--config", str(config), "--report-json", str(report)]
    assert main(args) == 0
    return {(a["node"], a["gpu"]) for a in json.loads(report.read_text())["alerts"]}


def test_idle_gpus_beside_a_starting_job_raise_no_alert(tmp_path: Path) -> None:
    """Every node idles for 20 minutes, then trains on all its GPUs, but node-1 only on six:
    its two idle GPUs raise no alert; with the activity signal off they are the job's lone
    deviants (the check that this test can fail)."""
    dump = tmp_path / "start.om"
    _dump(dump, lambda node, gpu, h: float(h >= 1 / 3 and (node != 1 or gpu < 6)))
    assert not any(node == "node-1" for node, _ in _alerts(tmp_path, dump, "gpu_util"))
    assert {("node-1", "6"), ("node-1", "7")} & _alerts(tmp_path, dump, "")


def test_a_side_job_starting_beside_a_running_one_raises_no_alert(tmp_path: Path) -> None:
    """node-1 trains on six GPUs from the start; at 1 h its two idle GPUs start a job of
    their own at 60% load: no alert on node-1; with the activity signal off they are the
    running job's deviants."""
    dump = tmp_path / "side.om"

    def load(node: int, gpu: int, h: float) -> float:
        if node != 1 or gpu < 6:
            return 1.0
        return 0.6 if h >= 1.0 else 0.0

    _dump(dump, load)
    assert not any(node == "node-1" for node, _ in _alerts(tmp_path, dump, "gpu_util"))
    assert {("node-1", "6"), ("node-1", "7")} & _alerts(tmp_path, dump, "")


def test_the_simulators_shared_nodes_raise_no_alert_without_labels() -> None:
    """The simulator's shared nodes (two GPUs each in side jobs of their own) with no
    workload label and co-movement on: no alert with the activity split, the side GPUs'
    alerts without it."""
    scenario = dataclasses.replace(
        Scenario.demo(), nodes=8, days=0.5, seed=41, shared_nodes=3, failure_count=0
    )
    alerts = {}
    for signal in ("gpu_util", ""):
        env = {
            "DETECTOR_LABELS__GPU_WORKLOAD_LABELS": "[]",
            "DETECTOR_LABELS__GPU_ACTIVITY_SIGNAL": signal,
        }
        config = load_config(None, env=env)
        index = SeriesIndex(LabelRules.from_config(config.labels))
        frames = simulated_frames(SimulatedCluster(scenario), index)
        alerts[signal] = run_replay(TickLoop.from_config(config, index), frames).alerts
    assert [] == alerts["gpu_util"]
    assert {a.gpu for a in alerts[""]} <= {"6", "7"}  # the side GPUs
    assert alerts[""]


def test_a_gpu_that_stops_while_its_job_goes_on_is_still_caught(tmp_path: Path) -> None:
    """Every GPU trains; at 1.5 h GPU 4 of node-2 drops to idle readings alone: it alerts,
    activity on or off."""
    dump = tmp_path / "stop.om"
    _dump(dump, lambda node, gpu, h: float(not (node == 2 and gpu == 4 and h >= 1.5)))
    assert ("node-2", "4") in _alerts(tmp_path, dump, "gpu_util")
    assert ("node-2", "4") in _alerts(tmp_path, dump, "")
