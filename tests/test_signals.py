"""The signal stage: series -> signal columns, transforms, presence, layout, state."""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from detector.config.rules import SignalCatalog, load_signal_rules
from detector.model import FloatArray, Labels
from detector.series.index import SeriesIndex
from detector.series.labels import LabelRules
from detector.signals.columns import gpu_number
from detector.signals.map import SignalMap

_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_text(text: str) -> tuple[list[tuple[str, Labels, float]], dict[str, str]]:
    """Tiny exposition reader for tests (the real parser lives in detector/ingest/parse.py)."""
    samples: list[tuple[str, Labels, float]] = []
    types: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(maxsplit=3)
            types[name] = kind
            continue
        match = _LINE.match(line)
        if match is None:
            continue
        labels = tuple(sorted(_LABEL.findall(match.group(2) or "")))
        samples.append((match.group(1), labels, float(match.group(3))))
    return samples, types


def gpu_labels(gpu: str, node: str = "n1") -> Labels:
    return (("Hostname", node), ("UUID", f"GPU-{node}-{gpu}"), ("gpu", gpu))


def node_level_defaults() -> SignalCatalog:
    """The built-in catalog with the default rule scoring node-level series too."""
    catalog = load_signal_rules()
    default = catalog.default_rule.model_copy(update={"node_level": True})
    return catalog.model_copy(update={"default_rule": default})


class Cluster:
    """An index plus a helper that turns {(metric, labels): value} into a frame vector."""

    def __init__(
        self, catalog: SignalCatalog | None = None, rules: LabelRules | None = None
    ) -> None:
        self.index = SeriesIndex(rules or LabelRules())
        self.signals = SignalMap(catalog or node_level_defaults(), self.index)

    def frame(self, values: dict[tuple[str, Labels], float]) -> FloatArray:
        columns = {key: self.index.add(*key) for key in values}
        out = np.full(len(self.index), np.nan)
        for key, value in values.items():
            out[columns[key]] = value
        return out

    def tick(self, t: float, values: dict[tuple[str, Labels], float]) -> FloatArray:
        frame = self.frame(values)
        self.signals.sync()
        return self.signals.compute(t, frame)

    def column(self, signal: str, node: str = "n1", gpu: str | None = None) -> int:
        for i in range(len(self.signals)):
            name, n, g, _ = self.signals.column_names(i)
            if (name, n, g) == (signal, node, gpu):
                return i
        raise KeyError((signal, node, gpu))


def test_rate_is_per_second_and_reset_safe() -> None:
    """A counter is rated per second; a decrease (reset) gives NaN, then rating resumes."""
    cluster = Cluster()
    key = ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", gpu_labels("0"))
    got = []
    for t, value in [(0, 0.0), (10, 10.0), (20, 30.0), (30, 5.0), (40, 15.0)]:
        out = cluster.tick(t, {key: value})
        got.append(out[cluster.column("pcie_replay", gpu="0")])
    assert math.isnan(got[0])
    assert [1.0, 2.0] == got[1:3]
    assert math.isnan(got[3])
    assert 1.0 == got[4]


def test_rate_skips_gaps_and_non_positive_dt() -> None:
    """Rates span gaps of missing ticks; a repeated timestamp yields NaN, not inf."""
    cluster = Cluster()
    key = ("node_nfs_rpc_retransmissions_total", (("instance", "n1:9100"),))
    cluster.tick(0, {key: 100.0})
    cluster.tick(10, {})
    gap = cluster.tick(20, {key: 140.0})
    again = cluster.tick(20, {key: 150.0})
    col = cluster.column("nfs_rpc_retransmissions")
    assert 2.0 == gap[col]
    assert math.isnan(again[col])


def test_rate_applies_scale() -> None:
    """Violation counters in ns become a fraction of time through the rule's scale."""
    cluster = Cluster()
    key = ("DCGM_FI_DEV_THERMAL_VIOLATION", gpu_labels("2"))
    cluster.tick(0, {key: 0.0})
    out = cluster.tick(10, {key: 5e9})
    assert 0.5 == pytest.approx(out[cluster.column("thermal_violation", gpu="2")])


def test_edge_fires_only_on_change() -> None:
    """Edge is 1 when the value differs from the previous observation, 0 when equal."""
    cluster = Cluster()
    key = ("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", gpu_labels("1"))
    col = None
    got = []
    for t, value in [(0, 1.0), (15, 1.0), (30, 8.0), (45, 8.0)]:
        out = cluster.tick(t, {key: value})
        col = cluster.column("clock_event_reasons", gpu="1")
        got.append(out[col])
    assert math.isnan(got[0])
    assert [0.0, 1.0, 0.0] == got[1:]


def test_level_and_blank_sentinel() -> None:
    """Levels pass through; DCGM's blank sentinel reads as not observed."""
    cluster = Cluster()
    key = ("DCGM_FI_DEV_GPU_TEMP", gpu_labels("0"))
    first = cluster.tick(0, {key: 61.0})
    blank = cluster.tick(15, {key: 9223372036854775794.0})
    col = cluster.column("gpu_temp", gpu="0")
    assert 61.0 == first[col]
    assert math.isnan(blank[col])


def test_presence_when_a_gpu_vanishes() -> None:
    """A GPU losing its series raises its missing fraction and lowers the node's GPU count."""
    cluster = Cluster()
    metrics = ("DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE")
    both = {(m, gpu_labels(g)): 50.0 for m in metrics for g in ("0", "1")}
    cluster.tick(0, both)
    only_gpu0 = {k: v for k, v in both.items() if dict(k[1])["gpu"] == "0"}
    half = dict(only_gpu0)
    half[("DCGM_FI_DEV_GPU_TEMP", gpu_labels("1"))] = 50.0
    lost = cluster.tick(30, only_gpu0)
    partial = cluster.tick(60, half)
    nothing = cluster.tick(90, {})
    missing1 = cluster.column("health_series_missing_fraction", gpu="1")
    missing0 = cluster.column("health_series_missing_fraction", gpu="0")
    count = cluster.column("health_gpu_count")
    assert (1.0, 0.0, 1.0) == (lost[missing1], lost[missing0], lost[count])
    assert (0.5, 2.0) == (partial[missing1], partial[count])
    assert math.isnan(nothing[missing1])
    assert math.isnan(nothing[count])


def test_presence_when_a_target_is_relabelled() -> None:
    """A dcgm target relabelled (its node's next job): every GPU series comes back under a
    new identity and the old ones go silent. That is no lost telemetry: the replaced series
    stop counting, so the missing fraction stays 0 (it held at 0.5 for good); a GPU that
    then falls off the bus still reads 1; a series whose metric is still sent under its
    other identity (two MIG instances) counts when it alone goes silent; relabelled back,
    the first identity replaces the second in turn."""
    cluster = Cluster()
    metrics = ("DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE")

    def page(job: str, gpus: tuple[str, ...] = ("0", "1")) -> dict[tuple[str, Labels], float]:
        return {(m, (*gpu_labels(g), ("job_name", job))): 50.0 for m in metrics for g in gpus}

    cluster.tick(0, page("a"))
    missing0 = cluster.column("health_series_missing_fraction", gpu="0")
    missing1 = cluster.column("health_series_missing_fraction", gpu="1")
    relabelled = cluster.tick(30, page("b"))
    steady = cluster.tick(60, page("b"))
    gpu1_gone = cluster.tick(90, page("b", ("0",)))
    back = cluster.tick(120, page("a"))
    assert (0.0, 0.0) == (relabelled[missing0], relabelled[missing1])
    assert (0.0, 0.0) == (steady[missing0], steady[missing1])
    assert (0.0, 1.0) == (gpu1_gone[missing0], gpu1_gone[missing1])
    assert (0.0, 0.0) == (back[missing0], back[missing1])
    both = {**page("a"), **page("c")}
    cluster.tick(150, both)
    c_gone = cluster.tick(180, page("a"))
    assert 0.5 == c_gone[missing0]


def test_a_gpu_gone_from_an_answering_page_is_definitive_once_each_time_it_goes() -> None:
    """``vanished`` names the GPU on the second tick in a row its series are all gone while its
    node's page still answers with the other GPU (a tick late is not gone: remote-written
    samples can come in two ticks), and only then: not while the GPU stays gone, not for a part
    of its series, not for a whole page missing (target down, timeout, exporter restarting)
    nor when that page comes back unchanged, not for a relabelled page (a pod rename); again
    when the GPU comes back and goes once more."""
    cluster = Cluster()
    metrics = ("DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE")

    def page(gpus: tuple[str, ...] = ("0", "1"), pod: str = "a") -> dict[tuple[str, Labels], float]:
        return {(m, (*gpu_labels(g), ("pod", pod))): 50.0 for m in metrics for g in gpus}

    partial = page()
    del partial[("DCGM_FI_DEV_GPU_TEMP", (*gpu_labels("1"), ("pod", "a")))]
    timeline = [
        page(),  # 0 both GPUs
        {},  # 1 the whole page missing (target down)
        page(),  # 2 back unchanged (an exporter restart)
        partial,  # 3 half of GPU 1's series gone: not a vanished GPU
        page(pod="b"),  # 4 every series under a new pod label
        page(("0",), pod="b"),  # 5 GPU 1 gone, GPU 0 answering
        page(("0",), pod="b"),  # 6 still gone
        {},  # 7 page missing while it is gone
        page(("0",), pod="b"),  # 8 back with GPU 1 still gone
        page(pod="b"),  # 9 GPU 1 back
        page(("0",), pod="b"),  # 10 gone again (once: not yet)
        page(pod="b"),  # 11 back a tick late (remote-written samples): not gone
        page(("0",), pod="b"),  # 12 gone
        page(("0",), pod="b"),  # 13 still gone: confirmed
    ]
    vanished = []
    for k, values in enumerate(timeline):
        cluster.tick(30.0 * k, values)
        vanished.append(cluster.signals.vanished_gpus())
    expected = [[("n1", "1")] if k in (6, 13) else [] for k in range(len(timeline))]
    assert expected == vanished


def test_presence_ignores_xid_series_that_come_and_go() -> None:
    """A windowed XID count exists only while its XID is in the window (dcgm-exporter's
    DCGM_EXP_XID_ERRORS_COUNT): its disappearance is no lost telemetry, while a real
    series lost at the same time still counts."""
    cluster = Cluster()
    steady = {
        (m, gpu_labels("0")): 50.0 for m in ("DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE")
    }
    xid_count = ("DCGM_EXP_XID_ERRORS_COUNT", (*gpu_labels("0"), ("xid", "119")))
    cluster.tick(0, steady)
    cluster.tick(30, {**steady, xid_count: 1.0})
    after = cluster.tick(60, steady)
    temp_lost = {k: v for k, v in steady.items() if k[0] != "DCGM_FI_DEV_GPU_TEMP"}
    lost = cluster.tick(90, temp_lost)
    missing = cluster.column("health_series_missing_fraction", gpu="0")
    assert 0.0 == after[missing]
    assert 0.5 == lost[missing]


def test_named_default_ignored_and_truth_series() -> None:
    """Named rules win, unnamed numeric series get the default rule (a counter as its family,
    without _total), XID and ignored are skipped."""
    cluster = Cluster()
    cluster.tick(
        0,
        {
            ("DCGM_FI_DEV_GPU_TEMP", gpu_labels("0")): 50.0,
            ("DCGM_FI_DEV_ENC_UTIL", gpu_labels("0")): 0.0,
            ("DCGM_FI_DEV_XID_ERRORS", gpu_labels("0")): 0.0,
            ("go_goroutines", (("instance", "n1:9100"),)): 8.0,
            ("node_context_switches_total", (("instance", "n1:9100"),)): 1e6,
        },
    )
    names = {cluster.signals.column_names(i)[0] for i in range(len(cluster.signals))}
    assert {
        "gpu_temp",
        "DCGM_FI_DEV_ENC_UTIL",
        "node_context_switches",
        "health_series_missing_fraction",
        "health_gpu_count",
        "health_targets_frozen_fraction",
    } == names
    weights = dict(
        zip(cluster.signals.layout.signal.tolist(), cluster.signals.weights.tolist(), strict=True)
    )
    default_id = cluster.signals.signal_names.index("DCGM_FI_DEV_ENC_UTIL")
    assert 0.3 == weights[default_id]


def test_default_counter_is_rated_and_can_be_disabled() -> None:
    """The default rule rates counters; disabled, only named signals get columns."""
    cluster = Cluster()
    key = ("node_context_switches_total", (("instance", "n1:9100"),))
    cluster.tick(0, {key: 100.0})
    out = cluster.tick(10, {key: 200.0})
    assert 10.0 == out[cluster.column("node_context_switches")]
    catalog = node_level_defaults()
    off = catalog.model_copy(
        update={"default_rule": catalog.default_rule.model_copy(update={"enabled": False})}
    )
    quiet = Cluster(off)
    quiet.tick(0, {key: 100.0})
    assert 0 == len(quiet.signals)


def test_declared_counter_type_is_honoured() -> None:
    """A declared counter without _total (DCGM style) is rated by the default rule."""
    index = SeriesIndex()
    signals = SignalMap(node_level_defaults(), index, metric_types={"my_odd_counter": "counter"})
    col = index.add("my_odd_counter", (("instance", "n1:1"),))
    frame = np.full(1, np.nan)
    frame[col] = 5.0
    signals.compute(0.0, frame)
    frame[col] = 25.0
    assert 2.0 == signals.compute(10.0, frame)[0]


def test_sync_reports_new_columns_only_once() -> None:
    """sync() is True when columns were appended and False when the index has not grown."""
    cluster = Cluster()
    cluster.index.add("DCGM_FI_DEV_GPU_TEMP", gpu_labels("0"))
    assert cluster.signals.sync()
    assert not cluster.signals.sync()
    cluster.index.add("go_goroutines", ())
    assert not cluster.signals.sync()


def test_layout_is_consistent() -> None:
    """Layout arrays have one entry per column; gpu ints, directions and names line up."""
    cluster = Cluster(load_signal_rules(), LabelRules(cohort_labels=("rack",)))
    cluster.tick(
        0,
        {
            ("DCGM_FI_DEV_SM_CLOCK", (*gpu_labels("3", "n1"), ("rack", "rack-a"))): 1900.0,
            ("DCGM_FI_DEV_GPU_TEMP", gpu_labels("nvidia7", "n2")): 40.0,
            ("node_load1", (("instance", "n2:9100"), ("rack", "rack-b"))): 3.0,
        },
    )
    signals = cluster.signals
    layout = signals.layout
    n = len(signals)
    assert all(
        len(a) == n
        for a in (
            layout.signal,
            layout.node,
            layout.gpu,
            layout.cohort,
            layout.direction,
            signals.weights,
        )
    )
    sm = cluster.column("sm_clock", "n1", "3")
    temp = cluster.column("gpu_temp", "n2", "nvidia7")
    load = cluster.column("node_load", "n2", None)
    assert (3, -1) == (layout.gpu[sm], layout.direction[sm])
    assert (gpu_number("nvidia7"), 1) == (layout.gpu[temp], layout.direction[temp])
    assert (-1, 1) == (layout.gpu[load], layout.direction[load])
    assert ("n1", "n2") == (
        layout.node_names[layout.node[sm]],
        layout.node_names[layout.node[load]],
    )
    assert layout.cohort[sm] != layout.cohort[temp]
    assert layout.cohort[temp] == layout.cohort[load]
    assert "sm_clock" == layout.signal_names[layout.signal[sm]]
    assert layout.gpu[temp] >= 1_000_000  # a hashed label sits beyond every numeric GPU index


def test_hashed_gpu_numbers_are_the_same_in_every_process() -> None:
    """A non-numeric GPU label maps to the same int in a process with another str-hash seed
    (a stable hash, not Python's salted hash()), so a restarted daemon numbers GPUs alike."""
    code = "from detector.signals.columns import gpu_number; print(gpu_number('nvidia7'))"
    seed = "2" if os.environ.get("PYTHONHASHSEED") == "1" else "1"  # not this process's seed
    env = {**os.environ, "PYTHONHASHSEED": seed}
    other = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    )
    assert gpu_number("nvidia7") == int(other.stdout)


def test_state_round_trip_keeps_rates_across_restart() -> None:
    """A restarted SignalMap given the saved state rates the next sample immediately."""
    cluster = Cluster()
    key = ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", gpu_labels("0"))
    cluster.tick(0, {key: 10.0})
    state = cluster.signals.state_dict()
    restored = SignalMap(load_signal_rules(), cluster.index)
    restored.load_state_dict(state)
    out = restored.compute(20.0, cluster.frame({key: 50.0}))
    assert 2.0 == out[cluster.column("ecc_sbe_volatile", gpu="0")]


def test_a_restart_does_not_take_a_gpu_already_gone_for_a_new_vanish() -> None:
    """Restored from a state saved while GPU 1 was gone (also by the one-tick confirmation
    before, ``gone_prev``), the map names no vanished GPU on the next ticks without it, and
    names it again once it has come back and gone."""
    cluster = Cluster()
    metrics = ("DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE")
    both = {(m, gpu_labels(g)): 50.0 for m in metrics for g in ("0", "1")}
    only0 = {k: v for k, v in both.items() if dict(k[1])["gpu"] == "0"}
    cluster.tick(0, both)
    cluster.tick(30, only0)
    cluster.tick(60, only0)  # confirmed gone
    state = cluster.signals.state_dict()
    # as the one-tick confirmation saved it: whether each GPU was gone at the last tick
    older = {k: v for k, v in state.items() if k != "gone_ticks"}
    older["gone_prev"] = (state["gone_ticks"] > 0).astype(np.float64)
    for saved in (state, older):
        restored = SignalMap(cluster.signals.catalog, cluster.index)
        restored.load_state_dict(saved)
        seen = []
        for t, values in ((90, only0), (120, only0), (150, both), (180, only0), (210, only0)):
            restored.compute(float(t), cluster.frame(values))
            seen.append(restored.vanished_gpus())
        assert [[], [], [], [], [("n1", "1")]] == seen


def test_state_restores_columns_mapped_later() -> None:
    """State for series not yet in the index is applied when those series appear."""
    first = Cluster()
    key = ("node_network_receive_errs_total", (("instance", "n1:9100"),))
    first.tick(0, {key: 1.0})
    fresh = Cluster()
    fresh.signals.load_state_dict(first.signals.state_dict())
    out = fresh.tick(10, {key: 11.0})
    assert 1.0 == out[fresh.column("net_errors")]


def test_compute_is_safe_on_short_frames() -> None:
    """A frame built before new series were added reads the missing tail as NaN."""
    cluster = Cluster()
    cluster.index.add("DCGM_FI_DEV_GPU_TEMP", gpu_labels("0"))
    out = cluster.signals.compute(0.0, np.empty(0))
    assert np.isnan(out).all()


def test_node_exporter_fixture_maps_onto_signals(real_data: Path) -> None:
    """The real node-exporter payload maps onto named signals, with rates on a second scrape."""
    text = (real_data / "exporters" / "node_exporter" / "e2e-output.txt").read_text()
    samples, types = parse_text(text)
    index = SeriesIndex()
    signals = SignalMap(load_signal_rules(), index, metric_types=types)
    extra = (("instance", "node7:9100"),)
    cols = np.asarray([index.add(name, labels + extra) for name, labels, _ in samples])
    values = np.asarray([v for _, _, v in samples])
    assert signals.sync()
    frame = np.full(len(index), np.nan)
    frame[cols] = values
    first = signals.compute(100.0, frame)
    frame[cols] = values + 3.0
    second = signals.compute(115.0, frame)

    names = {signals.column_names(i)[0] for i in range(len(signals))}
    expected = {
        "nfs_rpc_retransmissions",
        "nfs_op_queue_time",
        "nfs_op_rtt",
        "nfs_transport_backlog",
        "ib_link_downed",
        "ib_port_rcv_errors",
        "ib_link_error_recovery",
        "edac_correctable",
        "edac_uncorrectable",
        "hwmon_temp",
        "node_load",
        "net_errors",
    }
    assert expected <= names
    assert not any(
        n.startswith(("go_", "process_", "promhttp_")) or n.endswith("_info") for n in names
    )
    # NUMA/drbd series carry their own `node` label, which series_labels.py reads as the node name;
    # the named signals all come from series identified by the target's instance.
    named_nodes = {
        signals.column_names(i)[1]
        for i in range(len(signals))
        if signals.column_names(i)[0] in expected
    }
    assert {"node7"} == named_nodes
    rate_col = next(
        i for i in range(len(signals)) if signals.column_names(i)[0] == "nfs_rpc_retransmissions"
    )
    assert math.isnan(first[rate_col])
    assert 0.2 == pytest.approx(second[rate_col])
    level_col = next(i for i in range(len(signals)) if signals.column_names(i)[0] == "node_load")
    assert second[level_col] == first[level_col] + 3.0


def test_default_rule_leaves_node_level_series_alone_unless_asked() -> None:
    """Built-in default: an unnamed node-level series gets no column; an unnamed GPU series does."""
    cluster = Cluster(load_signal_rules())
    cluster.tick(
        0,
        {
            ("DCGM_FI_DEV_ENC_UTIL", gpu_labels("0")): 0.0,
            ("node_context_switches_total", (("instance", "n1:9100"),)): 1e6,
        },
    )
    names = {cluster.signals.column_names(i)[0] for i in range(len(cluster.signals))}
    assert "DCGM_FI_DEV_ENC_UTIL" in names
    assert "node_context_switches_total" not in names


def _without_log_space(catalog: SignalCatalog) -> SignalCatalog:
    rules = tuple(rule.model_copy(update={"log_unit": 0.0}) for rule in catalog.signals)
    return catalog.model_copy(update={"signals": rules})


def test_ratio_is_counter_increase_per_denominator_increase() -> None:
    """NFS RTT per operation: seconds of RTT gained per request gained, whatever the volume;
    NaN when no request completed and before the denominator series exists."""
    cluster = Cluster(_without_log_space(node_level_defaults()))
    labels = (("instance", "n1:9100"), ("export", "srv:/data"), ("operation", "READ"))
    rtt = "node_mountstats_nfs_operations_response_time_seconds_total"
    ops = "node_mountstats_nfs_operations_requests_total"
    cluster.tick(0, {(rtt, labels): 10.0})  # the denominator is not known yet
    col = cluster.column("nfs_op_rtt")
    assert np.isnan(cluster.tick(15, {(rtt, labels): 11.0, (ops, labels): 100.0})[col])
    assert 0.5 == cluster.tick(30, {(rtt, labels): 12.0, (ops, labels): 102.0})[col]
    busy = cluster.tick(45, {(rtt, labels): 112.0, (ops, labels): 302.0})[col]
    assert 0.5 == busy  # 100x the volume, same latency
    assert np.isnan(cluster.tick(60, {(rtt, labels): 112.0, (ops, labels): 302.0})[col])


def test_values_are_rounded_to_the_rule_resolution() -> None:
    """Power-violation time (resolution 0.1 of the time): 4% throttled reads as 0, 26% as 0.3."""
    cluster = Cluster()
    viol = "DCGM_FI_DEV_POWER_VIOLATION"
    cluster.tick(0, {(viol, gpu_labels("0")): 0.0})
    col = cluster.column("power_violation", gpu="0")
    assert 0.0 == cluster.tick(10, {(viol, gpu_labels("0")): 0.4e9})[col]
    assert pytest.approx(0.3) == cluster.tick(20, {(viol, gpu_labels("0")): 3.0e9})[col]


def test_a_latency_is_compared_in_log_space_so_its_spread_does_not_grow_with_its_level() -> None:
    """nfs_op_rtt (log_unit 1e-4 s): ln(1 + rtt / unit). A node 30% slower than another is
    about as far from it at 0.7 ms as at 20 ms (a checkpoint storm; the unit's linear part
    shrinks the calm distance 12%), where the seconds apart grow 29-fold; 0 s stays finite,
    and no request completed stays NaN."""
    unit = next(r.log_unit for r in load_signal_rules().signals if r.name == "nfs_op_rtt")
    assert unit == 1e-4
    rtt = "node_mountstats_nfs_operations_response_time_seconds_total"
    ops = "node_mountstats_nfs_operations_requests_total"
    cluster = Cluster()
    nodes = {name: (("instance", f"{name}:9100"), ("export", "srv:/d"), ("operation", "READ"))
             for name in ("n1", "n2")}  # fmt: skip
    totals = {name: [0.0, 0.0] for name in nodes}

    def tick(t: float, per_op: dict[str, float]) -> FloatArray:
        values = {}
        for name, labels in nodes.items():
            totals[name][0] += 1000 * per_op[name]
            totals[name][1] += 1000
            values[(rtt, labels)], values[(ops, labels)] = totals[name]
        return cluster.tick(t, values)

    tick(0, {"n1": 0.0, "n2": 0.0})
    cols = [cluster.column("nfs_op_rtt", node=name) for name in nodes]
    calm = tick(15, {"n1": 0.0007, "n2": 1.3 * 0.0007})[cols]
    storm = tick(30, {"n1": 0.020, "n2": 1.3 * 0.020})[cols]
    assert pytest.approx(np.log1p(0.0007 / unit)) == calm[0]
    assert 0.85 < (calm[1] - calm[0]) / (storm[1] - storm[0]) < 1.0  # seconds apart: 1/28.6
    assert 0.0 == tick(45, {"n1": 0.0, "n2": 0.0})[cols[0]]
    idle = cluster.tick(
        60, {(rtt, nodes["n1"]): totals["n1"][0], (ops, nodes["n1"]): totals["n1"][1]}
    )
    assert np.isnan(idle[cols[0]])
