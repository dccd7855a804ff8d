"""What ``detector calibrate`` learns for the diagnosis: which signals lead which class.

The examples are the history's detected failures: the class of the XID that followed (rules/
diagnosis.yaml) and the leading signals of the failure's first alert (its precursor evidence,
strongest first, XIDs left out). Each signal counts 1 / rank (the leader 1, the second 1/2, ...),
the weights the model gives evidence without values; a failure whose first alert had no
precursor (the XID raised it) teaches nothing about precursors and is not counted. The counts
go into the calibration file (``Calibration.diagnosis``) and are added to the prior there.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence

from ..config import DiagnosisCounts
from .records import XID_PREFIX


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
