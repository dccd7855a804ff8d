"""The diagnosis model: a small, explainable, frozen record built from rules/diagnosis.yaml
(the documented prior) and, when ``detector calibrate`` learned from history, the counts it
stored in the calibration file.

A tempered naive Bayes over an alert's leading signals. For class c and signal s:

    P(s | c) = (prior_strength * w[c, s] / sum_s' w[c, s'] + n[c, s] + smoothing) / (row sum)

where w is the prior weight of rules/diagnosis.yaml and n the learned rank-weighted count of
s leading the first alert of a failure of class c. Class priors are prior_strength plus the
failures learned per class (plus the smoothing). An alert's evidence s_1..s_k (strongest
first) with deviations z_1..z_k counts with r_i = z_i / z_1 (rank weights 1/i without
values), and the log-likelihood sum is multiplied by 1 / sqrt(sum r_i): leading signals are
correlated (the SBE rate and the SBE total move together), so k signals are worth about
sqrt(k) independent votes, not k. That tempering keeps the posterior (the confidence) from
claiming certainty from redundant signals. A calibration that learned from enough failures
also fits a temperature multiplying the evidence (learn.fit_temperature), so that the
confidence says how often such a diagnosis was right on that history.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..config import (
    UNKNOWN_CLASS,
    Calibration,
    DiagnosisCounts,
    DiagnosisRules,
    SignalCatalog,
    XidCatalog,
    load_diagnosis_rules,
)
from ..model import FloatArray


@dataclass(frozen=True, slots=True)
class DiagnosisModel:
    """Classes, their titles and actions, the signal vocabulary and the log tables (read-only
    arrays: ``log_likelihood[class, signal]``, ``log_prior[class]``), the XID classes and
    actions, the runbook base address, and the learned counts it was built with (None: prior
    only)."""

    classes: tuple[str, ...]
    titles: tuple[str, ...]
    actions: tuple[str, ...]
    signals: tuple[str, ...]
    log_likelihood: FloatArray
    log_prior: FloatArray
    xid_class: Mapping[int, str]
    xid_action: Mapping[int, str]
    unknown_action: str
    runbook: str = ""
    learned: DiagnosisCounts | None = None
    temperature: float = 1.0  # multiplies the evidence (learn.fit_temperature)
    sources: tuple[DiagnosisRules, SignalCatalog, XidCatalog] | None = None  # built from

    def with_learned(self, learned: DiagnosisCounts | None) -> DiagnosisModel:
        """The model of the same rules, catalogs and runbook with other learned counts."""
        if self.sources is None:
            raise ValueError("a model not made by build_model cannot be rebuilt")
        return build_model(*self.sources, learned, runbook=self.runbook)

    def index(self, failure_class: str) -> int:
        return self.classes.index(failure_class)

    def class_of_xid(self, code: int) -> str:
        return self.xid_class.get(code, UNKNOWN_CLASS)

    def action_of_xid(self, code: int) -> str:
        return self.xid_action.get(code, self.unknown_action)

    def runbook_url(self, failure_class: str) -> str:
        return f"{self.runbook}#{failure_class}" if self.runbook else f"#{failure_class}"


def build_model(
    rules: DiagnosisRules,
    signals: SignalCatalog,
    xids: XidCatalog,
    learned: DiagnosisCounts | None = None,
    *,
    runbook: str = "",
) -> DiagnosisModel:
    """The model of ``rules`` (checked against the catalogs by the caller), plus ``learned``
    counts when given (their classes and signals outside the rules are ignored: a calibration
    file fitted with other rules must not invent classes). ``runbook``: the address of
    docs/diagnosis.md, a class's runbook being its ``#<class>`` anchor."""
    classes = tuple(c.name for c in rules.classes)
    vocabulary = [rule.name for rule in signals.signals if rule.truth is None]
    names = {name: i for i, name in enumerate(vocabulary)}
    for cls in rules.classes:  # signals the prior names but a custom catalog lacks still count
        for signal in cls.signals:
            names.setdefault(signal, len(names))
    counts = np.zeros((len(classes), len(names)))
    failures = np.zeros(len(classes))
    for i, cls in enumerate(rules.classes):
        total = sum(cls.signals.values())
        for signal, weight in cls.signals.items():
            counts[i, names[signal]] = rules.prior_strength * weight / total
        if learned is not None:
            failures[i] = learned.failures.get(cls.name, 0)
            for signal, n in learned.signals.get(cls.name, {}).items():
                if signal in names:
                    counts[i, names[signal]] += n
    counts += rules.smoothing
    log_likelihood = np.log(counts / counts.sum(axis=1, keepdims=True))
    prior = rules.prior_strength + failures + rules.smoothing
    log_prior = np.log(prior / prior.sum())
    log_likelihood.setflags(write=False)
    log_prior.setflags(write=False)
    xid_class = {x.code: rules.class_of_xid(x.code) for x in xids.xids}
    for cls in rules.classes:
        xid_class.update(dict.fromkeys(cls.xids, cls.name))
    return DiagnosisModel(
        classes=classes,
        titles=tuple(c.title for c in rules.classes),
        actions=tuple(rules.action_of(c, xids) for c in classes),
        signals=tuple(names),
        log_likelihood=log_likelihood,
        log_prior=log_prior,
        xid_class=xid_class,
        xid_action={x.code: x.action for x in xids.xids},
        unknown_action=xids.unknown.action,
        runbook=runbook,
        learned=learned,
        temperature=learned.temperature if learned is not None else 1.0,
        sources=(rules, signals, xids),
    )


def diagnosis_model(
    signals: SignalCatalog,
    xids: XidCatalog,
    calibration: Calibration | None = None,
    rules: Path | None = None,
    *,
    docs_url: str = "",
) -> DiagnosisModel:
    """The model for the catalogs in use (a pipeline's ``signal_map.catalog`` and
    ``xid_catalog``): ``rules`` (default: the built-in rules/diagnosis.yaml) checked against
    them (ConfigError naming the file), plus what the calibration file learned; runbooks
    under ``docs_url`` (the docs/ folder: ``alerts.docs_url``). What the shared tick loop
    builds once (``TickLoop.from_config``) for ``run``, ``replay`` and ``calibrate``."""
    taxonomy = load_diagnosis_rules(rules)
    where = str(rules) if rules is not None else "rules/diagnosis.yaml (built in)"
    taxonomy.check_against(signals, xids, where)
    learned = calibration.diagnosis if calibration is not None else None
    runbook = f"{docs_url.rstrip('/')}/diagnosis.md" if docs_url else ""
    return build_model(taxonomy, signals, xids, learned, runbook=runbook)


def evidence_weights(z: list[float]) -> list[float]:
    """r_i of the module doc: z_i / z_1 for values (the strongest counts 1), rank weights
    1 / i where a value is unknown (NaN) or not positive."""
    if z and all(math.isfinite(v) and v > 0 for v in z):
        top = max(z)
        return [v / top for v in z]
    return [1.0 / (i + 1) for i in range(len(z))]
