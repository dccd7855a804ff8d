"""The Alertmanager labels and annotations of a diagnosed alert: what the shared tick loop adds
to the alert it sends (alerting/sender.py builds the rest).

Labels (for routing and silences, low cardinality): ``failure_class`` and ``action``.
Annotations (for people): ``summary`` (one line), ``description`` (the evidence and why),
``runbook_url`` (the class's section of docs/diagnosis.md).

Alertmanager identifies an alert by its labels, so an alert keeps the class it was diagnosed
with when it started. A failure XID that arrives later (``xids_since``) does not relabel it:
its class goes into the ``xid_failure_class`` annotation and the description.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from .model import DiagnosisModel
from .records import Diagnosis


@dataclass(frozen=True, slots=True)
class AlertText:
    labels: dict[str, str]
    annotations: dict[str, str]


def alert_text(
    diagnosis: Diagnosis,
    model: DiagnosisModel,
    node: str,
    gpu: str | None = None,
    *,
    xids_since: Sequence[int] = (),
) -> AlertText:
    """Labels and annotations for the alert on ``node`` (and ``gpu``) diagnosed ``diagnosis``
    when it started; ``xids_since``: failure XIDs on the node since then (module docstring)."""
    where = node if gpu is None else f"{node} GPU {gpu}"
    summary = (
        f"{where}: probably {diagnosis.title or diagnosis.failure_class} "
        f"({diagnosis.failure_class}, {diagnosis.confidence:.0%}); "
        f"recommended action {diagnosis.action}"
    )
    parts: list[str] = []
    if diagnosis.evidence.xids:
        codes = ", ".join(str(x) for x in diagnosis.evidence.xids)
        parts.append(f"XID {codes} on the node: its class is {diagnosis.failure_class}.")
    shown = []
    for e in diagnosis.evidence.signals:
        value = "" if math.isnan(e.z) else f" {e.z:.1f} sigma from baseline/peers"
        on = "" if e.gpu is None else f" (GPU {e.gpu})"
        shown.append(f"{e.signal}{on}{value}")
    if shown:
        parts.append("Leading signals: " + "; ".join(shown) + ".")
    counted = [(s, v) for s, v in diagnosis.why if v > 0]
    if counted and diagnosis.runner_up:
        favour = ", ".join(f"{s} (+{v:.1f})" for s, v in counted)
        parts.append(f"Favouring {diagnosis.failure_class} over {diagnosis.runner_up}: {favour}.")
    if diagnosis.basis == "none":
        parts.append("No leading signal any failure class knows: the diagnosis is the prior's.")
    annotations = {"summary": summary}
    later = [x for x in xids_since if x not in diagnosis.evidence.xids]
    if later:
        xid_class = model.class_of_xid(later[0])
        annotations["xid_failure_class"] = xid_class
        parts.append(
            f"XID {later[0]} followed on the node: its class is {xid_class} (the alert keeps "
            f"the class diagnosed when it started)."
        )
    annotations["description"] = " ".join(parts)
    annotations["runbook_url"] = model.runbook_url(diagnosis.failure_class)
    return AlertText(
        labels={"failure_class": diagnosis.failure_class, "action": diagnosis.action},
        annotations=annotations,
    )
