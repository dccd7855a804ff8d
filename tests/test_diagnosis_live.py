"""The diagnosis decided once, in the tick loop (loop/tickloop.py ``Decisions``): each alert is
diagnosed when it starts, the diagnosis is kept for the alert's life (across a restart), its
class and action label the Alertmanager notification, and /metrics shows it with the loop's
recovery figures (evaluation/recovery.py ``RecoveryLog``)."""

from __future__ import annotations

import json

import numpy as np
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from detector.config import load_config, load_signal_rules, load_xid_catalog
from detector.diagnosis import DiagnosisModel, diagnosis_model
from detector.evaluation import RecoveryLog
from detector.loop import Decisions, LoopTick, episode_params
from detector.model import Alert, SignalScore, XidEvent
from detector.pipeline import TickResult
from detector.service.export import Exporter

T0 = 1_735_689_600.0
STEP = 30.0
DOCS = "https://docs.example/gpu-detector/docs"
NODES = ("n1", "n2", "n3", "n4")


def _model() -> DiagnosisModel:
    return diagnosis_model(load_signal_rules(), load_xid_catalog(), docs_url=DOCS)


def _decisions(model: DiagnosisModel | None = None) -> Decisions:
    config = load_config(None, env={})
    return Decisions.from_config(
        config, load_xid_catalog(), episode_params(config), model or _model()
    )


def _tick(t: float, n1_score: float) -> TickResult:
    return TickResult(
        time=t,
        node_names=NODES,
        node_score=np.array([n1_score, 0.05, 0.05, 0.05]),
        gpu_node=np.zeros(0, dtype=np.int64),
        gpu_label=(),
        gpu_score=np.zeros(0),
        xids=(),
        incidents=(),
        column_z=np.zeros(0),
    )


def _step(
    decisions: Decisions,
    t: float,
    score: float,
    signal: str,
    xids: tuple[XidEvent, ...] = (),
) -> LoopTick:
    """One tick on which n1 scores ``score`` with ``signal`` (GPU 3) leading at 9 sigma."""
    return decisions.decide(
        _tick(t, score),
        xids,
        lambda node: ((signal,), "3") if node == 0 else ((), None),
        signal_scores=lambda node: (SignalScore("n1", "3", signal, 9.0),) if node == 0 else (),
    )


def _fire(decisions: Decisions, signal: str = "ecc_sbe_volatile") -> list[LoopTick]:
    """Ticks of n1 scoring high until its alert fires (and a little after)."""
    return [_step(decisions, T0 + i * STEP, 0.95, signal) for i in range(6)]


def _firing(ticks: list[LoopTick]) -> list[dict[str, str]]:
    """Labels and annotations of every firing GPUFailureSuspected notification, in order."""
    return [
        {**dict(n.labels), **dict(n.annotations)}
        for t in ticks
        for n in t.notifications
        if n.ends_at is None and dict(n.labels)["alertname"] == "GPUFailureSuspected"
    ]


def test_an_alert_is_diagnosed_once_when_it_starts_and_labelled_with_it() -> None:
    """The tick an alert starts carries its diagnosis; every notification of the alert has
    its failure_class and action labels and the class's runbook under alerts.docs_url."""
    ticks = _fire(_decisions())
    started = [(t.time, a) for t in ticks for a in t.started]
    diagnosed = [(t.time, key, d) for t in ticks for key, d in t.diagnoses.items()]
    [(start_tick, alert)] = started
    [(diagnosed_tick, key, diagnosis)] = diagnosed
    assert (start_tick, ("n1", alert.start)) == (diagnosed_tick, key)
    assert ("memory_ecc", "RESET_GPU", "signals") == (
        diagnosis.failure_class,
        diagnosis.action,
        diagnosis.basis,
    )
    notes = _firing(ticks)
    assert notes
    for note in notes:
        assert ("memory_ecc", "RESET_GPU") == (note["failure_class"], note["action"])
        assert f"{DOCS}/diagnosis.md#memory_ecc" == note["runbook_url"]
        assert note["summary"].startswith("n1 GPU 3: probably GPU memory")
        assert "ecc_sbe_volatile (GPU 3) 9.0 sigma from baseline/peers" in note["description"]


def test_a_failure_xid_after_the_start_keeps_the_labels_and_names_its_class() -> None:
    """An XID 79 (pcie_bus) on an alert diagnosed memory_ecc escalates it to critical with the
    same class labels; the XID's class is the xid_failure_class annotation."""
    decisions = _decisions()
    ticks = _fire(decisions)
    t = T0 + len(ticks) * STEP
    xid = XidEvent(t, "n1", "3", 79, source="kmsg")
    ticks.append(_step(decisions, t, 0.95, "ecc_sbe_volatile", (xid,)))
    critical = [n for n in _firing(ticks) if n["severity"] == "critical"]
    assert critical
    last = critical[-1]
    assert ("memory_ecc", "RESET_GPU", "pcie_bus") == (
        last["failure_class"],
        last["action"],
        last["xid_failure_class"],
    )
    assert "XID 79 followed on the node: its class is pcie_bus" in last["description"]


def test_a_restarted_loop_keeps_the_diagnosis_its_alert_started_with() -> None:
    """State written while the alert fires, restored into a fresh loop (through JSON as the
    state file does): the alert keeps its class although its evidence now points elsewhere."""
    before = _decisions()
    ticks = _fire(before)
    [alert] = before.alerts.open_alerts()
    arrays, meta = before.state_dict()
    after = _decisions()
    after.load_state_dict(arrays, json.loads(json.dumps(meta)))
    assert before.diagnosis_of(alert) == after.diagnosis_of(alert)
    t = T0 + len(ticks) * STEP + 600.0  # past the resend interval: a fresh notification
    resumed = [_step(after, t, 0.95, "gpu_temp")]
    assert {("memory_ecc", "RESET_GPU")} == {
        (n["failure_class"], n["action"]) for n in _firing(resumed)
    }
    assert {} == dict(resumed[0].diagnoses)  # nothing diagnosed anew


def test_a_loop_without_a_model_sends_no_class() -> None:
    """Decisions built without a diagnosis model (by hand) label no class and diagnose
    nothing: the policy's own summary and description go out."""
    config = load_config(None, env={})
    decisions = Decisions.from_config(config, load_xid_catalog(), episode_params(config))
    ticks = _fire(decisions)
    notes = _firing(ticks)
    assert notes
    assert all("failure_class" not in n and "runbook_url" not in n for n in notes)
    assert [] == [d for t in ticks for d in t.diagnoses.values()]


def _samples(exporter: Exporter) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    body, _ = exporter.render()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(body.decode())
        for s in family.samples
    }


def _export(exporter: Exporter, decisions: Decisions, tick: LoopTick) -> None:
    """What the daemon exports of the loop after a tick (service/daemon.py ``_export``)."""
    exporter.observe_tick(tick, 0.01)
    open_alerts = decisions.alerts.open_alerts()
    exporter.set_alert_diagnoses(
        (a, d) for a in open_alerts if (d := decisions.diagnosis_of(a)) is not None
    )
    exporter.set_recovery(decisions.recovery.figures(tick.time))


def test_metrics_show_each_open_alerts_diagnosis_until_it_ends() -> None:
    """detector_alert_diagnosis{node,gpu,failure_class,action} = confidence while the alert is
    open, gone once it ended; detector_diagnoses_total counts it once."""
    decisions, exporter = _decisions(), Exporter(CollectorRegistry())
    ticks = _fire(decisions)
    for tick in ticks:
        _export(exporter, decisions, tick)
    [diagnosis] = [d for t in ticks for d in t.diagnoses.values()]
    labels = (("action", "RESET_GPU"), ("failure_class", "memory_ecc"), ("gpu", "3"))
    key = ("detector_alert_diagnosis", (*labels, ("node", "n1")))
    found = _samples(exporter)
    assert diagnosis.confidence == found[key]
    total = ("detector_diagnoses_total", (("failure_class", "memory_ecc"),))
    assert 1.0 == found[total]
    t = ticks[-1].time
    for i in range(1, 12):  # the score falls: the alert resolves
        _export(exporter, decisions, _step(decisions, t + i * STEP, 0.01, "ecc_sbe_volatile"))
    assert [] == decisions.alerts.open_alerts()
    found = _samples(exporter)
    assert key not in found
    assert 1.0 == found[total]


def test_metrics_show_failure_concentration_and_repeat_offenders() -> None:
    """Failure XIDs of the loop on 4 nodes: n1 failed twice (a second failure after its
    repair) and holds 2 of 3 failures, the top 3 nodes all of them; n1 is a repeat offender
    to replace."""
    decisions, exporter = _decisions(), Exporter(CollectorRegistry())
    failures = [
        XidEvent(T0 + 60, "n1", "3", 79, end=T0 + 600),
        XidEvent(T0 + 7200, "n1", "3", 79, end=T0 + 8000),
        XidEvent(T0 + 7200, "n2", "0", 48, end=T0 + 8000),
    ]
    for i in range(int(8000 / STEP)):
        t = T0 + i * STEP
        due = tuple(e for e in failures if t - STEP < e.time <= t)
        tick = decisions.decide(_tick(t, 0.05), due, lambda node: ((), None))
        _export(exporter, decisions, tick)
    found = _samples(exporter)
    ratios = {
        dict(labels)["top_k"]: v
        for (name, labels), v in found.items()
        if name == "detector_failure_concentration_ratio"
    }
    assert {"1": 2 / 3, "3": 1.0} == ratios  # no exclusions; top 5 and 10 exceed 4 nodes
    offenders = {k[1]: v for k, v in found.items() if k[0] == "detector_repeat_offender"}
    assert {(("node", "n1"), ("recommendation", "replace")): 1.0} == offenders


def test_the_recovery_log_survives_a_restart() -> None:
    """state_dict through JSON and back: the same figures."""
    log = RecoveryLog(3600.0, 300.0)
    log.update(T0, len(NODES), failures=[XidEvent(T0, "n1", "3", 79, end=T0 + 60)])
    log.update(T0 + 30, len(NODES), notified=[Alert("n1", "3", T0 + 30, None, 0.9, ("gpu_temp",))])
    log.update(T0 + 4000, len(NODES), failures=[XidEvent(T0 + 4000, "n1", None, 48)])
    log.update(T0 + 4100, len(NODES), excluded=["n1"])
    restored = RecoveryLog(3600.0, 300.0)
    restored.load_state_dict(json.loads(json.dumps(log.state_dict())))
    assert log.figures(T0 + 5000) == restored.figures(T0 + 5000)
    assert ["failures", "exclusions"] == [c.what for c in log.figures(T0 + 5000).concentration]
