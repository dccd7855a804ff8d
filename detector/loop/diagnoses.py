"""Each open alert's diagnosis, decided once, when the alert starts (step 3 of tickloop.py).

``AlertDiagnoses.update`` diagnoses the alerts that have no diagnosis yet (``diagnosis.
diagnose`` on the alert's leading signals with their values when the driver can read them,
else its signal names) and keeps it while the alert is open: Alertmanager identifies an alert
by its labels, so the class and action it is labelled with stay those of its start
(``AlertPolicy`` reads them). ``state_dict`` / ``load_state_dict`` carry them across a restart;
a state written before diagnoses were kept restores none, and the open alerts are then
diagnosed anew on the next tick. Without a model (a loop built by hand) nothing is diagnosed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..diagnosis import Diagnosis, DiagnosisModel, Evidence, diagnose
from ..model import Alert, SignalScore

AlertKey = tuple[str, float]  # (node, start): an alert episode
SignalScoresFn = Callable[[int], Sequence[SignalScore]]  # node id -> its leading columns


class AlertDiagnoses:
    """See the module docstring."""

    def __init__(self, model: DiagnosisModel | None) -> None:
        self.model = model
        self._open: dict[AlertKey, Diagnosis] = {}

    def update(
        self,
        node_names: Sequence[str],
        alerts: Sequence[Alert],
        signal_scores: SignalScoresFn | None,
    ) -> dict[AlertKey, Diagnosis]:
        """Diagnose ``alerts`` that have none yet (those that started this tick) from their
        evidence now (``signal_scores`` by node id in ``node_names``); returns the new ones."""
        model = self.model
        new = {(a.node, a.start): a for a in alerts if (a.node, a.start) not in self._open}
        if model is None or not new:
            return {}
        index = {name: i for i, name in enumerate(node_names)}
        found: dict[AlertKey, Diagnosis] = {}
        for key, alert in new.items():
            i = index.get(alert.node)
            scores = signal_scores(i) if signal_scores is not None and i is not None else ()
            found[key] = diagnose(Evidence.of_alert(alert.signals, scores), model)
        self._open.update(found)
        return found

    def keep(self, open_alerts: Sequence[Alert]) -> None:
        """Forget the diagnoses of alerts no longer open."""
        keys = {(a.node, a.start) for a in open_alerts}
        self._open = {k: d for k, d in self._open.items() if k in keys}

    def of(self, alert: Alert) -> Diagnosis | None:
        """The diagnosis an open alert has kept since it started (None: none)."""
        return self._open.get((alert.node, alert.start))

    @property
    def open(self) -> Mapping[AlertKey, Diagnosis]:
        return self._open

    def class_of_xid(self, code: int) -> str | None:
        """The failure class of an XID code (None without a model)."""
        return self.model.class_of_xid(code) if self.model is not None else None

    def state_dict(self) -> list[list[Any]]:
        return [[node, start, d.to_state()] for (node, start), d in self._open.items()]

    def load_state_dict(self, state: list[list[Any]]) -> None:
        """Restore ``state_dict`` output; KeyError, TypeError or ValueError when malformed,
        leaving the diagnoses as they were."""
        self._open = {
            (str(node), float(start)): Diagnosis.from_state(d) for node, start, d in state
        }
