"""The records a diagnosis reads and returns: frozen, no behaviour beyond trivial helpers."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..model import SignalScore

XID_PREFIX = "xid_"  # how an alert names a failure XID that forced it (pipeline/tick.py)


@dataclass(frozen=True, slots=True)
class SignalEvidence:
    """One leading signal of an alert: its deviation from its baseline or peers at the alert's
    peak, as the fused column score (robust sigmas, weighted; NaN when only the name is known,
    e.g. an alert re-run from recorded leading signals)."""

    signal: str
    z: float = math.nan
    gpu: str | None = None


@dataclass(frozen=True, slots=True)
class Evidence:
    """What an alert says about its node: the leading signals, strongest first, and the
    failure XIDs that forced it (in the order they came)."""

    signals: tuple[SignalEvidence, ...] = ()
    xids: tuple[int, ...] = ()

    @staticmethod
    def from_names(names: Sequence[str]) -> Evidence:
        """From an alert's signal names (``Alert.signals``): ``xid_<code>`` are the XIDs, the
        rest precursor signals without values."""
        xids: list[int] = []
        signals: list[SignalEvidence] = []
        for name in names:
            code = name[len(XID_PREFIX) :] if name.startswith(XID_PREFIX) else ""
            if code.isdigit():
                xids.append(int(code))
            else:
                signals.append(SignalEvidence(name))
        return Evidence(tuple(signals), tuple(xids))

    @staticmethod
    def of_alert(names: Sequence[str], scores: Sequence[SignalScore] = ()) -> Evidence:
        """An alert's evidence: the XIDs its signal names carry (``xid_<code>``), and its
        leading columns with their values (``Pipeline.node_evidence``) when known, else its
        signal names without values."""
        named = Evidence.from_names(list(names))
        if not scores:
            return named
        signals = tuple(SignalEvidence(s.signal, float(s.score), s.gpu) for s in scores)
        return Evidence(signals, named.xids)

    def precursors(self) -> Evidence:
        """The same evidence without its XIDs: what was known before the failure."""
        return Evidence(self.signals, ())


@dataclass(frozen=True, slots=True)
class Diagnosis:
    """What probably failed and what to do about it.

    - ``failure_class``: a class of rules/diagnosis.yaml ('unknown' when nothing explains it).
    - ``confidence``: the model's probability of that class in [0, 1] (module model.py).
    - ``action``: the recommended action (the XID's own when an XID forced the alert, else the
      class's: rules/diagnosis.yaml, from the XID catalog).
    - ``basis``: "xid" (an XID said it), "signals" (the leading signals), "none" (no evidence
      any class knows: the prior alone).
    - ``why``: per signal that counted, how much it favoured this class over the runner-up
      (log-likelihood ratio, tempered as the model does; positive: for this class).
    - ``runner_up``: the next most likely class ("" with an XID).
    """

    failure_class: str
    confidence: float
    action: str
    evidence: Evidence
    title: str = ""
    basis: str = "signals"
    why: tuple[tuple[str, float], ...] = ()
    runner_up: str = ""

    def to_state(self) -> dict[str, Any]:
        """JSON-able (a NaN value as null): kept with its alert in the daemon's state file."""
        return {
            "failure_class": self.failure_class,
            "confidence": self.confidence,
            "action": self.action,
            "signals": [
                [e.signal, None if math.isnan(e.z) else e.z, e.gpu] for e in self.evidence.signals
            ],
            "xids": list(self.evidence.xids),
            "title": self.title,
            "basis": self.basis,
            "why": [list(w) for w in self.why],
            "runner_up": self.runner_up,
        }

    @staticmethod
    def from_state(state: dict[str, Any]) -> Diagnosis:
        """``to_state`` output back; KeyError, TypeError or ValueError when malformed."""
        signals = tuple(
            SignalEvidence(str(name), math.nan if z is None else float(z), _gpu(gpu))
            for name, z, gpu in state["signals"]
        )
        return Diagnosis(
            failure_class=str(state["failure_class"]),
            confidence=float(state["confidence"]),
            action=str(state["action"]),
            evidence=Evidence(signals, tuple(int(x) for x in state["xids"])),
            title=str(state["title"]),
            basis=str(state["basis"]),
            why=tuple((str(name), float(v)) for name, v in state["why"]),
            runner_up=str(state["runner_up"]),
        )


def _gpu(gpu: object) -> str | None:
    return None if gpu is None else str(gpu)
