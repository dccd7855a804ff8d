"""An agent's summary (GET /summary, service/summary.py) and how a fleet reads it: the
summary's node-level signal columns become the rules' columns (signals/map.py), its GPU
scores are fused as given (pipeline/fusion.py), its XIDs are a sticky gauge (rules/xid.yaml).
The live agents-to-fleet test is tests/test_agent_fleet.py."""

from __future__ import annotations

import math
from pathlib import Path

import httpx
import numpy as np
import pytest
import yaml
from node_localhost import NodeLocalhost
from prometheus_client.parser import text_string_to_metric_families

from detector.config import Config, load_config, load_signal_rules
from detector.ingest.parse import split_series
from detector.ingest.remote_write import encode_write_request
from detector.model import ColumnLayout
from detector.pipeline.fusion import CommonMode, EntityMap, FusionParams, fuse, given_z
from detector.series import LabelRules, SeriesIndex
from detector.service import Daemon
from detector.service.server import Readiness, start_server
from detector.signals import SignalMap
from detector.sim import FailureSpec, Scenario, serve
from detector.sim.host import HostModel
from detector.sim.scenario import HostFault

STEP = 30.0
SCENARIO = Scenario(
    nodes=1,
    gpus=2,
    days=0.02,
    fault_trace=None,
    noisy_nodes=0,
    seed=3,
    failures=(FailureSpec("nvlink", node=0, gpu=1, at_s=450.0, lead_s=0.0, xid=74),),
)


class VirtualClock:
    def __init__(self, start: float) -> None:
        self.t = start

    def __call__(self) -> float:
        return self.t


def _agent_config(tmp_path: Path) -> Config:
    path = tmp_path / "agent.yaml"
    doc = {
        "mode": "agent",
        "node_name": SCENARIO.node_name(0),
        "scrape": {"interval_s": STEP, "timeout_s": 5.0, "jitter_fraction": 0.0},
        "kmsg": {"enabled": False},
    }
    path.write_text(yaml.safe_dump(doc))
    return load_config(path, env={})


async def test_an_agent_serves_its_node_signals_gpu_scores_and_last_xid_on_summary(
    tmp_path: Path,
) -> None:
    """GET /summary (version 1): every finite node-level column of a named rule of the
    agent's latest tick with its value, each GPU's score, each GPU's last XID (0: none; 74
    still there ticks after it); a fleet reading the summary sees that XID once, there."""
    clock = VirtualClock(SCENARIO.start)
    exporters = serve(SCENARIO, port=0, per_node_ports=True, clock=clock)
    [(dcgm, node_exp)] = exporters.urls.values()
    config = _agent_config(tmp_path)
    agent = Daemon(
        config, clock=clock, client=httpx.AsyncClient(transport=NodeLocalhost(dcgm, node_exp))
    )
    server = await start_server(
        config, agent.exporter, Readiness(STEP), port=0, summary=agent.summary
    )
    fleet_config = tmp_path / "fleet.yaml"
    fleet_config.write_text(
        yaml.safe_dump(
            {
                "targets": {
                    "static": [
                        {
                            "url": f"http://127.0.0.1:{server.port}/summary",
                            "node": SCENARIO.node_name(0),
                        }
                    ]
                }
            }
        )
    )
    fleet = Daemon(load_config(fleet_config, env={}), clock=clock)
    fleet_xids = []
    try:
        for _ in range(25):  # the XID at 450 s is seen at tick 16
            tick = await agent.tick()
            fleet_xids += [(e.node, e.gpu, e.xid) for e in (await fleet.tick()).xids]
            clock.t += STEP
        async with httpx.AsyncClient() as client:
            response = await client.get(f"http://127.0.0.1:{server.port}/summary")
    finally:
        await server.close()
        await agent.aclose()
        await fleet.aclose()
        exporters.close()

    assert 200 == response.status_code
    families = {f.name: f for f in text_string_to_metric_families(response.text)}
    assert [{"version": "1"}] == [s.labels for s in families["detector_summary_info"].samples]
    pipeline, layout = agent.pipeline, agent.pipeline.signal_map.layout
    expected = {}
    for col in np.flatnonzero((layout.gpu < 0) & np.isfinite(pipeline.values)).tolist():
        signal, _, _, series = pipeline.signal_map.column_names(col)
        if pipeline.signal_map.catalog.rule_named(signal) is None:
            continue
        expected[(signal, series >= 0)] = expected.get((signal, series >= 0), 0) + 1
    served = {}
    for s in families["detector_summary_signal"].samples:
        key = (s.labels["signal"], s.labels["series"] != "")
        served[key] = served.get(key, 0) + 1
        assert SCENARIO.node_name(0) == s.labels["node"]
    assert expected == served
    mem = [
        s
        for s in families["detector_summary_signal"].samples
        if s.labels["signal"] == "mem_available"
    ]
    assert 1 == len(mem)
    assert "node_memory_MemAvailable_bytes" == mem[0].labels["series"]
    gpu_scores = {s.labels["gpu"]: s.value for s in families["detector_summary_gpu_score"].samples}
    scores = tick.scores
    assert {
        label: float(v) for label, v in zip(scores.gpu_label, scores.gpu_score, strict=True)
    } == gpu_scores
    xids = [(s.labels["gpu"], s.value) for s in families["detector_summary_xid"].samples]
    assert [("0", 0.0), ("1", 74.0)] == xids
    assert [(SCENARIO.node_name(0), "1", 74)] == fleet_xids


def _fleet_map() -> tuple[SeriesIndex, SignalMap]:
    index = SeriesIndex(LabelRules())
    return index, SignalMap(load_signal_rules(), index)


def test_a_fleet_scores_a_summary_value_as_the_column_of_the_rule_it_names() -> None:
    """``detector_summary_signal{signal="oom_kills"}`` becomes an oom_kills column that reads
    the agent's value as it is (the agent rated the counter), with the rule's scorers."""
    index, signals = _fleet_map()
    keys = [
        'detector_summary_signal{node="n1",signal="oom_kills",series="node_vmstat_oom_kill"}',
        'detector_summary_signal{node="n1",signal="no_such_rule",series="x"}',
    ]
    columns = index.columns(keys, split_series)
    signals.sync()
    values = np.full(len(index), np.nan)
    values[columns] = [0.25, 7.0]
    first = signals.compute(0.0, values)
    second = signals.compute(30.0, values)  # a rate of an unchanged counter would be 0
    assert [("oom_kills", "n1", None, int(columns[0]))] == [
        signals.column_names(i) for i in range(len(signals))
    ]
    assert [0.25, 0.25] == [float(first[0]), float(second[0])]


def test_a_given_score_fuses_back_to_itself_and_adds_to_its_node() -> None:
    """A GPU whose only column is its agent's score 0.7 scores 0.7; its node, which also has
    evidence of its own, scores above both its parts; NaN and 0 give no evidence."""
    params = FusionParams()
    layout = ColumnLayout(
        signal=np.array([0, 1, 0]),
        node=np.array([0, 0, 1]),
        gpu=np.array([0, -1, 0]),
        cohort=np.zeros(3, dtype=np.int64),
        direction=np.zeros(3, dtype=np.int64),
        signal_names=("agent_gpu_score", "mem_available"),
        node_names=("a", "b"),
    )
    entities = EntityMap.build(layout, ("0", None, "0"))
    node_z = 6.0  # mem_available on node a, from a scorer
    scores = {"peers": np.array([0.0, node_z, 0.0])}
    applies = {"peers": np.array([False, True, False])}
    fused = fuse(
        scores, applies, np.ones(3), np.ones(3, dtype=bool), layout, entities, params,
        CommonMode(), 0.0, given=(np.array([0, 2]), np.array([0.7, math.nan])),
    )  # fmt: skip
    assert pytest.approx([0.7, 0.0]) == fused.gpu_score.tolist()
    alone = 1.0 - math.exp(-math.log1p(node_z - params.z0) / params.scale)
    assert fused.node_score[0] > max(0.7, alone)
    assert 0.0 == fused.node_score[1]
    assert [params.z0, params.z0] == given_z(np.array([0.0, math.nan]), params).tolist()


def test_host_faults_change_only_their_node() -> None:
    """An nfs fault multiplies the node's NFS response time by 20, a memory fault leaks its
    available memory down to ~5% of RAM; other nodes are bit-identical to a healthy run."""
    faults = (
        HostFault("nfs", node=1, at_s=0.0),
        HostFault("memory", node=2, at_s=0.0, ramp_s=30.0),
    )
    runs = []
    for sc in (
        Scenario(nodes=3, fault_trace=None),
        Scenario(nodes=3, fault_trace=None, host_faults=faults),
    ):
        host = HostModel(sc, np.random.default_rng(1), np.zeros(0, dtype=np.int64))
        phase, wobble = np.full(3, 2, dtype=np.int8), np.zeros(3)
        before = host.c["op_resp"].copy()
        out = host.step(sc.start + 60.0, phase, wobble, 0.1, 0.0, np.random.default_rng(2))
        runs.append((host.c["op_resp"] - before, out["node_memory_MemAvailable_bytes"]))
    (resp, mem), (resp_f, mem_f) = runs
    np.testing.assert_allclose(20.0 * resp[1], resp_f[1])
    assert np.array_equal(resp[[0, 2]], resp_f[[0, 2]])
    assert mem_f[2, 0] < 0.06 * 2.0 * 1024**4 < mem[2, 0]
    assert np.array_equal(mem[[0, 1]], mem_f[[0, 1]])


async def test_a_fleet_takes_remote_written_summaries_as_it_takes_scraped_ones(
    tmp_path: Path,
) -> None:
    """Summaries Prometheus scraped from the agents and remote-wrote (its instance and job
    labels added) become the same columns: the named rule's node-level column, and the GPU's
    given score, which the fleet's tick reports as that GPU's score."""
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump({"remote_write": {"enabled": True}}))
    fleet = Daemon(load_config(path, env={}), clock=lambda: 1000.0)
    series = []
    for i, node in enumerate(("n1", "n2")):
        target = (("instance", f"10.0.0.{i}:9108"), ("job", "gpu-failure-detector"))
        signal = (("node", node), ("series", "node_memory_MemAvailable_bytes"))
        series.append(
            (
                "detector_summary_signal",
                (*target, *signal, ("signal", "mem_available")),
                [(999_000, 5e11)],
            )
        )
        gpu = (*target, ("gpu", "0"), ("node", node))
        series.append(("detector_summary_gpu_score", gpu, [(999_000, 0.7 if i == 0 else 0.0)]))
    assert fleet.remote_write is not None
    fleet.remote_write.receive(
        encode_write_request(series),
        {"content-encoding": "snappy", "content-type": "application/x-protobuf"},
    )
    tick = await fleet.tick()
    await fleet.aclose()

    signals = fleet.pipeline.signal_map
    columns = sorted(signals.column_names(i)[:3] for i in range(len(signals)))
    assert [
        ("agent_gpu_score", "n1", "0"),
        ("agent_gpu_score", "n2", "0"),
        ("mem_available", "n1", None),
        ("mem_available", "n2", None),
    ] == [c for c in columns if not c[0].startswith("health_")]
    scores = tick.scores
    by_gpu = {
        (scores.node_names[int(n)], label): float(v)
        for n, label, v in zip(scores.gpu_node, scores.gpu_label, scores.gpu_score, strict=True)
    }
    assert pytest.approx({("n1", "0"): 0.7, ("n2", "0"): 0.0}) == by_gpu
