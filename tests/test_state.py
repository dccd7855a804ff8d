"""State file: atomic save, faithful load, and a clean start (never a crash) on a bad file."""

from __future__ import annotations

import dataclasses
import io
import json
import zipfile
from pathlib import Path

import numpy as np
import pytest

from detector.config.load import load_config
from detector.errors import StateError
from detector.logs import configure_logging
from detector.loop import TickLoop
from detector.replay.run import simulated_frames
from detector.series.index import SeriesIndex
from detector.service.state import FORMAT_VERSION, load_state, save_state
from detector.sim import Scenario, SimulatedCluster


@pytest.fixture
def log() -> io.StringIO:
    stream = io.StringIO()
    configure_logging("info", "json", stream)
    return stream


def sample() -> tuple[dict[str, np.ndarray], dict[str, object]]:
    arrays = {
        "episodes/state": np.array([0, 2, 1], dtype=np.int8),
        "scorer.zscore/mean": np.array([[1.5, np.nan], [np.inf, -2.0]]),
        "xids/nodes": np.array(["node-01", "node-02"], dtype=np.str_),
    }
    meta: dict[str, object] = {
        "pipeline": {"version": 1, "open": {"3": [1.0, 0.9]}},
        "accounting": {"detections": 2, "false_positives": 1},
        "alerts": {"sent": [["node-01", "2", 1735689600.0]]},
    }
    return arrays, meta


def warnings_in(log: io.StringIO) -> list[dict[str, object]]:
    records = [json.loads(line) for line in log.getvalue().splitlines() if line.strip()]
    return [r for r in records if r["level"] == "warning"]


def test_saved_state_loads_back_identical(tmp_path: Path) -> None:
    """Arrays (NaN, inf, int8, strings) and nested JSON meta survive a round trip."""
    arrays, meta = sample()
    path = tmp_path / "state.npz"
    save_state(path, arrays, meta)
    loaded = load_state(path)
    assert loaded is not None
    got_arrays, got_meta = loaded
    assert meta == got_meta
    assert arrays.keys() == got_arrays.keys()
    for name, value in arrays.items():
        assert value.dtype == got_arrays[name].dtype
        assert np.array_equal(value, got_arrays[name], equal_nan=value.dtype.kind == "f")


def test_real_pipeline_state_restores_through_the_file(tmp_path: Path) -> None:
    """TickLoop.state_dict -> file -> load_state_dict gives the same open alerts and
    columns."""
    scenario = dataclasses.replace(Scenario.demo(), nodes=3, days=0.05, failure_count=0, seed=1)
    config = load_config(None, env={})
    index = SeriesIndex()
    loop = TickLoop.from_config(config, index)
    for frame in simulated_frames(SimulatedCluster(scenario), index):
        loop.step(frame)
    arrays, meta = loop.state_dict()
    save_state(tmp_path / "s.npz", arrays, {"loop": meta})
    loaded = load_state(tmp_path / "s.npz")
    assert loaded is not None
    restored = TickLoop.from_config(config, SeriesIndex())
    restored.load_state_dict(loaded[0], loaded[1]["loop"])
    assert index.infos == restored.pipeline.index.infos
    assert loop.open_alerts() == restored.open_alerts()


def test_save_replaces_atomically_and_leaves_no_temporary(tmp_path: Path) -> None:
    """A second save replaces the first; the directory holds only the state file."""
    arrays, meta = sample()
    path = tmp_path / "state.npz"
    save_state(path, arrays, meta)
    save_state(path, {"x": np.arange(3)}, {"daemon": {"ticks": 7}})
    assert [path.name] == [p.name for p in tmp_path.iterdir()]
    loaded = load_state(path)
    assert loaded is not None
    assert {"daemon": {"ticks": 7}} == loaded[1]


def test_failed_save_keeps_the_previous_file(tmp_path: Path) -> None:
    """Meta that is not JSON raises StateError; the old file and directory are untouched."""
    arrays, meta = sample()
    path = tmp_path / "state.npz"
    save_state(path, arrays, meta)
    before = path.read_bytes()
    with pytest.raises(StateError, match=r"state\.npz"):
        save_state(path, arrays, {"bad": object()})
    assert before == path.read_bytes()
    assert [path.name] == [p.name for p in tmp_path.iterdir()]


def test_unwritable_location_raises_state_error_naming_the_file(tmp_path: Path) -> None:
    """A directory that cannot hold the file (here: a regular file) raises StateError."""
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    with pytest.raises(StateError, match=r"not-a-dir/state\.npz"):
        save_state(blocker / "state.npz", *sample())
    target_is_dir = tmp_path / "dir.npz"
    target_is_dir.mkdir()
    with pytest.raises(StateError, match=r"dir\.npz"):
        save_state(target_is_dir, *sample())
    assert ["dir.npz", "not-a-dir"] == sorted(p.name for p in tmp_path.iterdir())


def test_object_arrays_are_refused_at_save(tmp_path: Path) -> None:
    """Arrays that would need pickle to load are refused when saving, naming the array."""
    with pytest.raises(StateError, match="'bad'"):
        save_state(tmp_path / "s.npz", {"bad": np.array([{}, None], dtype=object)}, {})


def test_missing_file_is_a_clean_start_without_warning(tmp_path: Path, log: io.StringIO) -> None:
    """No state file yet (first start): None, and nothing to warn about."""
    assert load_state(tmp_path / "none.npz") is None
    assert [] == warnings_in(log)


@pytest.mark.parametrize("damage", ["truncated", "garbage", "empty", "no-meta", "bad-json"])
def test_damaged_file_loads_as_none_with_a_warning_naming_it(
    tmp_path: Path, log: io.StringIO, damage: str
) -> None:
    """Truncated, corrupt, empty or foreign files: a warning naming the file, then None."""
    path = tmp_path / "state.npz"
    save_state(path, *sample())
    data = path.read_bytes()
    if damage == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif damage == "garbage":
        path.write_bytes(b"\x00\xff not a zip file " * 10)
    elif damage == "empty":
        path.write_bytes(b"")
    elif damage == "no-meta":
        np.savez(path, x=np.arange(2))
    else:
        with zipfile.ZipFile(path, "w") as zf:
            buf = io.BytesIO()
            np.save(buf, np.frombuffer(b"{not json", dtype=np.uint8))
            zf.writestr("__meta__.npy", buf.getvalue())
    assert load_state(path) is None
    [warning] = warnings_in(log)
    assert str(path) == warning["path"]
    assert "starting clean" in str(warning["event"])


def test_other_format_version_loads_as_none_with_a_warning(
    tmp_path: Path, log: io.StringIO
) -> None:
    """A file from another build's container version is not guessed at: None + warning."""
    path = tmp_path / "state.npz"
    blob = json.dumps({"format": FORMAT_VERSION + 1, "meta": {}}).encode()
    np.savez(path, __meta__=np.frombuffer(blob, dtype=np.uint8))
    assert load_state(path) is None
    [warning] = warnings_in(log)
    assert f"format version {FORMAT_VERSION + 1}" in str(warning["reason"])
