"""``diagnose(evidence, model) -> Diagnosis``: what probably failed, how sure, what to do.

With a failure XID in the evidence (the alert was forced by it) the class is the XID's class
of rules/diagnosis.yaml and the action the XID's own in the XID catalog, confidence
``XID_CONFIDENCE``: the XID says what failed; the doubt left is the cause behind it (a GPU that
overheated may fall off the bus). Otherwise the model (model.py) scores the leading signals
per class; signals no class knows (metrics only the default rule scores) carry no evidence.
With no evidence left the class is 'unknown' and its confidence the prior's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..config import UNKNOWN_CLASS
from ..model import FloatArray
from .model import DiagnosisModel, evidence_weights
from .records import Diagnosis, Evidence, SignalEvidence

# An XID names what failed; 1 - this is left for the cause behind it.
XID_CONFIDENCE = 0.95


@dataclass(frozen=True, slots=True)
class _Scored:
    known: list[SignalEvidence]  # the signals that counted, strongest first, once each
    contributions: FloatArray  # classes x known: tempered log-likelihood of each
    posterior: FloatArray  # per class


def _score(evidence: Evidence, model: DiagnosisModel) -> _Scored:
    column = {name: j for j, name in enumerate(model.signals)}
    known: list[SignalEvidence] = []  # the first (strongest) column of each signal
    for e in evidence.signals:
        if e.signal in column and all(k.signal != e.signal for k in known):
            known.append(e)
    weights = evidence_weights([e.z for e in known])
    tempering = model.temperature / math.sqrt(sum(weights)) if weights else 0.0
    contributions = np.zeros((len(model.classes), len(known)))
    for i, (e, r) in enumerate(zip(known, weights, strict=True)):
        contributions[:, i] = tempering * r * model.log_likelihood[:, column[e.signal]]
    score = model.log_prior + contributions.sum(axis=1)
    posterior = np.exp(score - score.max())
    return _Scored(known, contributions, posterior / posterior.sum())


def posterior(evidence: Evidence, model: DiagnosisModel) -> tuple[float, ...]:
    """The model's probability of each class (``model.classes`` order) given the evidence's
    signals (its XIDs are not looked at)."""
    return tuple(_score(evidence, model).posterior.tolist())


def diagnose(evidence: Evidence, model: DiagnosisModel) -> Diagnosis:
    """The diagnosis of one alert's ``evidence`` (module docstring)."""
    if evidence.xids:
        code = evidence.xids[0]  # the first failure XID: those after it are its aftermath
        failure_class = model.class_of_xid(code)
        return Diagnosis(
            failure_class=failure_class,
            confidence=XID_CONFIDENCE,
            action=model.action_of_xid(code),
            evidence=evidence,
            title=model.titles[model.index(failure_class)],
            basis="xid",
        )
    scored = _score(evidence, model)
    order = np.argsort(-scored.posterior, kind="stable").tolist()
    best = int(order[0]) if scored.known else model.index(UNKNOWN_CLASS)
    second = next((int(c) for c in order if c != best), best)
    why = tuple(
        (e.signal, float(scored.contributions[best, i] - scored.contributions[second, i]))
        for i, e in enumerate(scored.known)
    )
    return Diagnosis(
        failure_class=model.classes[best],
        confidence=float(scored.posterior[best]),
        action=model.actions[best],
        evidence=evidence,
        title=model.titles[best],
        basis="signals" if scored.known else "none",
        why=why,
        runner_up=model.classes[second] if second != best else "",
    )
