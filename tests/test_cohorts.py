"""Cohorts from labels (``labels.cohort_labels``): which nodes a node's node-level signals are
compared with. A node's cohort is the first configured label any of its series carries."""

from __future__ import annotations

import csv
import gzip
import re
from pathlib import Path

import numpy as np
import pytest

from detector.cli.main import main
from detector.config.load import load_config
from detector.config.rules import load_signal_rules
from detector.loop import TickLoop
from detector.model import Frame, Labels
from detector.pipeline.tick import Pipeline
from detector.series.index import SeriesIndex
from detector.series.labels import LabelRules
from detector.signals.map import SignalMap

T0 = 1_700_000_000.0
STEP = 30.0
MEM = "node_memory_MemAvailable_bytes"


def node_series(node: str, **labels: str) -> Labels:
    return (("instance", f"{node}:9100"), *labels.items())


def gpu_series(node: str) -> Labels:
    return (("Hostname", node), ("gpu", "0"), ("UUID", f"GPU-{node}"))


def cohort_of(signals: SignalMap, node: str) -> set[str]:
    """The cohort names of every column of ``node``."""
    layout = signals.layout
    node_id = layout.node_names.index(node)
    return {signals.cohort_names[c] for c in layout.cohort[layout.node == node_id]}


def send(signals: SignalMap, t: float, *columns: int) -> None:
    """One tick in which the series at ``columns`` (index columns) are observed."""
    values = np.full(len(signals.index), np.nan)
    values[list(columns)] = 1.0
    signals.compute(T0 + t, values)


def test_a_nodes_cohort_is_its_first_configured_label_on_any_of_its_series() -> None:
    """rack before zone; a node's GPU columns (no such label) share its cohort; a node with
    none of the labels is in the "" cohort."""
    index = SeriesIndex(LabelRules(cohort_labels=("rack", "zone")))
    signals = SignalMap(load_signal_rules(), index)
    sent = [
        index.add(MEM, node_series("n1", rack="r1")),
        *(index.add("DCGM_FI_DEV_GPU_TEMP", gpu_series(n)) for n in ("n1", "n2", "n3")),
        index.add(MEM, node_series("n2", zone="z9")),
        index.add("node_load1", node_series("n2", rack="r2")),
        index.add(MEM, node_series("n3")),
    ]
    send(signals, 0, *sent)
    assert signals.sync()
    assert {"r1"} == cohort_of(signals, "n1")
    assert {"r2"} == cohort_of(signals, "n2")
    assert {""} == cohort_of(signals, "n3")


def test_a_label_that_arrives_later_moves_all_of_the_nodes_columns() -> None:
    """A node first seen through an exporter without the label joins its cohort, all columns
    at once, when a later series carries it; the next sync reports the changed layout."""
    index = SeriesIndex(LabelRules(cohort_labels=("rack",)))
    signals = SignalMap(load_signal_rules(), index)
    gpu, mem = (
        index.add("DCGM_FI_DEV_GPU_TEMP", gpu_series("n1")),
        index.add(MEM, node_series("n2", rack="r1")),
    )
    send(signals, 0, gpu, mem)
    signals.sync()
    assert {""} == cohort_of(signals, "n1")
    late = index.add("go_goroutines", node_series("n1", rack="r1"))  # no column of its own
    signals.sync()
    assert {""} == cohort_of(signals, "n1")  # known to the index, not sent yet
    send(signals, 30, gpu, mem, late)
    assert signals.sync()
    assert {"r1"} == cohort_of(signals, "n1")
    assert not signals.sync()


def test_a_new_value_of_the_label_moves_the_node_to_that_cohort() -> None:
    """A node relabelled for its next job (its series come back as new ones carrying the new
    value) joins the new job's cohort, all columns at once, when they are first sent (a
    dump's index may hold every series from the start); the newest value wins."""
    index = SeriesIndex(LabelRules(cohort_labels=("training_job", "rack")))
    signals = SignalMap(load_signal_rules(), index)
    gpu = index.add("DCGM_FI_DEV_GPU_TEMP", gpu_series("n1"))
    job_a = index.add(MEM, node_series("n1", training_job="a", rack="r1"))
    job_b = index.add("go_goroutines", node_series("n1", training_job="b"))  # no column
    rack = index.add(MEM, node_series("n1", rack="r1"))
    send(signals, 0, gpu, job_a)
    signals.sync()
    assert {"a"} == cohort_of(signals, "n1")
    send(signals, 30, gpu, rack)  # a lesser-ranked label changes nothing
    assert not signals.sync()
    assert {"a"} == cohort_of(signals, "n1")
    send(signals, 60, gpu, rack, job_b)
    assert signals.sync()
    assert {"b"} == cohort_of(signals, "n1")
    send(signals, 90, gpu, job_a, job_b)  # sent before: no news
    assert not signals.sync()
    assert {"b"} == cohort_of(signals, "n1")
    restored = SignalMap(load_signal_rules(), index)
    restored.load_state_dict(signals.state_dict())  # a restart: learnt from the series sent
    assert restored.sync()
    assert {"b"} == cohort_of(restored, "n1")


def test_a_node_back_in_a_former_job_rejoins_its_cohort() -> None:
    """A dump holds every labelling from the start: a node that runs job a, then b, then a
    again sends a's series once more, none of them new. When b's label is no longer sent it
    is back in a's cohort (it stayed in b's before); while b's label is still sent beside
    them (a target relabelled before the other), it stays in b."""
    index = SeriesIndex(LabelRules(cohort_labels=("training_job",)))
    signals = SignalMap(load_signal_rules(), index)
    mem_a = index.add(MEM, node_series("n1", training_job="a"))
    mem_b = index.add(MEM, node_series("n1", training_job="b"))
    load_b = index.add("node_load1", node_series("n1", training_job="b"))
    load_a = index.add("node_load1", node_series("n1", training_job="a"))
    peer = index.add(MEM, node_series("n2", training_job="a"))
    send(signals, 0, mem_a, load_a, peer)
    signals.sync()
    assert {"a"} == cohort_of(signals, "n1")
    columns = len(signals.layout)
    send(signals, 30, mem_b, load_b, peer)
    signals.sync()
    assert {"b"} == cohort_of(signals, "n1")
    send(signals, 60, mem_a, load_b, peer)  # node-exporter's memory target relabelled first
    signals.sync()
    assert {"b"} == cohort_of(signals, "n1")
    send(signals, 90, mem_a, load_a, peer)
    assert signals.sync()
    assert {"a"} == cohort_of(signals, "n1")
    assert columns == len(signals.layout)  # the labellings feed the same columns


def test_a_node_without_gpus_is_not_a_peer_of_the_gpu_nodes() -> None:
    """A whole Prometheus export holds CPU-only hosts' node-exporter series too: once a node
    has GPUs, nodes without any GPU series are compared only with each other. A node whose GPU
    series come later joins the GPU nodes then; without any GPU node nothing changes."""
    index = SeriesIndex(LabelRules(cohort_labels=("training_job",)))
    signals = SignalMap(load_signal_rules(), index)
    mem = {n: index.add(MEM, node_series(n, training_job="a")) for n in ("n1", "n2", "cpu1")}
    send(signals, 0, *mem.values())
    signals.sync()
    assert {"a"} == cohort_of(signals, "n1") == cohort_of(signals, "cpu1")  # no GPU node yet
    gpus = {n: index.add("DCGM_FI_DEV_GPU_TEMP", gpu_series(n)) for n in ("n1", "n2")}
    send(signals, 30, *mem.values(), *gpus.values())
    assert signals.sync()
    assert {"a"} == cohort_of(signals, "n1") == cohort_of(signals, "n2")
    assert {"a (no GPU)"} == cohort_of(signals, "cpu1")
    late = index.add("DCGM_FI_DEV_GPU_TEMP", gpu_series("cpu1"))  # its exporter answered late
    send(signals, 60, *mem.values(), *gpus.values(), late)
    assert signals.sync()
    assert {"a"} == cohort_of(signals, "cpu1")


def cluster(cohort_labels: list[str]) -> tuple[Pipeline, dict[str, int]]:
    """Four nodes: a 3-node training job "a" and a 1-node job "b" (label training_job)."""
    config = load_config(None, env={})
    labels = config.labels.model_copy(update={"cohort_labels": cohort_labels})
    index = SeriesIndex(LabelRules.from_config(labels))
    pipeline = TickLoop.from_config(config.model_copy(update={"labels": labels}), index)
    jobs = {"n1": "a", "n2": "a", "n3": "a", "n4": "b"}
    cols = {n: index.add(MEM, node_series(n, training_job=j)) for n, j in jobs.items()}
    return pipeline, cols


def alerted(pipeline: Pipeline, cols: dict[str, int], dips: dict[str, range]) -> set[str]:
    """Nodes alerted over 2 h of host memory at 1 TB with noise; each node in ``dips`` at 60%
    over its tick range (a checkpoint of its own job, or a fault)."""
    rng = np.random.default_rng(3)
    nodes: set[str] = set()
    for k in range(240):
        values = np.full(len(pipeline.pipeline.index), np.nan)
        for node, col in cols.items():
            level = 0.6 if k in dips.get(node, range(0)) else 1.0
            values[col] = level * 1e12 + rng.normal(0.0, 2e9)
        tick = pipeline.step(Frame(T0 + STEP * k, values))
        nodes |= {a.node for a in tick.started}
    return nodes


def test_a_single_node_jobs_own_moves_are_not_judged_against_another_jobs_nodes() -> None:
    """Without cohort labels the 1-node job's checkpoint dip makes it a lone deviant among the
    4 nodes; with the job as cohort it has no peers (1 < 3), so it raises no alert."""
    dip = {"n4": range(120, 128)}
    assert {"n4"} == alerted(*cluster([]), dip)
    assert set() == alerted(*cluster(["training_job"]), dip)


def test_a_lone_deviant_within_its_cohort_still_alerts() -> None:
    """With the job as cohort, a node of the 3-node job whose memory falls alone is caught."""
    assert {"n3"} == alerted(*cluster(["training_job"]), {"n3": range(120, 128)})


def test_simulate_job_label_lets_a_replay_use_the_jobs_as_cohorts(tmp_path: Path) -> None:
    """`simulate --job-label` puts each node's job on its node-exporter series; replayed with
    that label as cohort, the 8-node cluster's single-node job (node-08) no longer stands out
    against other jobs' nodes at its own checkpoints, which it does with every node in one
    cohort (node score up to ~0.6 there, held below the alert threshold by the peers'
    habituation to its repeats). Peers only: a node alone in its job is otherwise judged
    against its own past (tests/test_single_node.py), which this test turns off."""
    dump, events = tmp_path / "sim.om.gz", tmp_path / "ev.jsonl"
    args = ["--nodes", "8", "--days", "0.5", "--job-label", "training_job"]
    assert 0 == main(["simulate", *args, "--out", str(dump), "--events", str(events)])
    with gzip.open(dump, "rt") as text:
        assert 'training_job="llm-eval-d"' in text.read()
    config = tmp_path / "cohorts.yaml"
    config.write_text(
        "labels:\n  cohort_labels: [training_job]\nscoring:\n  own_past_when_peerless: false\n"
    )
    peak = {}
    for name, extra in (("one cohort", []), ("jobs", ["--config", str(config)])):
        scores = tmp_path / f"{name}.csv"
        replay = ["replay", str(dump), "--events", str(events), "--quiet"]
        assert 0 == main([*replay, *extra, "--scores-out", str(scores)])
        with scores.open() as rows:
            node_08 = [float(r["score"]) for r in csv.DictReader(rows) if r["node"] == "node-08"]
        peak[name] = max(node_08)
    assert peak["one cohort"] > 0.4
    assert peak["jobs"] < 0.1


def test_a_replay_whose_nodes_ran_different_jobs_names_the_cohort_label_to_set(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The 8-node cluster runs several jobs, a pod per GPU: without cohort labels the replay
    says so and names ``pod``, the label its GPUs' jobs were read from; with that label as
    cohort it says nothing (a single job: tests/test_gpu_workloads.py's count stays 1)."""
    dump, events = tmp_path / "sim.om.gz", tmp_path / "ev.jsonl"
    args = ["--nodes", "8", "--days", "0.1", "--pod-per-gpu"]
    assert 0 == main(["simulate", *args, "--out", str(dump), "--events", str(events)])
    config = tmp_path / "cohorts.yaml"
    config.write_text("labels:\n  cohort_labels: [pod]\n")
    printed = {}
    for name, extra in (("all nodes", []), ("pod", ["--config", str(config)])):
        capsys.readouterr()
        assert 0 == main(["replay", str(dump), "--events", str(events), *extra])
        printed[name] = capsys.readouterr().out
    advice = re.search(
        r"node cohorts: the GPUs ran up to (\d+) jobs at once \(pod\)", printed["all nodes"]
    )
    assert advice is not None, printed["all nodes"]
    assert int(advice[1]) >= 2
    assert "labels.cohort_labels: [pod]" in printed["all nodes"]
    assert "node cohorts:" not in printed["pod"]


def test_a_node_that_changes_jobs_is_judged_against_its_new_jobs_nodes() -> None:
    """Six nodes, jobs a (n1-n3) and b (n4-n6); at tick 60 the scheduler moves n3 to job b
    (its series come back labelled b, the old ones go silent) and n6 to job a. Job b's nodes
    then dip together (their checkpoint), n3 with them: no alert, where judged against its
    former job it would be a lone deviant. A dip of n3 alone is still caught."""

    def run(dips: dict[str, range]) -> set[str]:
        config = load_config(None, env={})
        labels = config.labels.model_copy(update={"cohort_labels": ["training_job"]})
        index = SeriesIndex(LabelRules.from_config(labels))
        pipeline = TickLoop.from_config(config.model_copy(update={"labels": labels}), index)
        jobs = {"n1": "a", "n2": "a", "n3": "a", "n4": "b", "n5": "b", "n6": "b"}
        moved = {"n3": "b", "n6": "a"}
        cols = {n: index.add(MEM, node_series(n, training_job=j)) for n, j in jobs.items()}
        rng = np.random.default_rng(5)
        nodes: set[str] = set()
        for k in range(240):
            if k == 60:  # the new job's labels: new series; the old ones are not sent again
                for node, job in moved.items():
                    cols[node] = index.add(MEM, node_series(node, training_job=job))
            values = np.full(len(index), np.nan)
            for node, col in cols.items():
                level = 0.6 if k in dips.get(node, range(0)) else 1.0
                values[col] = level * 1e12 + rng.normal(0.0, 2e9)
            nodes |= {a.node for a in pipeline.step(Frame(T0 + STEP * k, values)).started}
        return nodes

    job_b = range(160, 168)
    assert set() == run({"n3": job_b, "n4": job_b, "n5": job_b})
    assert {"n3"} == run({"n3": job_b})


def test_a_node_whose_dcgm_target_is_relabelled_raises_no_health_alert() -> None:
    """Six nodes with their job on their dcgm-exporter series; one node moves to the other
    job: all its GPU series come back under a new identity and the old ones fall silent.
    That is no lost telemetry (the old series counted as missing raised a health alert on
    that node, health_series_missing_fraction); a GPU that then falls off the bus still
    alerts."""
    config = load_config(None, env={})
    labels = config.labels.model_copy(update={"cohort_labels": ["training_job"]})
    index = SeriesIndex(LabelRules.from_config(labels))
    pipeline = TickLoop.from_config(config.model_copy(update={"labels": labels}), index)
    metrics = ("DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_SM_CLOCK")

    def gpus(node: str, job: str) -> list[int]:
        return [
            index.add(m, (*gpu_series(node)[:1], ("gpu", str(g)), ("training_job", job)))
            for g in range(8)
            for m in metrics
        ]

    cols = {f"n{i}": gpus(f"n{i}", "a" if i <= 3 else "b") for i in range(1, 7)}
    rng = np.random.default_rng(1)
    started: list[tuple[int, str]] = []
    for k in range(300):
        if k == 150:
            cols["n3"] = gpus("n3", "b")
        values = np.full(len(index), np.nan)
        for c in cols.values():
            values[c] = 50.0 + rng.normal(0.0, 1.0, len(c))
        if k >= 250:
            values[cols["n5"][:3]] = np.nan  # n5's GPU 0 falls off the bus
        tick = pipeline.step(Frame(T0 + STEP * k, values))
        started += [(k, a.node) for a in tick.started]
    assert ["n5"] == [node for k, node in started]
    assert started[0][0] >= 250


def test_a_relabelled_node_keeps_its_columns_and_their_history() -> None:
    """Six nodes, jobs a (n1-n3) and b (n4-n6); at tick 100 the scheduler moves n3 to job b,
    under a per-run job id: its series come back as new ones labelled "b-2". They feed n3's
    existing signal columns (no new column, no warm-up), so a dip of n3's memory alone two
    ticks after the move is caught, where new columns would still be warming up; and the
    same dip in n3's new job's nodes together (their checkpoint) is not. A restart that
    restores the state keeps reading the new series."""

    def run(dips: dict[str, range]) -> tuple[set[str], Pipeline, dict[str, int]]:
        config = load_config(None, env={})
        labels = config.labels.model_copy(update={"cohort_labels": ["training_job"]})
        index = SeriesIndex(LabelRules.from_config(labels))
        pipeline = TickLoop.from_config(config.model_copy(update={"labels": labels}), index)
        jobs = {"n1": "a-1", "n2": "a-1", "n3": "a-1", "n4": "b-2", "n5": "b-2", "n6": "b-2"}
        cols = {n: index.add(MEM, node_series(n, training_job=j)) for n, j in jobs.items()}
        rng = np.random.default_rng(7)
        nodes: set[str] = set()
        for k in range(140):
            if k == 100:
                width = len(pipeline.pipeline.signal_map)
                cols["n3"] = index.add(MEM, node_series("n3", training_job="b-2"))
            values = np.full(len(index), np.nan)
            for node, col in cols.items():
                level = 0.6 if k in dips.get(node, range(0)) else 1.0
                values[col] = level * 1e12 + rng.normal(0.0, 2e9)
            nodes |= {a.node for a in pipeline.step(Frame(T0 + STEP * k, values)).started}
        assert width == len(
            pipeline.pipeline.signal_map
        )  # the new series took no column of its own
        assert {"b-2"} == cohort_of(pipeline.pipeline.signal_map, "n3")
        return nodes, pipeline, cols

    soon = range(102, 110)
    caught, pipeline, cols = run({"n3": soon})
    assert {"n3"} == caught
    assert set() == run({"n3": soon, "n4": soon, "n5": soon})[0]
    # the signal column reads the new series, also after a save and restore
    signals = pipeline.pipeline.signal_map
    column = int(np.flatnonzero(signals.series_columns() == cols["n3"])[0])
    restored = SignalMap(load_signal_rules(), pipeline.pipeline.index)
    restored.load_state_dict(signals.state_dict())
    assert cols["n3"] == restored.series_columns()[column]
    assert signals._prev_value[column] == restored._prev_value[column]


def test_a_pipeline_refuses_an_index_that_ignores_the_configs_labels() -> None:
    """The index's label rules are the one source of cohort and GPU workload labels: a
    pipeline over an index built without the config's would compare nodes and GPUs the config
    keeps apart, so build_pipeline names the mismatch instead."""
    config = load_config(None, env={})
    updates: dict[str, dict[str, object]] = {
        "cohort_labels": {"cohort_labels": ["training_job"]},
        "workload_labels": {"gpu_workload_labels": []},
        "pod_owner": {"gpu_workload_pod_owner": False},
    }
    for name, update in updates.items():
        labels = config.labels.model_copy(update=update)
        configured = config.model_copy(update={"labels": labels})
        with pytest.raises(ValueError, match=name):
            TickLoop.from_config(configured, SeriesIndex())
        TickLoop.from_config(configured, SeriesIndex(LabelRules.from_config(labels)))  # accepted
