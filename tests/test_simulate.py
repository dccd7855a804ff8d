"""The simulated cluster: exporter-faithful pages, determinism, failures and ground truth."""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import httpx
import numpy as np
import pytest
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as parse_openmetrics,
)
from prometheus_client.parser import text_string_to_metric_families as parse_text

from detector.cli.main import main
from detector.config.load import load_config
from detector.errors import ConfigError
from detector.ingest.dumps.read import read_dump
from detector.loop import TickLoop
from detector.model import FloatArray, Frame
from detector.replay.run import run_replay, simulated_frames
from detector.series.frame import frames_from_batches
from detector.series.index import SeriesIndex
from detector.series.labels import LabelRules
from detector.sim import FailureSpec, JobSpec, Scenario, SimulatedCluster, serve, write_dump
from detector.sim.catalog import DCGM_FIELDS, parse_dcgm_csv
from detector.sim.cluster import resolve_rates
from detector.sim.trace import DEFAULT_RATES, FAULT_TRACE, derive_rates
from detector.sim.workload import CHECKPOINT, TRAIN

HOUR = 3600.0


def small(**overrides: object) -> Scenario:
    base: dict[str, object] = {
        "nodes": 4, "gpus": 8, "days": 0.25, "seed": 3, "dcgm_fields": "all", "failure_count": 0,
    }  # fmt: skip
    base.update(overrides)
    return Scenario(**base)  # type: ignore[arg-type]


def matrix(cluster: SimulatedCluster) -> tuple[FloatArray, FloatArray]:
    frames = list(cluster.frames())
    return np.array([t for t, _ in frames]), np.vstack([v for _, v in frames])


def columns(cluster: SimulatedCluster, metric: str, **labels: str) -> list[int]:
    return [
        i for i, (name, labs) in enumerate(cluster.series())
        if name == metric and all(dict(labs).get(k) == v for k, v in labels.items())
    ]  # fmt: skip


def test_dcgm_page_is_valid_exposition_with_real_fields_and_labels() -> None:
    """The DCGM page parses, carries every field of the CSV with its type, and real labels."""
    cluster = SimulatedCluster(small())
    t, values = next(iter(cluster.frames()))
    dcgm, _ = cluster.exposition("node-02", t, values)
    families = {f.name: f for f in parse_text(dcgm)}
    windowed = "DCGM_EXP_XID_ERRORS_COUNT"  # only exposed after an XID
    expected = {name: kind for name, kind, _, _ in DCGM_FIELDS if name != windowed}
    assert expected == {name: fam.type for name, fam in families.items()}
    sample = families["DCGM_FI_DEV_GPU_TEMP"].samples[0]
    assert {"gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname",
            "DCGM_FI_DRIVER_VERSION"} <= set(sample.labels)  # fmt: skip
    assert ("NVIDIA B200", "node-02") == (sample.labels["modelName"], sample.labels["Hostname"])
    assert 8 == len(families["DCGM_FI_DEV_GPU_TEMP"].samples)
    assert 'DCGM_FI_DEV_RETIRED_SBE{gpu="0"' in dcgm
    assert "} 9223372036854775794\n" in dcgm  # the blank sentinel, written as dcgm-exporter does


def test_default_fields_leave_out_the_disabled_ones() -> None:
    """dcgm_fields="default" exposes only the fields the shipped CSV enables."""
    cluster = SimulatedCluster(small(dcgm_fields="default"))
    names = {name for name, _ in cluster.series() if name.startswith("DCGM_")}
    assert {name for name, _, enabled, _ in DCGM_FIELDS if enabled} == names


def test_newer_builds_use_lowercase_hostname() -> None:
    """hostname_label="hostname" renames the node label like newer dcgm-exporter builds."""
    cluster = SimulatedCluster(small(hostname_label="hostname"))
    t, values = next(iter(cluster.frames()))
    dcgm, _ = cluster.exposition("node-01", t, values)
    assert 'hostname="node-01"' in dcgm
    assert "Hostname=" not in dcgm


def test_job_label_names_each_nodes_job_on_its_node_exporter_series() -> None:
    """job_label adds the node's job to its node-exporter series (a target label: not on the
    exporter's page, not on DCGM's series); a spare node and the default get none."""
    jobs = (JobSpec("a", (0, 1)), JobSpec("b", (2,)))  # node-04 is a spare
    cluster = SimulatedCluster(small(jobs=jobs, job_label="training_job"))
    node_series = [dict(labs) for name, labs in cluster.series() if name.startswith("node_")]
    by_node = {labs["instance"].split(":")[0]: labs.get("training_job") for labs in node_series}
    assert {"node-01": "a", "node-02": "a", "node-03": "b", "node-04": None} == by_node
    assert not [1 for name, labs in cluster.series() if name.startswith("DCGM") and
                "training_job" in dict(labs)]  # fmt: skip
    t, values = next(iter(cluster.frames()))
    assert "training_job" not in cluster.exposition("node-01", t, values)[1]
    default = SimulatedCluster(small(jobs=jobs))
    assert not [1 for _, labs in default.series() if "training_job" in dict(labs)]
    with pytest.raises(ConfigError, match="job_label"):
        small(job_label="job")


def test_job_label_runs_sends_each_run_under_its_own_job_id() -> None:
    """job_label_runs: a node's series (DCGM's too) carry "<job>-<run>" from each run of its
    job on, none before its first; every tick sends one copy of each series, with the values
    the cluster without relabelling sends."""
    jobs = (JobSpec("a", (0, 1)), JobSpec("b", (2,)))
    plain = SimulatedCluster(small(jobs=jobs, days=1.0, job_label="training_job"))
    cluster = SimulatedCluster(
        small(jobs=jobs, days=1.0, job_label="training_job", job_label_runs=True)
    )
    series = cluster.series()
    ids = {dict(labs).get("training_job") for name, labs in series if name.startswith("DCGM")}
    runs = cluster.workload.run
    assert int(runs[0].max()) >= 2  # a day of 4-14 h runs
    assert {None, "a-1", "a-2", "b-1"} <= ids
    base = [(name, tuple(kv for kv in labs if kv[0] != "training_job")) for name, labs in series]
    for k, ((_, want), (_, got)) in enumerate(zip(plain.frames(), cluster.frames(), strict=True)):
        sent = np.flatnonzero(~np.isnan(got))
        keys = [base[i] for i in sent.tolist()]
        assert len(set(keys)) == len(keys)  # one copy of each series
        assert np.array_equal(np.sort(want[~np.isnan(want)]), np.sort(got[sent]))
        if k in (0, runs.shape[1] - 1):
            node_01 = {dict(series[i][1]).get("training_job") for i in sent.tolist()
                       if ("Hostname", "node-01") in series[i][1]}  # fmt: skip
            run = int(runs[0, k])
            assert {None if run == 0 else f"a-{run}"} == node_01
    with pytest.raises(ConfigError, match="job_label_runs"):
        small(job_label_runs=True)


def test_node_page_is_a_realistic_node_exporter_subset() -> None:
    """The node page parses, has NFS, mountstats, InfiniBand per port and ~100-200 series."""
    cluster = SimulatedCluster(small())
    t, values = next(iter(cluster.frames()))
    _, page = cluster.exposition("node-03", t, values)
    families = {f.name: f for f in parse_text(page)}
    series = sum(len(f.samples) for f in families.values())
    assert 100 <= series <= 200
    backlog = families["node_mountstats_nfs_transport_backlog_queue"]
    assert "counter" == backlog.type
    assert {"export", "mountaddr", "protocol", "transport"} == set(backlog.samples[0].labels)
    state = families["node_infiniband_state_id"].samples
    ports = {(s.labels["device"], s.labels["port"]) for s in state}
    assert 8 == len(ports)
    assert "node_nfs_rpc_retransmissions" in families


def test_a_gpu_that_fell_off_the_bus_returns_without_a_second_xid() -> None:
    """XID 79: the GPU's series vanish until the repair ends; it comes back with the XID gauge
    at 0, so the replay's XID extractor finds one failure, not a second at the repair's end
    (it did while the gauge came back holding 79)."""
    spec = FailureSpec("pcie", node=1, gpu=3, at_s=HOUR, lead_s=600.0, xid=79)
    cluster = SimulatedCluster(small(failures=(spec,), days=1.0, xid45_on_teardown=False))
    start = cluster.scenario.start
    assert cluster.failures[0].vanish
    assert cluster.failures[0].repair_end < cluster.scenario.duration_s
    index = SeriesIndex()
    pipeline = TickLoop.from_config(load_config(None, env={}), index)
    result = run_replay(pipeline, simulated_frames(cluster, index), events=cluster.events())
    xid79 = [f for f in result.failures if f.xid == 79]
    assert [("node-02", "3")] == [(f.node, f.gpu) for f in xid79]
    assert abs(xid79[0].time - (start + HOUR)) < 60


def test_same_seed_same_telemetry_and_events() -> None:
    """Two clusters from one scenario are identical; another seed differs."""
    one, two = SimulatedCluster(small(failure_count=2)), SimulatedCluster(small(failure_count=2))
    other = SimulatedCluster(small(failure_count=2, seed=4))
    assert one.series() == two.series()
    assert one.events() == two.events()
    np.testing.assert_array_equal(matrix(one)[1], matrix(two)[1])
    assert not np.array_equal(matrix(one)[1], matrix(other)[1], equal_nan=True)


def test_xid_gauge_takes_the_code_and_keeps_it_until_the_repair() -> None:
    """An ECC failure sets its GPU's sticky XID gauge to the final code until its repair
    ends; the repaired GPU comes back from a reset, where DCGM's last XID starts at 0."""
    spec = FailureSpec("ecc", node=1, gpu=3, at_s=2 * HOUR, lead_s=1800.0, xid=95)
    cluster = SimulatedCluster(small(failures=(spec,), xid45_on_teardown=False))
    times, values = matrix(cluster)
    gauge = values[:, columns(cluster, "DCGM_FI_DEV_XID_ERRORS", Hostname="node-02", gpu="3")[0]]
    start = cluster.scenario.start
    repaired = start + cluster.failures[0].repair_end
    assert times[-1] > repaired  # the scenario covers the repair
    assert np.all(gauge[times < start + 2 * HOUR] == 0)
    assert np.all(gauge[(times > start + 2 * HOUR + 60) & (times < repaired)] == 95)
    assert np.all(gauge[times >= repaired] == 0)
    sbe_col = columns(cluster, "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", Hostname="node-02", gpu="3")
    sbe = values[:, sbe_col[0]]
    during = (times > start + 1.5 * HOUR) & (times < start + 2 * HOUR)
    assert sbe[during][-1] - sbe[during][0] > 100  # the precursor: a surge of single-bit errors
    assert [48, 95] == [e.xid for e in cluster.events()]


def test_xid79_gpu_falls_off_the_bus_and_its_series_vanish() -> None:
    """After XID 79 every series of that GPU is NaN and gone from the page; peers remain."""
    spec = FailureSpec("pcie", node=0, gpu=5, at_s=3 * HOUR, lead_s=HOUR)
    cluster = SimulatedCluster(small(failures=(spec,)))
    times, values = matrix(cluster)
    mine = columns(cluster, "DCGM_FI_DEV_GPU_TEMP", Hostname="node-01", gpu="5")[0]
    after = times >= cluster.scenario.start + 3 * HOUR
    assert np.all(np.isnan(values[after, mine]))
    assert not np.isnan(values[~after, mine]).any()
    replay_col = columns(cluster, "DCGM_FI_DEV_PCIE_REPLAY_COUNTER", gpu="5", Hostname="node-01")
    replay = values[:, replay_col[0]]
    assert replay[~after][-1] - replay[~after][0] > 20
    k = int(np.flatnonzero(after)[0])
    dcgm, _ = cluster.exposition("node-01", float(times[k]), values[k])
    assert 'gpu="5"' not in dcgm
    assert 'gpu="4"' in dcgm
    assert 79 in {e.xid for e in cluster.events() if e.gpu == "5" and e.node == "node-01"}


def test_straggler_runs_slower_than_its_peers_before_failing() -> None:
    """A straggler GPU's SM clock drops below its node peers' before XID 43/13."""
    spec = FailureSpec("straggler", node=0, gpu=2, at_s=4 * HOUR, lead_s=HOUR)
    cluster = SimulatedCluster(small(failures=(spec,), jobs=None))
    times, values = matrix(cluster)
    clocks = values[:, columns(cluster, "DCGM_FI_DEV_SM_CLOCK", Hostname="node-01")]
    start = cluster.scenario.start
    late = (times > start + 3.8 * HOUR) & (times < start + 4 * HOUR)
    peers = np.delete(clocks[late], 2, axis=1).mean(axis=1)
    assert np.all(clocks[late, 2] < peers - 150)


def test_dcgm_health_fails_after_a_hardware_xid_not_after_an_application_one() -> None:
    """After its XID, an ECC failure's GPU reports DCGM health FAIL (20) until repaired; a
    straggler's (XID 43/13, application faults: rules/xid.yaml) keeps reporting PASS (0),
    and so does every other GPU."""
    specs = (
        FailureSpec("ecc", node=0, gpu=1, at_s=1 * HOUR, lead_s=600.0),
        FailureSpec("straggler", node=2, gpu=3, at_s=1 * HOUR, lead_s=600.0),
    )
    cluster = SimulatedCluster(small(failures=specs, jobs=None))
    times, values = matrix(cluster)
    health = values[:, columns(cluster, "DCGM_EXP_GPU_HEALTH_STATUS")]
    repaired = min(f.repair_end for f in cluster.failures)
    after = (times > cluster.scenario.start + 1.1 * HOUR) & (
        times < cluster.scenario.start + repaired
    )
    assert after.sum() > 10
    ecc = columns(cluster, "DCGM_EXP_GPU_HEALTH_STATUS", Hostname="node-01", gpu="1")
    [ecc_col] = [columns(cluster, "DCGM_EXP_GPU_HEALTH_STATUS").index(c) for c in ecc]
    assert np.all(health[after, ecc_col] == 20.0)
    assert np.all(np.delete(health, ecc_col, axis=1) == 0.0)


def test_nodes_of_a_job_move_together() -> None:
    """Training steps are synchronous: power of two nodes of one job correlates more with
    each other than with a node of another job."""
    jobs = (JobSpec("a", (0, 1)), JobSpec("b", (2, 3)))
    cluster = SimulatedCluster(small(jobs=jobs, days=0.5, noisy_nodes=0))
    _, values = matrix(cluster)
    power = values[:, columns(cluster, "DCGM_FI_DEV_POWER_USAGE")].reshape(-1, 4, 8).mean(axis=2)
    training = (cluster.workload.phase == TRAIN).all(axis=0)
    corr = np.corrcoef(power[training].T)
    assert corr[0, 1] > 0.8
    assert corr[0, 1] > corr[0, 2] + 0.3


def test_checkpoint_raises_nfs_rtt_on_every_node() -> None:
    """During any job's checkpoint, NFS RPC response time per op rises on all nodes."""
    cluster = SimulatedCluster(small(nodes=6, days=0.5))
    _, values = matrix(cluster)
    ops = "node_mountstats_nfs_operations_"
    resp = values[:, columns(cluster, ops + "response_time_seconds_total", operation="GETATTR")]
    reqs = values[:, columns(cluster, ops + "requests_total", operation="GETATTR")]
    rtt = np.diff(resp, axis=0) / np.maximum(np.diff(reqs, axis=0), 1)
    busy = cluster.workload.nfs_write[1:] > 0
    checkpointing = (cluster.workload.phase == CHECKPOINT).any(axis=0)[1:]
    assert busy.any()
    assert np.array_equal(busy, checkpointing)
    assert np.all(np.median(rtt[busy], axis=0) > 1.5 * np.median(rtt[~busy], axis=0))


def test_write_dump_gives_openmetrics_and_events_jsonl(tmp_path: Path) -> None:
    """The dump parses as OpenMetrics with timestamps; events lines follow the contract."""
    spec = FailureSpec("gsp", node=1, gpu=0, at_s=0.2 * HOUR)
    scenario = small(nodes=2, days=0.02, failures=(spec,), dcgm_fields="default")
    dump, events = tmp_path / "sim.om", tmp_path / "events.jsonl"
    samples = write_dump(scenario, dump, events)
    families = list(parse_openmetrics(dump.read_text()))
    parsed = [s for f in families for s in f.samples]
    assert samples == len(parsed)
    assert all(s.timestamp is not None for s in parsed)
    lines = [json.loads(line) for line in events.read_text().splitlines()]
    assert {"time": lines[0]["time"], "node": "node-02", "gpu": "0", "xid": 119} == {
        k: lines[0][k] for k in ("time", "node", "gpu", "xid")
    }
    assert all({"time", "node", "gpu", "xid"} <= set(line) for line in lines)
    assert all(isinstance(line["xid"], int) and line["time"] > 1e9 for line in lines)


def test_demo_has_a_dozen_failures_of_several_types() -> None:
    """Scenario.demo(): 63 x 8, 3 days, seed 7, ~12 failures of >= 4 kinds, XID 45 floods."""
    demo = Scenario.demo()
    cluster = SimulatedCluster(demo)
    assert (63, 8, 3.0, 7) == (demo.nodes, demo.gpus, demo.days, demo.seed)
    assert 10 <= len(cluster.failures) <= 14
    assert len({f.kind for f in cluster.failures}) >= 4
    assert any(f.lead_s == 0 for f in cluster.failures)
    assert any(f.lead_s > 0 for f in cluster.failures)
    xids = [e.xid for e in cluster.events()]
    assert xids.count(45) > 100
    assert 79 in xids
    assert len({f.node for f in cluster.failures}) < len(cluster.failures)  # a repeat offender


def test_trace_rates_are_derived_from_the_real_fault_trace() -> None:
    """derive_rates on the InfiniteHBD trace reproduces the built-in default constants."""
    rates = derive_rates(FAULT_TRACE)
    assert DEFAULT_RATES.faults_simulated == rates.faults_simulated
    assert pytest.approx(DEFAULT_RATES.per_node_day) == rates.per_node_day
    assert pytest.approx(DEFAULT_RATES.mix) == rates.mix
    assert pytest.approx(DEFAULT_RATES.offender_shape, abs=1e-3) == rates.offender_shape


def test_auto_rates_come_from_the_packaged_trace_unless_the_variable_names_another(
    tmp_path: Path,
) -> None:
    """``fault_trace: auto`` reads the trace shipped with the package (nothing beside the
    clone); $DETECTOR_FAULT_TRACE replaces it with another trace file."""
    assert derive_rates(FAULT_TRACE) == resolve_rates("auto", environ={})
    records = json.loads(FAULT_TRACE.read_text())
    own = tmp_path / "own_trace.json"
    own.write_text(json.dumps(records[: len(records) // 2]))
    expected = derive_rates(own)
    assert expected != derive_rates(FAULT_TRACE)
    assert expected == resolve_rates("auto", environ={"DETECTOR_FAULT_TRACE": str(own)})


def test_a_fault_trace_variable_naming_no_file_is_an_error_naming_it(tmp_path: Path) -> None:
    """$DETECTOR_FAULT_TRACE naming a missing file fails with the variable and the path, rather
    than silently simulating other rates."""
    missing = tmp_path / "trace.json"
    with pytest.raises(
        ConfigError, match="^" + re.escape(f"DETECTOR_FAULT_TRACE: {missing}: cannot read")
    ):
        resolve_rates("auto", environ={"DETECTOR_FAULT_TRACE": str(missing)})


def test_embedded_field_table_matches_dcgm_exporter_csvs(real_data: Path) -> None:
    """The embedded DCGM table is the real default-counters.csv; the DCP list is a subset."""
    dcgm = real_data / "exporters/dcgm"
    assert DCGM_FIELDS == parse_dcgm_csv(dcgm / "default-counters.csv")
    assert set(parse_dcgm_csv(dcgm / "dcp-metrics-included.csv")) <= set(DCGM_FIELDS)


def test_lost_scrapes_blank_a_whole_target_and_nothing_else() -> None:
    """scrape_loss blanks every series of a lost target (a node's dcgm- or node-exporter) for
    that tick, about the share asked for, and leaves every other value as it was."""
    base = SimulatedCluster(small(days=0.5))
    lossy = SimulatedCluster(small(days=0.5, scrape_loss=0.05))
    _, clean = matrix(base)
    _, lost = matrix(lossy)
    target = [f"{dict(labs)['instance']}" for _, labs in base.series()]
    names = sorted(set(target))
    of = np.array([names.index(t) for t in target])
    blanked = np.isnan(lost) & ~np.isnan(clean)
    per_target = np.zeros((lost.shape[0], len(names)), dtype=bool)
    for k, name in enumerate(names):
        cols = of == k
        whole = blanked[:, cols] | np.isnan(clean[:, cols])
        hit = blanked[:, cols].any(axis=1)
        assert whole[hit].all(), f"{name}: a lost scrape blanks all of its series"
        per_target[:, k] = hit
    assert 0.03 < per_target.mean() < 0.07
    keep = ~np.isnan(lost)
    np.testing.assert_array_equal(lost[keep], clean[keep])


def test_node_exporter_on_a_slower_cadence_reports_every_other_tick() -> None:
    """node_scrape_every=2: node-exporter's series are present on even ticks only, DCGM's on
    every tick, and the values present are the lossless cluster's."""
    _, clean = matrix(SimulatedCluster(small()))
    _, mixed = matrix(SimulatedCluster(small(node_scrape_every=2)))
    node_cols = [i for i, (_, labs) in enumerate(SimulatedCluster(small()).series())
                 if dict(labs)["job"] == "node-exporter"]  # fmt: skip
    gpu_cols = np.setdiff1d(np.arange(clean.shape[1]), node_cols)
    assert np.isnan(mixed[1::2][:, node_cols]).all()
    assert not np.isnan(mixed[0::2][:, node_cols]).all(axis=0).any()
    np.testing.assert_array_equal(mixed[:, gpu_cols], clean[:, gpu_cols])
    keep = ~np.isnan(mixed)
    np.testing.assert_array_equal(mixed[keep], clean[keep])


def dcgm_columns(cluster: SimulatedCluster) -> dict[str, list[int]]:
    """Per node, the columns its dcgm-exporter serves (fields and windowed XID counts)."""
    out: dict[str, list[int]] = {}
    for i, (_, labs) in enumerate(cluster.series()):
        lab = dict(labs)
        if lab["job"] == "dcgm-exporter":
            out.setdefault(lab["Hostname"], []).append(i)
    return out


def served_collection(served: FloatArray, clean: FloatArray) -> list[int]:
    """Per tick, which tick's true values ``served`` equals (k or k-1); -1 for neither."""
    same = [np.array_equal(served[k], clean[k], equal_nan=True) for k in range(len(served))]
    back = [k > 0 and np.array_equal(served[k], clean[k - 1], equal_nan=True)
            for k in range(len(served))]  # fmt: skip
    pairs = enumerate(zip(same, back, strict=True))
    return [k if now else k - 1 if prev else -1 for k, (now, prev) in pairs]


def test_dcgm_cache_repeats_a_nodes_values_between_its_collections() -> None:
    """dcgm_collect_every=2: each node's DCGM values (incl. windowed XID counts) are the true
    ones on its collection ticks and repeat them on the next, at a phase per node; node-exporter
    and every value on a collection tick are the uncached cluster's."""
    spec = FailureSpec("ecc", node=1, gpu=3, at_s=2 * HOUR, lead_s=1800.0, xid=95)
    scenario = small(nodes=8, failures=(spec,))
    plain = SimulatedCluster(scenario)
    cached = SimulatedCluster(replace(scenario, dcgm_collect_every=2))
    _, clean = matrix(plain)
    _, served = matrix(cached)
    per_node = dcgm_columns(plain)
    phases = set()
    for node, cols in per_node.items():
        seen = served_collection(served[:, cols], clean[:, cols])
        phase = seen[1]  # tick 1 shows tick 0's collection when the phase is 0, else its own
        expect = [0] + [k - (k - phase) % 2 for k in range(1, len(seen))]
        assert seen == expect, node
        phases.add(phase)
    assert phases == {0, 1}, "nodes collect at phases of their own"
    xid_counts = columns(plain, "DCGM_EXP_XID_ERRORS_COUNT")
    assert xid_counts, "the windowed counts exist in this scenario"
    dcgm = np.concatenate(list(per_node.values()))
    assert np.isin(xid_counts, dcgm).all()
    node_cols = np.setdiff1d(np.arange(clean.shape[1]), dcgm)
    np.testing.assert_array_equal(served[:, node_cols], clean[:, node_cols])


def test_stale_dcgm_scrape_serves_the_previous_collection_then_catches_up() -> None:
    """dcgm_stale_share=0.2: per node and tick, about a fifth of DCGM scrapes show the previous
    tick's values, the others the tick's own; nothing else changes."""
    plain = SimulatedCluster(small(days=0.5))
    _, clean = matrix(plain)
    _, served = matrix(SimulatedCluster(small(days=0.5, dcgm_stale_share=0.2)))
    per_node = dcgm_columns(plain)
    stale = []
    for cols in per_node.values():
        seen = served_collection(served[:, cols], clean[:, cols])
        assert -1 not in seen
        stale += [s == k - 1 for k, s in enumerate(seen)]
    assert 0.15 < np.mean(stale) < 0.25
    node_cols = np.setdiff1d(np.arange(clean.shape[1]), np.concatenate(list(per_node.values())))
    np.testing.assert_array_equal(served[:, node_cols], clean[:, node_cols])


def test_gpu_off_the_bus_stays_nan_through_the_dcgm_cache() -> None:
    """A GPU that fell off the bus is NaN from its node's first collection after it vanished
    and on every tick after: holding values never brings one back."""
    spec = FailureSpec("pcie", node=0, gpu=5, at_s=3 * HOUR, lead_s=HOUR)
    cluster = SimulatedCluster(small(failures=(spec,), dcgm_collect_every=3))
    times, values = matrix(cluster)
    mine = values[:, columns(cluster, "DCGM_FI_DEV_GPU_TEMP", Hostname="node-01", gpu="5")[0]]
    gone = int(np.flatnonzero(times >= cluster.scenario.start + 3 * HOUR)[0])
    assert not np.isnan(mine[:gone]).any()
    assert np.isnan(mine[gone + 2 :]).all()


def test_bad_scenario_field_is_named() -> None:
    """An invalid scenario raises ConfigError naming the field."""
    with pytest.raises(ConfigError, match="dcgm_fields"):
        Scenario(dcgm_fields="some")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="scrape_loss"):
        Scenario(scrape_loss=1.0)
    with pytest.raises(ConfigError, match="dcgm_collect_every"):
        Scenario(dcgm_collect_every=0)
    with pytest.raises(ConfigError, match="dcgm_stale_share"):
        Scenario(dcgm_stale_share=-0.1)
    with pytest.raises(ConfigError, match=r"failures\[0\]"):
        Scenario(nodes=2, failures=(FailureSpec("ecc", node=5, gpu=0, at_s=1.0),))
    with pytest.raises(ConfigError, match="shared_gpus"):
        Scenario(gpus=4, shared_nodes=1, shared_gpus=4)
    with pytest.raises(ConfigError, match="shared_nodes"):
        Scenario(nodes=2, shared_nodes=3)


def _pods(page: str, metric: str = "DCGM_FI_DEV_GPU_UTIL") -> dict[str, str | None]:
    """GPU -> the pod label of its ``metric`` sample on a dcgm page."""
    samples = {f.name: f for f in parse_text(page)}[metric].samples
    return {sample.labels["gpu"]: sample.labels.get("pod") for sample in samples}


def test_a_shared_nodes_last_gpus_run_jobs_of_their_own() -> None:
    """On a shared node the side GPUs follow their own jobs: their own pods (none while idle)
    and their own load, while the node's other GPUs run the node's job."""
    scenario = small(nodes=4, days=0.5, shared_nodes=1, job_label=None)
    cluster = SimulatedCluster(scenario)
    (node,) = cluster.workload.shared.tolist()
    name = scenario.node_name(node)
    util = {g: columns(cluster, "DCGM_FI_DEV_GPU_UTIL", Hostname=name, gpu=str(g)) for g in (0, 7)}
    seen = {"side busy, node's job": 0, "side idle": 0}
    for k, (t, values) in enumerate(cluster.frames()):
        pods = _pods(cluster.exposition(name, t, values)[0])
        main, side = int(cluster.workload.phase[node, k]), int(cluster.workload.side_run[0, k])
        assert pods["0"] == pods["5"]  # the node's job on the first six
        assert pods["6"] == pods["7"] == (f"batch-{name}-{side}" if side else None)
        if side and main == TRAIN and int(cluster.workload.side_phase[0, k]) == TRAIN:
            assert pods["0"] is not None
            assert pods["0"] != pods["7"]
            seen["side busy, node's job"] += 1
        if not side and main == TRAIN:
            assert values[util[7]][0] < 0.2 * values[util[0]][0]  # idle beside a busy job
            seen["side idle"] += 1
    assert min(seen.values()) > 0, seen


def test_a_dump_of_shared_nodes_spells_each_gpus_pod_and_replays_it(tmp_path: Path) -> None:
    """``write_dump`` writes the shared nodes' GPU series under the pod of each sample, and a
    replay of that dump gives those GPUs the teams a simulated replay gives them."""
    scenario = small(nodes=4, days=0.25, shared_nodes=1, dcgm_fields="default")
    dump, events = tmp_path / "sim.om", tmp_path / "events.jsonl"
    write_dump(scenario, dump, events)
    text = dump.read_text()
    assert 'namespace="batch",pci_bus_id=' in text
    assert 'gpu="7",instance=' in text  # unlabelled while idle too

    def from_dump(index: SeriesIndex) -> Iterator[Frame]:
        return frames_from_batches(read_dump(dump, index, cache=False), lambda: len(index))

    def simulated(index: SeriesIndex) -> Iterator[Frame]:
        return simulated_frames(SimulatedCluster(scenario), index)

    replayed, direct = _teams(from_dump), _teams(simulated)
    # a node's GPUs, the nodes' teams per tick: side GPUs idle; in a job, in another
    assert {len(groups) for groups in direct} >= {1, 3}
    assert replayed == direct


Teams = frozenset[frozenset[tuple[str, int]]]


def _teams(
    frames_of: Callable[[SeriesIndex], Iterator[Frame]], env: dict[str, str] | None = None
) -> list[Teams]:
    """Per tick of a replay, the GPUs of equal team (team ids differ between replays, groups
    not); ``env``: config overrides."""
    config = load_config(None, env=env)
    index = SeriesIndex(rules=LabelRules.from_config(config.labels))
    pipeline = TickLoop.from_config(config, index)
    out = []
    for frame in frames_of(index):
        pipeline.step(frame)
        layout = pipeline.pipeline.signal_map.layout
        temp = np.flatnonzero(layout.signal == layout.signal_names.index("gpu_temp"))
        groups: dict[int, set[tuple[str, int]]] = {}
        for col in temp.tolist():
            gpu = (layout.node_names[layout.node[col]], int(layout.gpu[col]))
            groups.setdefault(int(layout.team[col]), set()).add(gpu)
        out.append(frozenset(frozenset(g) for g in groups.values()))
    return out


def test_a_job_with_a_pod_per_gpu_is_one_workload_on_each_node() -> None:
    """``Scenario.pod_per_gpu``: each GPU of a node in a job runs its own pod (a rank), on
    the pages and in a simulated replay; the pods of one job are one workload, so a node's
    GPUs stay one team (``labels.gpu_workload_pod_owner``), eight without it."""
    scenario = small(nodes=4, days=0.1, pod_per_gpu=True, dcgm_fields="default")
    cluster = SimulatedCluster(scenario)
    name = scenario.node_name(0)
    busy = [
        (k, t, values)
        for k, (t, values) in enumerate(cluster.frames())
        if int(cluster.workload.job[0, k]) >= 0
    ]
    assert busy
    k, t, values = busy[-1]
    pods = _pods(cluster.exposition(name, t, values)[0])
    rank = int(cluster.workload.rank[0, k])
    job = cluster.workload.job_names[int(cluster.workload.job[0, k])]
    assert pods == {str(g): f"{job}-worker-{rank * 8 + g}" for g in range(8)}

    def simulated(index: SeriesIndex) -> Iterator[Frame]:
        return simulated_frames(SimulatedCluster(scenario), index)

    def per_node(teams: Teams) -> list[int]:
        """The sizes of the GPU peer groups: a team's GPUs on one node."""
        return sorted(
            Counter(node for node, _ in team)[node]
            for team in teams
            for node in {n for n, _ in team}
        )

    one_team = [per_node(teams) for teams in _teams(simulated)]
    assert [8] * 4 in one_team  # every node's GPUs one team each
    assert all(set(sizes) <= {8} for sizes in one_team)
    own = {"DETECTOR_LABELS__GPU_WORKLOAD_POD_OWNER": "false"}
    assert [1] * 32 in [per_node(teams) for teams in _teams(simulated, own)]


@pytest.mark.parametrize("per_node_ports", [False, True])
def test_live_exporters_serve_every_node(per_node_ports: bool) -> None:
    """serve() answers each node's DCGM and node pages (paths or ports); 404 otherwise."""
    exporters = serve(small(nodes=2), port=0, per_node_ports=per_node_ports, speed=600.0)
    try:
        assert {"node-01", "node-02"} == set(exporters.urls)
        dcgm_url, node_url = exporters.urls["node-02"]
        with httpx.Client() as client:
            dcgm = client.get(dcgm_url)
            node = client.get(node_url)
            missing = client.get(httpx.URL(dcgm_url).copy_with(path="/nope"))
        assert (200, 200, 404) == (dcgm.status_code, node.status_code, missing.status_code)
        assert any(f.name == "DCGM_FI_DEV_SM_CLOCK" for f in parse_text(dcgm.text))
        assert any(f.name == "node_load1" for f in parse_text(node.text))
    finally:
        exporters.close()


def test_a_scenario_shorter_than_the_smoothing_kernel_runs() -> None:
    """Ten ticks (shorter than the 20-tick step-time smoothing) simulate without error."""

    from detector.sim import Scenario, SimulatedCluster

    scenario = replace(Scenario(), nodes=2, gpus=2, days=10 * 30 / 86400)
    frames = list(SimulatedCluster(scenario).frames())
    assert 10 == len(frames)


def test_simulate_writes_a_pod_per_gpu_when_asked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``detector simulate --pod-per-gpu``: the dump's GPU series carry a rank's pod each,
    and replaying it finds every node's GPUs in one job (no node split by workloads)."""
    dump, events = tmp_path / "sim.om", tmp_path / "sim.jsonl"
    args = ["simulate", "--nodes", "2", "--days", "0.05", "--pod-per-gpu"]
    assert main([*args, "--out", str(dump), "--events", str(events)]) == 0
    pods = {
        (labels["Hostname"], labels["gpu"], labels["pod"])
        for family in parse_text(dump.read_text().replace("# EOF\n", ""))
        if family.name == "DCGM_FI_DEV_GPU_TEMP"
        for labels in (sample.labels for sample in family.samples)
        if "pod" in labels
    }
    per_gpu = {(node, gpu) for node, gpu, _ in pods}
    assert len(per_gpu) == 16  # every GPU of both nodes ran a pod
    assert len({pod for _, _, pod in pods}) >= 16  # one each, not one per node
    capsys.readouterr()
    assert main(["replay", str(dump), "--events", str(events)]) == 0
    assert "GPU workloads" not in capsys.readouterr().out
