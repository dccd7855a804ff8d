"""What ``detector calibrate`` learns for the diagnosis: which signals lead which class.

The examples are the history's detected failures: the class of the XID that followed (rules/
diagnosis.yaml) and the leading signals of the failure's first alert (its precursor evidence,
strongest first, XIDs left out). Each signal counts 1 / rank (the leader 1, the second 1/2, ...),
the weights the model gives evidence without values; a failure whose first alert had no
precursor (the XID raised it) teaches nothing about precursors and is not counted. The counts
go into the calibration file (``Calibration.diagnosis``) and are added to the prior there.

``fit_temperature`` then fits how much the evidence should weigh so that the confidence is
calibrated on those failures (leave-one-out; 1 with too few of them).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence

import numpy as np

from ..config import DiagnosisCounts
from .diagnose import posterior
from .model import DiagnosisModel
from .records import XID_PREFIX, Evidence


def learn_counts(examples: Iterable[tuple[str, Sequence[str]]]) -> DiagnosisCounts:
    """Rank-weighted counts of leading signals per failure class (module docstring) from
    ``(failure class, the first alert's signal names)`` pairs."""
    failures: dict[str, int] = defaultdict(int)
    signals: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for failure_class, names in examples:
        precursors = list(dict.fromkeys(n for n in names if not n.startswith(XID_PREFIX)))
        if not precursors:
            continue
        failures[failure_class] += 1
        for rank, name in enumerate(precursors):
            signals[failure_class][name] += 1.0 / (rank + 1)
    return DiagnosisCounts(
        failures=dict(sorted(failures.items())),
        signals={c: dict(sorted(s.items())) for c, s in sorted(signals.items())},
    )


# Fewer failures with precursors than this: no temperature is fitted (it would be noise).
MIN_FIT_EXAMPLES = 5
TEMPERATURES = tuple(float(t) for t in np.geomspace(0.05, 4.0, 48))


def fit_temperature(examples: Sequence[tuple[str, Evidence]], model: DiagnosisModel) -> float:
    """The temperature (model.py) under which the diagnoses of ``examples`` (the class of the
    XID that followed, the first alert's evidence with its values) are best calibrated: the
    least mean log loss of the true class, each example diagnosed by ``model``'s rules with
    the counts learned from all the other examples (leave-one-out, so an example never
    vouches for itself). 1.0 with fewer than ``MIN_FIT_EXAMPLES`` examples with precursor
    signals."""
    usable = [(c, e.precursors()) for c, e in examples if e.signals]
    if len(usable) < MIN_FIT_EXAMPLES:
        return 1.0
    names = [(c, tuple(s.signal for s in e.signals)) for c, e in usable]
    losses = np.zeros(len(TEMPERATURES))
    for i, (actual, evidence) in enumerate(usable):
        others = learn_counts(names[:i] + names[i + 1 :])
        for k, t in enumerate(TEMPERATURES):
            tempered = others.model_copy(update={"temperature": t})
            rebuilt = model.with_learned(tempered)
            p = posterior(evidence, rebuilt)[rebuilt.index(actual)]
            losses[k] -= math.log(max(p, 1e-9))
    return TEMPERATURES[int(np.argmin(losses))]
