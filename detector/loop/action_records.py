"""The records the action engine takes and gives: candidates in, decisions out.

Small frozen records, JSON-able through ``as_dict``/``from_dict`` where they live in the state
file (``Exclusion``). No I/O.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from ..model import Alert, XidEvent

__all__ = ["ActionRequest", "ActionStats", "Candidate", "Decision", "Exclusion", "alert_id"]

Action = Literal["exclude", "release"]
# Why a confirmed failure was not acted on (the ``result`` label of detector_actions_total is
# "refused_<reason>").
Refusal = Literal["shadow", "cluster_incident", "breaker_open", "rate_cap", "share_cap"]


def alert_id(node: str, gpu: str | None, start: float, xid: int | None = None) -> str:
    """A stable id of one alert episode (or one failure XID): the same alert gets the same id
    in every tick and after a restart, so it is acted on at most once."""
    where = f"{node}/{gpu if gpu else '-'}@{start:.0f}"
    return where if xid is None else f"xid{xid}:{where}"


@dataclass(frozen=True, slots=True)
class Candidate:
    """A possible trigger for an exclusion, handed to the engine every tick it holds.

    ``source`` "xid": a failure XID (confirmed at once when ``actions.on_failure_xid``).
    ``source`` "alert": a firing alert with its ``score`` this tick; confirmed once its class is
    in ``actions.alert_classes`` and the score has stayed >= ``alert_min_score`` for
    ``alert_hold_s``. ``incident``: the alert is part of a cluster incident (never acted on).
    ``failure_class`` is the diagnosis' class when there is one (None until then).
    """

    source: Literal["xid", "alert"]
    node: str
    gpu: str | None
    start: float
    score: float
    peak_score: float
    signals: tuple[str, ...] = ()
    failure_class: str | None = None
    xid: int | None = None
    incident: bool = False
    id: str = ""

    def __post_init__(self) -> None:
        if not self.id:
            xid = self.xid if self.source == "xid" else None
            object.__setattr__(self, "id", alert_id(self.node, self.gpu, self.start, xid))

    @classmethod
    def from_xid(cls, event: XidEvent, failure_class: str | None = None) -> Candidate:
        """A failure XID seen this tick (pass only XIDs the catalog calls failures)."""
        return cls(
            source="xid",
            node=event.node,
            gpu=event.gpu,
            start=event.time,
            score=1.0,
            peak_score=1.0,
            signals=(f"xid_{event.xid}",),
            failure_class=failure_class,
            xid=event.xid,
        )

    @classmethod
    def from_alert(
        cls,
        alert: Alert,
        score: float,
        *,
        incident: bool = False,
        failure_class: str | None = None,
    ) -> Candidate:
        """An open alert with its fused score this tick and its diagnosis' class (None:
        undiagnosed)."""
        return cls(
            source="alert",
            node=alert.node,
            gpu=alert.gpu,
            start=alert.start,
            score=score if math.isfinite(score) else 0.0,
            peak_score=alert.peak_score,
            signals=tuple(alert.signals),
            failure_class=failure_class,
            incident=incident,
        )


@dataclass(frozen=True, slots=True)
class Decision:
    """What the engine decided about one node. ``refused`` None and ``dry_run`` False: the
    executor must carry it out (then report with ``ActionEngine.record_outcome``)."""

    action: Action
    node: str
    time: float
    reason: str
    alert_id: str
    failure_class: str | None = None
    evidence: tuple[str, ...] = ()
    dry_run: bool = False
    refused: Refusal | None = None
    by: str = "detector"

    @property
    def to_execute(self) -> bool:
        return self.refused is None and not self.dry_run

    @property
    def result(self) -> str:
        """The ``result`` label before execution: refused_<why>, dry_run or approved."""
        if self.refused is not None:
            return f"refused_{self.refused}"
        return "dry_run" if self.dry_run else "approved"


@dataclass(frozen=True, slots=True)
class Exclusion:
    """A node the detector has excluded (or, ``dry_run``, would have): kept in the state file."""

    node: str
    since: float
    alert_id: str
    reason: str
    failure_class: str | None
    evidence: tuple[str, ...]
    dry_run: bool
    last_failure: float

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["evidence"] = list(self.evidence)
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Exclusion:
        try:
            return cls(
                node=str(data["node"]),
                since=float(data["since"]),
                alert_id=str(data["alert_id"]),
                reason=str(data["reason"]),
                failure_class=None if data["failure_class"] is None else str(data["failure_class"]),
                evidence=tuple(str(e) for e in data["evidence"]),
                dry_run=bool(data["dry_run"]),
                last_failure=float(data["last_failure"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"exclusion record {data!r}: {exc}") from exc


@dataclass(frozen=True, slots=True)
class ActionStats:
    """What /metrics shows: decisions by (action, result), exclusions now, the breaker."""

    decisions: Counter[tuple[str, str]] = field(default_factory=Counter)
    excluded: int = 0
    excluded_dry_run: int = 0
    breaker_open: bool = False


@dataclass(frozen=True, slots=True)
class ActionRequest:
    """A person's request to the running detector (``detector actions release NODE``): the
    release is already carried out in the scheduler; the engine only records it."""

    op: Literal["release", "close_breaker"]
    node: str
    by: str
    time: float
