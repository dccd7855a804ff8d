"""``record.dir`` holds what ``detector run`` scored from remote write: the daemon, fed only
by Prometheus remote-write requests (the simulated cluster's pages, as Prometheus would send
them after scraping), records each tick; ``detector replay`` of the recording gives the same
node scores tick by tick and the same alerts.

The requests are not all on time: one node's page reaches the daemon a tick late (counted in
the tick after its timestamp, as a sender's batch deadline makes it) and is then sent again
(refused as out of order). The recording must hold what each tick scored, not what arrived.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from detector.config import Config
from detector.ingest.parse import parse_exposition, split_series
from detector.ingest.remote_write import encode_write_request
from detector.loop import LoopTick, TickLoop
from detector.model import Alert
from detector.replay import dump_frames
from detector.series import LabelRules, SeriesIndex
from detector.service import Daemon
from detector.sim import FailureSpec, Scenario, SimulatedCluster

TICKS = 110
LATE_TICK = 40  # node-04's pages of this tick arrive after it, in place of the next tick's
SCENARIO = Scenario(
    nodes=4,
    gpus=2,
    days=TICKS * 30.0 / 86400.0 + 0.01,
    fault_trace=None,
    noisy_nodes=0,
    seed=5,
    failures=(FailureSpec("thermal", node=0, gpu=1, at_s=2100.0, lead_s=1200.0, xid=79),),
    repair_cap_s=900.0,
)
HEADERS = {
    "content-encoding": "snappy",
    "content-type": "application/x-protobuf",
    "x-prometheus-remote-write-version": "0.1.0",
}


def _requests(cluster: SimulatedCluster, t: float, values: Any) -> dict[str, bytes]:
    """node -> one remote-write request of its two pages at ``t``, with the target labels
    Prometheus adds (job, instance)."""
    out = {}
    for node in (SCENARIO.node_name(i) for i in range(SCENARIO.nodes)):
        series = []
        for job, port, page in zip(
            ("dcgm", "node"), (9400, 9100), cluster.exposition(node, t, values), strict=True
        ):
            exp = parse_exposition(page, f"{node}:{port}")
            for key, value in zip(exp.keys, exp.values, strict=True):
                name, labels = split_series(key)
                target = (("instance", f"{node}:{port}"), ("job", job))
                series.append((name, labels + target, [(round(t * 1000), float(value))]))
        out[node] = encode_write_request(series)
    return out


def _scores(tick: LoopTick) -> tuple[float, dict[str, float]]:
    return tick.time, dict(zip(tick.node_names, tick.node_score.tolist(), strict=True))


def _key(alert: Alert) -> tuple[Any, ...]:
    return (alert.node, alert.gpu, alert.start, alert.end, alert.signals)


@pytest.mark.slow
async def test_replay_of_a_remote_write_fed_recording_scores_what_run_scored(
    tmp_path: Path,
) -> None:
    """Tick by tick the same node scores and the same alerts from the live daemon and from
    the replay of its record.dir, a late and an out-of-order request included."""
    config = Config.model_validate(
        {
            "remote_write": {"enabled": True},
            "kmsg": {"enabled": False},
            "record": {"dir": str(tmp_path / "recorded")},
            "logging": {"level": "warning"},
        }
    )
    cluster = SimulatedCluster(SCENARIO)
    late = SCENARIO.node_name(3)
    now = [SCENARIO.start]
    daemon = Daemon(config, clock=lambda: now[0])
    assert daemon.remote_write is not None
    live: list[LoopTick] = []
    held = b""
    try:
        for i, (t, values) in zip(range(TICKS), cluster.frames(), strict=False):
            requests = _requests(cluster, t, values)
            if i == LATE_TICK:
                held = requests.pop(late)  # arrives after this tick was scored
            elif i == LATE_TICK + 1:
                requests[late] = held  # in place of this tick's
            elif i == LATE_TICK + 2:
                requests[f"{late} again"] = held  # sent twice: out of order now
            for body in requests.values():
                daemon.remote_write.receive(body, HEADERS)
            now[0] = t
            live.append(await daemon.tick())
        open_alerts = daemon.loop.open_sent_alerts()
    finally:
        await daemon.aclose()
    assert daemon.remote_write.stats.samples["out_of_order"] > 0
    run_alerts = [a for t in live for a in t.ended_sent] + open_alerts

    index = SeriesIndex(LabelRules.from_config(config.labels))
    loop = TickLoop.from_config(config, index)
    files = sorted((tmp_path / "recorded").iterdir())
    replayed = [loop.step(frame) for frame in dump_frames(files, index, None)]
    replay_alerts = [a for t in replayed for a in t.ended_sent] + loop.open_sent_alerts()

    assert [_scores(t)[0] for t in live] == [_scores(t)[0] for t in replayed]
    for ran, again in zip(live, replayed, strict=True):
        expected, actual = _scores(ran)[1], _scores(again)[1]
        assert expected.keys() == actual.keys()
        assert np.allclose(
            list(expected.values()), [actual[n] for n in expected], rtol=1e-9, equal_nan=True
        )
    assert sorted(map(_key, run_alerts)) == sorted(map(_key, replay_alerts))
    # the planted GPU failure alerted: the comparison is about something
    assert SCENARIO.node_name(0) in {a.node for a in run_alerts}
