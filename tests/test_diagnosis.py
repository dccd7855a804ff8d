"""The diagnosis of an alert (detector/diagnosis/): the taxonomy covers every XID and signal,
each class is diagnosed from its characteristic evidence, an XID overrides the signals, the
learned model round-trips through the calibration file and changes the diagnosis when the
history says so, and the confusion table, alert text and storm bottleneck say what they should.
"""

from __future__ import annotations

import math
from dataclasses import astuple
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest

from detector.config import (
    UNKNOWN_CLASS,
    Achieved,
    Calibration,
    DiagnosisCounts,
    FittedOn,
    load_calibration,
    load_diagnosis_rules,
    load_signal_rules,
    load_xid_catalog,
    save_calibration,
)
from detector.diagnosis import (
    XID_CONFIDENCE,
    DiagnosedFailure,
    DiagnosisModel,
    Evidence,
    NfsFigures,
    NfsMeter,
    SignalEvidence,
    alert_text,
    build_model,
    confusion_table,
    diagnose,
    fit_temperature,
    learn_counts,
    storm_bottleneck,
)
from detector.errors import ConfigError
from detector.model import SeriesInfo, SignalScore

RULES = load_diagnosis_rules()
SIGNALS = load_signal_rules()
XIDS = load_xid_catalog()


def _model(learned: DiagnosisCounts | None = None) -> DiagnosisModel:
    return build_model(RULES, SIGNALS, XIDS, learned)


def _signals(*pairs: tuple[str, float]) -> Evidence:
    return Evidence(tuple(SignalEvidence(name, z) for name, z in pairs))


def test_every_xid_of_the_catalog_is_in_exactly_one_class() -> None:
    """Each code of rules/xid.yaml belongs to one class of rules/diagnosis.yaml."""
    listed = [code for cls in RULES.classes for code in cls.xids]
    assert sorted(x.code for x in XIDS.xids) == sorted(listed)


def test_every_scored_signal_is_evidence_for_a_class() -> None:
    """Each signal rules/signals.yaml scores is named by at least one class's prior (an
    agent's given GPU score is another detector's verdict, not evidence of a class)."""
    scored = {rule.name for rule in SIGNALS.signals if rule.truth is None and not rule.given}
    named = {signal for cls in RULES.classes for signal in cls.signals}
    assert set() == scored - named
    assert set() == named - scored


def test_the_shipped_rules_check_against_the_shipped_catalogs() -> None:
    """The built-in taxonomy names only real signals, and every class has an action."""
    RULES.check_against(SIGNALS, XIDS, "rules/diagnosis.yaml")
    model = _model()
    expected = {
        "memory_ecc": "RESET_GPU",
        "pcie_bus": "REBOOT",
        "nvlink": "RESET_GPU",
        "gsp_driver": "RESET_GPU",
        "straggler_hang": "RESTART_APP",
        "unknown": "CONTACT_SUPPORT",
    }
    actions = dict(zip(model.classes, model.actions, strict=True))
    assert expected == {c: a for c, a in actions.items() if c in expected}


CHARACTERISTIC = {
    "memory_ecc": [("ecc_sbe_volatile", 9.0), ("ecc_sbe_aggregate", 6.0)],
    "pcie_bus": [("pcie_replay", 8.0), ("pcie_bytes", 3.0)],
    "nvlink": [("nvlink_crc_flit_errors", 7.0), ("nvlink_replay_errors", 5.0)],
    "thermal_power": [("gpu_temp", 6.0), ("thermal_violation", 5.0), ("sm_clock", 3.0)],
    "gsp_driver": [("dcgm_health_status", 6.0)],
    "straggler_hang": [("sm_active", 5.0), ("tensor_active", 4.0), ("sm_clock", 3.0)],
    "host_memory": [("oom_kills", 6.0), ("mem_available", 4.0)],
    "host_nfs": [("nfs_op_rtt", 6.0), ("nfs_transport_backlog", 5.0)],
    "host_infiniband": [("ib_symbol_errors", 7.0), ("ib_link_error_recovery", 4.0)],
    "unknown": [("health_scrape_duration", 5.0), ("health_up", 4.0)],
}


@pytest.mark.parametrize("failure_class", sorted(CHARACTERISTIC))
def test_each_class_is_diagnosed_from_its_characteristic_evidence(failure_class: str) -> None:
    """The signals that characterise a class diagnose it, with more than even confidence."""
    found = diagnose(_signals(*CHARACTERISTIC[failure_class]), _model())
    assert failure_class == found.failure_class
    assert "signals" == found.basis
    assert found.confidence > 0.5


def test_the_classes_of_the_taxonomy_are_all_covered_by_the_characteristic_cases() -> None:
    """The case list above names every class of the shipped taxonomy."""
    assert sorted(c.name for c in RULES.classes) == sorted(CHARACTERISTIC)


def test_an_xid_overrides_the_signals_and_takes_its_own_action() -> None:
    """With XID 79 in the evidence, ECC signals do not matter: pcie_bus, REBOOT (the XID's)."""
    evidence = Evidence((SignalEvidence("ecc_sbe_volatile", 12.0),), (79,))
    found = diagnose(evidence, _model())
    assert ("pcie_bus", "REBOOT", "xid", XID_CONFIDENCE) == (
        found.failure_class,
        found.action,
        found.basis,
        found.confidence,
    )


def test_an_alert_names_its_xid_as_xid_code() -> None:
    """An alert's ``xid_<code>`` name is read as the XID; the rest as signals with values."""
    scores = [SignalScore("n1", "3", "nvlink_replay_errors", 6.5)]
    evidence = Evidence.of_alert(("nvlink_replay_errors", "xid_149"), scores)
    assert Evidence((SignalEvidence("nvlink_replay_errors", 6.5, "3"),), (149,)) == evidence
    assert "nvlink" == diagnose(evidence, _model()).failure_class


def test_evidence_no_class_knows_is_unknown() -> None:
    """Signals outside the rules (metrics only the default rule scores) diagnose nothing."""
    found = diagnose(_signals(("DCGM_FI_PROF_PIPE_FP64_ACTIVE", 9.0)), _model())
    assert (UNKNOWN_CLASS, "none", "CONTACT_SUPPORT") == (
        found.failure_class,
        found.basis,
        found.action,
    )


def test_redundant_signals_count_as_the_square_root_of_their_number() -> None:
    """Four ECC views of one fault at equal deviation are two votes, not four: each weighs half
    what it weighs alone (1 / sqrt(4)), so correlated signals do not make the model certain."""
    many = _signals(
        ("ecc_sbe_volatile", 9.0),
        ("ecc_sbe_aggregate", 9.0),
        ("retired_pages_sbe", 9.0),
        ("remapped_rows_correctable", 9.0),
    )
    alone = diagnose(_signals(("ecc_sbe_volatile", 9.0)), _model())
    together = diagnose(many, _model())
    assert alone.runner_up == together.runner_up
    assert alone.why[0][1] / 2 == pytest.approx(together.why[0][1])
    assert alone.confidence < together.confidence


def test_learned_counts_round_trip_through_the_calibration_file(tmp_path: Path) -> None:
    """The counts calibrate learns are saved and loaded unchanged with the calibration."""
    learned = learn_counts([("pcie_bus", ["gpu_temp", "thermal_violation", "xid_79"])] * 3)
    assert {"pcie_bus": 3} == learned.failures
    assert {"gpu_temp": 3.0, "thermal_violation": 1.5} == learned.signals["pcie_bus"]
    calibration = Calibration(
        threshold=0.6,
        fp_budget_per_day=1.0,
        fitted_on=FittedOn(dump="history", days=3.0, failures=3),
        achieved=Achieved(detected=3, detected_before=3, fp_per_day=0.5),
        created=datetime(2026, 1, 1, tzinfo=UTC),
        diagnosis=learned,
    )
    path = tmp_path / "calibration.json"
    save_calibration(path, calibration)
    assert learned == load_calibration(path).diagnosis


def test_a_calibration_file_without_a_diagnosis_still_loads(tmp_path: Path) -> None:
    """Files written before the diagnosis existed load, with the prior alone."""
    path = tmp_path / "old.json"
    path.write_text(
        '{"version": 1, "threshold": 0.5, "fp_budget_per_day": 1.0, "fitted_on": {"dump": "d",'
        ' "days": 1.0, "failures": 0}, "achieved": {"detected": 0, "detected_before": 0,'
        ' "fp_per_day": 0.0}, "created": "2026-01-01T00:00:00+00:00"}'
    )
    assert None is load_calibration(path).diagnosis


def test_history_changes_the_diagnosis_when_it_says_so() -> None:
    """Thermal signals diagnose thermal_power by the prior; after a history in which they led
    twenty falls off the bus (XID 79), they diagnose pcie_bus."""
    evidence = _signals(("gpu_temp", 6.0), ("thermal_violation", 4.0))
    assert "thermal_power" == diagnose(evidence, _model()).failure_class
    learned = learn_counts([("pcie_bus", ["gpu_temp", "thermal_violation"])] * 20)
    assert "pcie_bus" == diagnose(evidence, _model(learned)).failure_class


def test_a_little_history_does_not_overturn_the_prior() -> None:
    """One failure is not enough to move characteristic evidence away from its class."""
    evidence = _signals(("ecc_sbe_volatile", 8.0))
    learned = learn_counts([("nvlink", ["ecc_sbe_volatile"])])
    assert "memory_ecc" == diagnose(evidence, _model(learned)).failure_class


def test_a_class_naming_a_signal_the_catalog_lacks_is_refused(tmp_path: Path) -> None:
    """A typo in a class's signals is a ConfigError naming the file, class and signal."""
    path = tmp_path / "diagnosis.yaml"
    path.write_text("classes:\n  - name: unknown\n    title: Unknown\n    signals: {gpu_tmp: 1}\n")
    with pytest.raises(ConfigError, match=r"diagnosis.yaml: classes\[0\].signals.gpu_tmp"):
        load_diagnosis_rules(path).check_against(SIGNALS, XIDS, str(path))


def test_an_xid_in_two_classes_is_refused(tmp_path: Path) -> None:
    """One XID code, one class: the file and the code are named."""
    path = tmp_path / "diagnosis.yaml"
    path.write_text(
        "classes:\n  - {name: unknown, title: U, xids: [79]}\n"
        "  - {name: pcie_bus, title: P, xids: [79]}\n"
    )
    with pytest.raises(ConfigError, match=r"diagnosis.yaml: .*xid 79 is in both"):
        load_diagnosis_rules(path)


def test_the_confusion_table_counts_the_diagonal_apart_from_xid_raised_alerts() -> None:
    """Rows: two from signals (one right), one raised by the XID (right by construction)."""
    rows = [
        DiagnosedFailure(1.0, "n1", "0", 79, "pcie_bus", "pcie_bus", 0.8, "signals"),
        DiagnosedFailure(2.0, "n2", "1", 119, "gsp_driver", "thermal_power", 0.6, "signals"),
        DiagnosedFailure(3.0, "n3", None, 74, "nvlink", "nvlink", 0.95, "xid"),
    ]
    table = confusion_table(rows, [c.name for c in RULES.classes])
    assert ("pcie_bus", "nvlink", "thermal_power", "gsp_driver") == table.classes
    assert {
        "pcie_bus": {"pcie_bus": 1},
        "nvlink": {"nvlink": 1},
        "gsp_driver": {"thermal_power": 1},
    } == table.matrix()
    document = table.to_json()
    assert (3, 2, 2, 1, 1) == (
        document["diagnosed"],
        document["correct"],
        document["from_signals"],
        document["correct_from_signals"],
        document["from_xid"],
    )
    assert (
        "on the diagonal; from precursor signals 1/2, raised by the XID itself 1"
        in (table.lines()[0])
    )


def test_the_alert_text_carries_class_action_and_runbook() -> None:
    """Labels failure_class and action; annotations summary, description and runbook link."""
    model = build_model(RULES, SIGNALS, XIDS, runbook="https://docs.example/docs/diagnosis.md")
    evidence = Evidence((SignalEvidence("pcie_replay", 8.2, "3"),))
    text = alert_text(diagnose(evidence, model), model, "node-07", "3")
    assert {"failure_class": "pcie_bus", "action": "REBOOT"} == text.labels
    assert text.annotations["summary"].startswith("node-07 GPU 3: probably PCIe link")
    assert "pcie_replay (GPU 3) 8.2 sigma from baseline/peers" in text.annotations["description"]
    assert "https://docs.example/docs/diagnosis.md#pcie_bus" == text.annotations["runbook_url"]


LINK = 2.5e10  # bytes/s: 200 Gbps


def _figures(
    backlog: float, queue: float, rtt: float, bytes_per_s: float = 1e8
) -> list[NfsFigures]:
    """Five nodes alike: ``queue`` and ``rtt`` in ms per operation."""
    return [
        NfsFigures(backlog, queue / 1e3, rtt / 1e3, (queue + rtt) / 1e3, bytes_per_s, LINK)
        for _ in range(5)
    ]


BEFORE = _figures(0.002, 0.1, 0.6)


def test_a_storm_waiting_for_rpc_slots_names_the_slots() -> None:
    """The study's paradox: requests queue for slots, the round trip barely moves, links idle."""
    storm = storm_bottleneck(["nfs_transport_backlog"], _figures(0.6, 40.0, 1.2), BEFORE)
    assert "nfs_rpc_slots" == storm.bottleneck
    assert 0.004 == pytest.approx(storm.figures["link_share"])


def test_a_backlog_without_longer_queueing_names_no_slots() -> None:
    """RPCs backlogged a little more often than before, but neither queueing nor the round
    trip grew: nothing held the storm back that the figures can name."""
    before = _figures(0.05, 0.9, 2.7)
    storm = storm_bottleneck(["nfs_rpc_retransmissions"], _figures(0.08, 0.87, 2.6), before)
    assert "unknown" == storm.bottleneck


def test_a_storm_with_a_slow_server_names_the_server() -> None:
    """The round trip grows many times and more than the queueing: the server is slow."""
    storm = storm_bottleneck(["nfs_op_rtt"], _figures(0.3, 4.0, 10.0), BEFORE)
    assert "nfs_server" == storm.bottleneck


def test_a_storm_filling_the_links_names_the_network() -> None:
    """NFS traffic at 80% of the link rate: the wire is the limit."""
    storm = storm_bottleneck(["nfs_op_rtt"], _figures(0.3, 4.0, 10.0, 2.0e10), BEFORE)
    assert "network_bandwidth" == storm.bottleneck


def test_a_storm_without_nfs_signals_has_no_nfs_bottleneck() -> None:
    """A common-mode move of GPU utilisation (a job restart) is no NFS storm."""
    storm = storm_bottleneck(["gpu_util"], _figures(0.6, 40.0, 1.2), BEFORE)
    assert "unknown" == storm.bottleneck
    assert math.isfinite(storm.figures["rtt_ms_per_op"])


def _info(column: int, metric: str, node: str) -> SeriesInfo:
    return SeriesInfo(column, metric, (("node", node),), node, "")


MOUNTSTATS = (
    "node_mountstats_nfs_transport_backlog_queue_total",
    "node_mountstats_nfs_transport_sends_total",
    "node_mountstats_nfs_operations_queue_time_seconds_total",
    "node_mountstats_nfs_operations_response_time_seconds_total",
    "node_mountstats_nfs_operations_request_time_seconds_total",
    "node_mountstats_nfs_operations_requests_total",
    "node_mountstats_nfs_write_bytes_total",
    "node_infiniband_rate_bytes_per_second",
)


def test_the_nfs_meter_turns_mountstats_counters_into_per_operation_figures() -> None:
    """Over 60 s: 100 sends, 20 backlogged; 50 operations with 0.1 s queued, 0.4 s RTT and
    0.6 s in all; 6e8 bytes written on a 2.5e10 B/s link. A tick without a scrape (NaN) keeps
    the last value; a node whose counter went backwards gets no figures."""
    infos = [_info(i, m, "a") for i, m in enumerate(MOUNTSTATS)]
    infos += [_info(len(MOUNTSTATS) + i, m, "b") for i, m in enumerate(MOUNTSTATS)]
    meter = NfsMeter()
    start = [1000.0, 5000.0, 10.0, 40.0, 60.0, 500.0, 1e9, LINK]
    meter.observe(0.0, np.array(start * 2), infos)
    older = meter.snapshot()
    end_a = [1020.0, 5100.0, 10.1, 40.4, 60.6, 550.0, 1.6e9, LINK]
    end_b = [1020.0, 5100.0, 10.1, 40.4, 60.6, 400.0, 1.6e9, LINK]  # requests went backwards
    meter.observe(30.0, np.array(end_a + end_b), infos)
    meter.observe(60.0, np.full(2 * len(MOUNTSTATS), np.nan), infos)  # not scraped: kept
    (figures,) = meter.figures(older, meter.snapshot())
    assert pytest.approx((0.2, 0.002, 0.008, 0.012, 1e7, LINK)) == astuple(figures)


def test_every_class_has_its_runbook_section_in_the_docs() -> None:
    """Alerts link to docs/diagnosis.md#<class>: each class has that anchor."""
    text = (Path(__file__).resolve().parents[1] / "docs" / "diagnosis.md").read_text()
    missing = [c.name for c in RULES.classes if f'<a id="{c.name}"></a>' not in text]
    assert [] == missing


def test_a_history_of_ambiguous_evidence_lowers_the_confidence() -> None:
    """Hot GPUs that went on to fail as thermal_power three times and fell off the bus three
    times: the fitted temperature brings the confidence in either class toward one half."""
    hot = _signals(("gpu_temp", 6.0), ("thermal_violation", 4.0))
    examples = [("thermal_power", hot)] * 3 + [("pcie_bus", hot)] * 3
    model = _model()
    temperature = fit_temperature(examples, model)
    names = [(c, ["gpu_temp", "thermal_violation"]) for c, _ in examples]
    learned = learn_counts(names).model_copy(update={"temperature": temperature})
    untempered = diagnose(hot, _model(learn_counts(names))).confidence
    fitted = diagnose(hot, _model(learned)).confidence
    assert temperature < 1.0
    assert abs(fitted - 0.5) < abs(untempered - 0.5)


def test_a_history_of_clear_evidence_keeps_the_confidence_high() -> None:
    """Six failures each led by its class's characteristic signals: no lower temperature."""
    classes = ["memory_ecc", "pcie_bus", "nvlink", "memory_ecc", "pcie_bus", "nvlink"]
    examples = [(c, _signals(*CHARACTERISTIC[c])) for c in classes]
    assert fit_temperature(examples, _model()) >= 1.0


def test_too_few_failures_fit_no_temperature() -> None:
    """Four failures with precursors are too few to say how sure the model should be."""
    examples = [("pcie_bus", _signals(("pcie_replay", 5.0)))] * 4
    assert 1.0 == fit_temperature(examples, _model())
