"""The alert update the policy hands to a sink (``Notification``) and its label helpers, shared
by the node alerts (policy.py) and the cluster incidents (incidents.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..model import Labels


@dataclass(frozen=True, slots=True)
class Notification:
    """One alert update for Alertmanager; ``labels`` identify the alert (its fingerprint)."""

    labels: Labels
    annotations: Labels
    starts_at: float
    ends_at: float | None  # None: firing (the sender stamps now + 4 x resend interval)


def make_labels(**pairs: str | None) -> Labels:
    """Sorted label pairs, the empty and None ones left out."""
    return tuple(sorted((k, v) for k, v in pairs.items() if v))


def pairs(labels: Labels | None) -> list[list[str]] | None:
    """``labels`` as JSON-able lists (state files)."""
    return None if labels is None else [list(kv) for kv in labels]


def labels_of(pairs: Any) -> Labels | None:
    """The inverse of ``pairs``."""
    return None if pairs is None else tuple((str(k), str(v)) for k, v in pairs)
