"""The diagnosis in ``detector replay`` and ``detector calibrate`` (detector/diagnosis/ is the
model, ``detector.diagnosis.diagnosis_model`` builds it; docs/diagnosis.md is the guide).

- ``alert_diagnosis`` / ``alert_diagnoses``: each alert's diagnosis when it started.
- ``diagnosis_confusion``: per detected failure, the class diagnosed when its first alert
  started against the class of the XID that followed (the terminal table, the report JSON's
  ``diagnosis`` and the HTML report's table).
- ``learn_diagnosis``: what calibrate stores: the leading signals of each detected failure's
  first alert, counted per class of its XID (``diagnosis.learn_counts``), and the fitted
  confidence temperature.
- ``storm_rows`` / ``storm_lines``: the cluster incidents' bottlenecks, for the report JSON
  and the terminal.
- ``report_document``: the ``--report-json`` document: the evaluation's (contract keys
  unchanged) plus ``alerts[].failure_class``, ``alerts[].action``, ``alerts[].confidence`` and
  the top-level ``diagnosis`` (the confusion table, and ``storms``: each of the loop's cluster
  incidents, loop/incidents.py, with its bottleneck and figures), and, given the recovery
  analytics, the top-level ``recovery`` (replay/recovery.py).
"""

from __future__ import annotations

import math
import time
from typing import Any

from ..config import DiagnosisCounts
from ..diagnosis import (
    Confusion,
    DiagnosedFailure,
    Diagnosis,
    DiagnosisModel,
    Evidence,
    confusion_table,
    diagnose,
    fit_temperature,
    learn_counts,
)
from ..model import Alert
from .recovery import Recovery
from .run import ReplayResult


def alert_diagnosis(result: ReplayResult, alert: Alert) -> Diagnosis | None:
    """The diagnosis ``alert`` had when it started; one from its signal names where the replay
    kept none (alerts re-run at another threshold); None without a model."""
    model = result.diagnosis_model
    if model is None:
        return None
    found = result.diagnoses.get((alert.node, alert.start))
    return found if found is not None else diagnose(Evidence.from_names(alert.signals), model)


def alert_diagnoses(result: ReplayResult) -> dict[tuple[str, float], Diagnosis]:
    """Every alert's diagnosis (``alert_diagnosis``) by (node, start); empty without a model."""
    found = {(a.node, a.start): alert_diagnosis(result, a) for a in result.alerts}
    return {key: d for key, d in found.items() if d is not None}


def diagnosis_confusion(result: ReplayResult) -> Confusion | None:
    """The confusion table of the replay's detected failures (module docstring); None without
    a model."""
    model = result.diagnosis_model
    if model is None:
        return None
    rows: list[DiagnosedFailure] = []
    for row in result.evaluation.failures:
        if row.first_alert is None:
            continue
        found = alert_diagnosis(result, row.first_alert)
        assert found is not None
        event = row.event
        rows.append(
            DiagnosedFailure(
                time=event.time,
                node=event.node,
                gpu=event.gpu,
                xid=event.xid,
                actual=model.class_of_xid(event.xid),
                predicted=found.failure_class,
                confidence=found.confidence,
                basis=found.basis,
                lead_time_s=row.lead_time_s,
            )
        )
    return confusion_table(rows, model.classes)


def learn_diagnosis(result: ReplayResult, model: DiagnosisModel) -> DiagnosisCounts:
    """What calibrate stores: each detected failure's first alert's leading signals (names,
    strongest first), counted under the class of the failure's XID (once per alert and
    class), and the temperature that
    calibrates the confidence on those failures (``diagnosis.fit_temperature``, from the
    evidence each first alert had when it started)."""
    # one alert first for two failures of one class (XID 48, then 95 on the same GPU) is one
    # example, not two
    unique = {
        (model.class_of_xid(row.event.xid), row.first_alert.node, row.first_alert.start): (
            model.class_of_xid(row.event.xid),
            row.first_alert,
        )
        for row in result.evaluation.failures
        if row.first_alert is not None
    }
    firsts = list(unique.values())
    counts = learn_counts((c, alert.signals) for c, alert in firsts)
    examples = []
    for c, alert in firsts:
        found = result.diagnoses.get((alert.node, alert.start))
        examples.append((c, found.evidence if found else Evidence.from_names(alert.signals)))
    temperature = fit_temperature(examples, model)
    return counts.model_copy(update={"temperature": temperature})


def describe_learned(counts: DiagnosisCounts | None) -> str:
    """One line on what the diagnosis model learned from history (calibrate and replay)."""
    if counts is None:
        return "the prior of rules/diagnosis.yaml (detector calibrate learns from history)"
    if not counts.failures:
        return "the prior of rules/diagnosis.yaml; nothing learned (no failure had a precursor)"
    listed = ", ".join(f"{c} {n}" for c, n in counts.failures.items())
    total = sum(counts.failures.values())
    fitted = (
        f"; confidence temperature {counts.temperature:.2f}"
        if counts.temperature != 1.0
        else "; confidence not refitted (too few failures)"
    )
    return f"the prior plus the leading signals of {total} failures learned ({listed}){fitted}"


def report_document(result: ReplayResult, recovery: Recovery | None = None) -> dict[str, Any]:
    """The ``--report-json`` document (module docstring)."""
    document = result.evaluation.to_json()
    confusion = diagnosis_confusion(result)
    if confusion is not None:
        _add_diagnosis(document, result, confusion)
    if recovery is not None:
        document["recovery"] = recovery.to_json()
    return document


def _add_diagnosis(document: dict[str, Any], result: ReplayResult, confusion: Confusion) -> None:
    for row, entry in zip(result.evaluation.alerts, document["alerts"], strict=True):
        found = alert_diagnosis(result, row.alert)
        assert found is not None
        entry["failure_class"] = found.failure_class
        entry["action"] = found.action
        entry["confidence"] = round(found.confidence, 4)
    document["diagnosis"] = {**confusion.to_json(), "storms": storm_rows(result)}


def storm_rows(result: ReplayResult) -> list[dict[str, Any]]:
    """Each cluster incident with its bottleneck and figures (NaN figures as null)."""
    return [
        {
            "id": storm.id,
            "start": storm.start,
            "end": storm.end,
            "signals": list(storm.signals),
            "bottleneck": storm.diagnosis.bottleneck,
            "reason": storm.diagnosis.reason,
            "figures": {
                k: (None if math.isnan(v) else round(v, 6))
                for k, v in storm.diagnosis.figures.items()
            },
        }
        for storm in result.storms
    ]


def storm_lines(result: ReplayResult) -> list[str]:
    """The terminal's account of the cluster incidents' bottlenecks: one line per kind."""
    if not result.storms:
        return []
    by_kind: dict[str, list[float]] = {}
    for storm in result.storms:
        by_kind.setdefault(storm.diagnosis.bottleneck, []).append(storm.start)
    counted = ", ".join(f"{kind} {len(starts)}" for kind, starts in sorted(by_kind.items()))
    lines = [f"cluster incidents by bottleneck: {counted}"]
    named = [s for s in result.storms if s.diagnosis.bottleneck != "unknown"]
    if named:
        worst = max(named, key=lambda s: s.diagnosis.figures["rtt_ms_per_op"])
        lines.append(
            f"  e.g. the storm of {_utc(worst.start)}: {worst.diagnosis.bottleneck}: "
            f"{worst.diagnosis.reason}"
        )
    return lines


def _utc(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(t))
