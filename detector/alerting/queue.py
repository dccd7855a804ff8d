"""Per-Alertmanager delivery queue: bounded, coalescing by alert fingerprint, with backoff.

Only the latest state of an alert matters to Alertmanager, so the queue holds at most one
pending update per alert (its labels): a newer update replaces the older one and moves to the
back. When full, the oldest pending update is dropped and counted. A batch taken for sending is
acknowledged only if its updates were not replaced meanwhile, so a newer state is never lost
to the success of an older one. Pure: times are passed in. ``pending()`` lists what waits, in
order (the daemon saves it so a crash does not lose undelivered updates).
"""

from __future__ import annotations

import random
from collections import OrderedDict
from dataclasses import dataclass

from ..loop import Notification
from ..model import Labels


@dataclass(frozen=True, slots=True)
class Backoff:
    """Exponential backoff with "equal jitter": half the delay fixed, half random.

    The jitter spreads retries of several daemons (or shards) hitting one recovering
    Alertmanager; the fixed half keeps a lower bound so a flapping one is not hammered.
    """

    base_s: float = 1.0
    max_s: float = 60.0

    def delay(self, failures: int, rng: random.Random) -> float:
        """Delay before the attempt that follows ``failures`` consecutive failures (>= 1)."""
        full = min(self.max_s, self.base_s * 2.0 ** max(0, failures - 1))
        return full / 2 + rng.uniform(0.0, full / 2)


class CoalescingQueue:
    """Pending updates for one Alertmanager, keyed by alert labels (see module docstring)."""

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"queue limit must be >= 1 (got {limit})")
        self.limit = limit
        self.dropped = 0
        self._items: OrderedDict[Labels, Notification] = OrderedDict()

    def __len__(self) -> int:
        return len(self._items)

    def put(self, item: Notification) -> None:
        """Queue ``item``, replacing any pending update of the same alert."""
        self._items.pop(item.labels, None)
        self._items[item.labels] = item
        while len(self._items) > self.limit:
            self._items.popitem(last=False)
            self.dropped += 1

    def pending(self) -> list[Notification]:
        """Every pending update, oldest first."""
        return list(self._items.values())

    def peek(self, n: int) -> list[Notification]:
        """The ``n`` oldest pending updates, left in the queue until acknowledged."""
        out: list[Notification] = []
        for item in self._items.values():
            if len(out) == n:
                break
            out.append(item)
        return out

    def ack(self, items: list[Notification]) -> None:
        """Remove delivered updates, except those replaced by a newer one since ``peek``."""
        for item in items:
            if self._items.get(item.labels) is item:
                del self._items[item.labels]

    def discard(self, items: list[Notification]) -> int:
        """Drop updates Alertmanager rejected for good (counted as dropped); returns how many."""
        before = len(self._items)
        self.ack(items)
        gone = before - len(self._items)
        self.dropped += gone
        return gone
