"""The action engine: which node to exclude now, and which exclusions to refuse. Pure.

Contract (no I/O, the clock is the ``now`` passed in; the tick loop calls it once a tick):

- ``update(now, candidates, n_nodes, shadow) -> list[Decision]``. ``candidates``: this tick's
  failure XIDs and open alerts (``Candidate.from_xid`` / ``Candidate.from_alert``; an alert is
  passed every tick it stays open, with its current score). An XID is confirmed at once
  (``actions.on_failure_xid``); an alert once its class is in ``actions.alert_classes`` ('*':
  any) and its score has stayed >= ``alert_min_score`` for ``alert_hold_s``. A confirmed
  failure on a node not yet excluded becomes one ``exclude`` decision, unless it is refused:
  ``cluster_incident`` (never act on those), ``shadow`` (never act in shadow mode),
  ``breaker_open``, ``rate_cap`` (``max_per_hour`` exclusions already in the last hour) or
  ``share_cap`` (the exclusion would pass ``max_excluded_fraction`` of ``n_nodes``, at least
  one node). A rate or share refusal OPENS the breaker, which then refuses every exclusion
  until a person closes it (``close_breaker``): failures arriving faster than the caps say
  something systemic (a driver rollout, a power event) that no node exclusion fixes.
- Dry-run (``actions.dry_run``, the default): decisions carry ``dry_run`` and are recorded as
  exclusions too (so the caps and the breaker behave as they would), but the executor is not
  called. ``Decision.to_execute`` says which decisions the executor must carry out; the caller
  reports each outcome with ``record_outcome`` (a failed exclusion is forgotten, so the alert
  can trigger it again, within the caps).
- Idempotent: an alert (or XID) is acted on at most once (its id is remembered until it has
  not been seen for ``_ACTED_KEEP_S``), a node at most once while excluded;
  ``state_dict``/``load_state_dict`` carry all of it (JSON-able) across restarts. Refusals
  are logged and counted once per alert and reason, not every tick.
- Release: only a person (``release(node, now, by)``; ``detector actions release NODE``)
  unless ``release_after_s`` is set, in which case ``update`` releases a node that long after
  its last confirmed failure (not in shadow mode).
- People's requests (``detector actions release``/``close-breaker``, through the inbox file
  beside the state file, see inbox.py): ``apply_requests(requests, now)`` once a tick.
- Every decision writes one audit log line (event "action") and counts in ``stats()``
  (``detector_actions_total{action,result}``).
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter, deque
from collections.abc import Iterable, Mapping
from typing import Any

from structlog.typing import FilteringBoundLogger

from ..config import ActionsConfig
from ..logs import get_logger
from .action_records import ActionRequest, ActionStats, Candidate, Decision, Exclusion, Refusal

__all__ = ["STATE_VERSION", "ActionEngine"]

STATE_VERSION = 1
_HOUR_S = 3600.0
_ACTED_KEEP_S = 7 * 86400.0  # an alert unseen for a week is over


class ActionEngine:
    """See the module docstring."""

    def __init__(self, config: ActionsConfig, *, log: FilteringBoundLogger | None = None) -> None:
        self.config = config
        self._log = log if log is not None else get_logger(component="actions")
        self._excluded: dict[str, Exclusion] = {}
        self._recent: deque[float] = deque()  # times of exclusions in the last hour
        self._acted: dict[str, float] = {}  # alert id -> when it was acted on
        self._held_since: dict[str, float] = {}  # alert id -> since when its score is held
        self._refused: dict[str, Refusal] = {}  # alert id -> last refusal logged
        self._releasing: dict[str, Exclusion] = {}  # released, outcome not yet reported
        self._breaker: dict[str, Any] | None = None  # {"since", "reason"} while open
        self._counts: Counter[tuple[str, str]] = Counter()

    # -- per tick ------------------------------------------------------------------------
    def update(
        self, now: float, candidates: Iterable[Candidate], n_nodes: int, shadow: bool = False
    ) -> list[Decision]:
        """This tick's decisions (see the module docstring). Does nothing when disabled."""
        if not self.config.enabled:
            return []
        seen: set[str] = set()
        while self._recent and self._recent[0] <= now - _HOUR_S:
            self._recent.popleft()
        out = self._auto_releases(now, shadow)  # first: a node released frees its share
        for cand in sorted(candidates, key=lambda c: (c.start, c.node, c.id)):
            seen.add(cand.id)
            if not self._confirmed(now, cand):
                continue
            excluded = self._excluded.get(cand.node)
            if excluded is not None:
                self._excluded[cand.node] = _touched(excluded, now)
                self._acted[cand.id] = now
                continue
            if cand.id in self._acted:
                self._acted[cand.id] = now  # kept while the alert stays open
                continue
            decision = self._decide(now, cand, n_nodes, shadow)
            if decision is not None:
                out.append(decision)
        for stale in [i for i in self._held_since if i not in seen]:
            del self._held_since[stale]
        for stale in [i for i in self._refused if i not in seen]:
            del self._refused[stale]
        for old in [i for i, t in self._acted.items() if t < now - _ACTED_KEEP_S]:
            del self._acted[old]
        return out

    def record_outcome(self, decision: Decision, error: str | None) -> None:
        """The executor's result for a decision with ``to_execute``: None for success, else
        the error (a failed exclusion is forgotten; a failed release stays excluded)."""
        result = "done" if error is None else "failed"
        if decision.action == "exclude" and error is not None:
            self._excluded.pop(decision.node, None)
            self._acted.pop(decision.alert_id, None)
        if decision.action == "release":
            previous = self._releasing.pop(decision.node, None)
            if error is not None and previous is not None:
                self._excluded.setdefault(decision.node, previous)
        self._audit(decision, result, error=error)

    # -- by a person ---------------------------------------------------------------------
    def release(self, node: str, now: float, by: str) -> Decision | None:
        """A person releases ``node``: the decision to carry out, or None (not excluded)."""
        return self._release(node, now, f"released by {by}", by)

    def apply_requests(self, requests: Iterable[ActionRequest], now: float) -> list[Decision]:
        """Record people's requests from the inbox (``detector actions release`` has already
        released the node in the scheduler): each release drops the exclusion and is audited
        and counted as done; ``close_breaker`` closes the breaker."""
        out = []
        for request in requests:
            if request.op == "close_breaker":
                self.close_breaker(now, request.by)
                continue
            decision = self._release(
                request.node, request.time, f"released by {request.by}", request.by
            )
            if decision is None:
                continue  # released already (by the policy, or a request read twice)
            if not decision.dry_run:
                self._releasing.pop(request.node, None)
                self._audit(decision, "done")
            out.append(decision)
        return out

    def close_breaker(self, now: float, by: str) -> bool:
        """A person closes the breaker; False if it was not open."""
        if self._breaker is None:
            return False
        self._log.warning("action breaker closed", by=by, opened=self._breaker, time=now)
        self._breaker = None
        self._recent.clear()  # the hour that opened it is forgiven by the person closing it
        return True

    # -- views ---------------------------------------------------------------------------
    @property
    def excluded(self) -> Mapping[str, Exclusion]:
        return dict(self._excluded)

    @property
    def breaker(self) -> Mapping[str, Any] | None:
        """None when closed, else {"since": time, "reason": text}."""
        return None if self._breaker is None else dict(self._breaker)

    def stats(self) -> ActionStats:
        dry = sum(e.dry_run for e in self._excluded.values())
        return ActionStats(
            decisions=Counter(self._counts),
            excluded=len(self._excluded) - dry,
            excluded_dry_run=dry,
            breaker_open=self._breaker is not None,
        )

    # -- state ---------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """JSON-able state: exclusions, the last hour's exclusions, acted alerts, holds,
        the breaker and the counters (so restarted counters continue)."""
        return {
            "version": STATE_VERSION,
            "excluded": [e.as_dict() for e in self._excluded.values()],
            "recent": list(self._recent),
            "acted": dict(self._acted),
            "held_since": dict(self._held_since),
            "breaker": self._breaker,
            "counts": [[a, r, n] for (a, r), n in sorted(self._counts.items())],
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore ``state_dict`` output; ValueError (nothing changed) when it does not fit."""
        if state.get("version") != STATE_VERSION:
            raise ValueError(
                f"actions state version {state.get('version')!r}, this build reads {STATE_VERSION}"
            )
        try:
            excluded = {e.node: e for e in map(Exclusion.from_dict, state["excluded"])}
            recent = deque(sorted(float(t) for t in state["recent"]))
            acted = {str(k): float(v) for k, v in state["acted"].items()}
            held = {str(k): float(v) for k, v in state["held_since"].items()}
            breaker = state["breaker"]
            if breaker is not None:
                breaker = {"since": float(breaker["since"]), "reason": str(breaker["reason"])}
            counts = Counter({(str(a), str(r)): int(n) for a, r, n in state["counts"]})
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ValueError(f"actions state does not fit: {exc}") from exc
        self._excluded, self._recent, self._acted = excluded, recent, acted
        self._held_since, self._breaker, self._counts = held, breaker, counts
        self._refused.clear()
        self._releasing.clear()

    # -- internals -----------------------------------------------------------------------
    def _confirmed(self, now: float, cand: Candidate) -> bool:
        cfg = self.config
        if cand.source == "xid":
            return cfg.on_failure_xid
        classes = cfg.alert_classes
        if not (
            "*" in classes or (cand.failure_class is not None and cand.failure_class in classes)
        ):
            return False
        if not (math.isfinite(cand.score) and cand.score >= cfg.alert_min_score):
            self._held_since.pop(cand.id, None)
            return False
        since = self._held_since.setdefault(cand.id, now)
        return now - since >= cfg.alert_hold_s

    def _decide(self, now: float, cand: Candidate, n_nodes: int, shadow: bool) -> Decision | None:
        cfg = self.config
        refusal: Refusal | None = None
        cap = max(1, math.floor(cfg.max_excluded_fraction * max(n_nodes, 1)))
        if cand.incident:
            refusal = "cluster_incident"
        elif shadow:
            refusal = "shadow"
        elif self._breaker is not None:
            refusal = "breaker_open"
        elif len(self._recent) >= cfg.max_per_hour:
            refusal = "rate_cap"
            self._open_breaker(now, f"more than {cfg.max_per_hour} exclusions within an hour")
        elif len(self._excluded) + 1 > cap:
            refusal = "share_cap"
            self._open_breaker(
                now,
                f"excluding {cand.node} would exclude {len(self._excluded) + 1} of {n_nodes} "
                f"nodes (cap {cap}: max_excluded_fraction {cfg.max_excluded_fraction:g})",
            )
        decision = Decision(
            action="exclude",
            node=cand.node,
            time=now,
            reason=_reason(cand, cfg.alert_min_score, cfg.alert_hold_s),
            alert_id=cand.id,
            failure_class=cand.failure_class,
            evidence=cand.signals,
            dry_run=cfg.dry_run,
            refused=refusal,
        )
        if refusal is not None:
            if self._refused.get(cand.id) == refusal:
                return None  # said once already; the alert is still open
            self._refused[cand.id] = refusal
            self._audit(decision, decision.result)
            return decision
        self._excluded[cand.node] = Exclusion(
            node=cand.node,
            since=now,
            alert_id=cand.id,
            reason=decision.reason,
            failure_class=cand.failure_class,
            evidence=cand.signals,
            dry_run=cfg.dry_run,
            last_failure=now,
        )
        self._recent.append(now)
        self._acted[cand.id] = now
        self._refused.pop(cand.id, None)
        if decision.dry_run:
            self._audit(decision, "dry_run")
        return decision

    def _auto_releases(self, now: float, shadow: bool) -> list[Decision]:
        after = self.config.release_after_s
        if after is None or shadow:
            return []
        due = [e.node for e in self._excluded.values() if now - e.last_failure >= after]
        hours = f"{after / 3600:g} h"
        out = [self._release(n, now, f"no confirmed failure for {hours}", "policy") for n in due]
        return [d for d in out if d is not None]

    def _release(self, node: str, now: float, reason: str, by: str) -> Decision | None:
        exclusion = self._excluded.pop(node, None)
        if exclusion is None:
            return None
        decision = Decision(
            action="release",
            node=node,
            time=now,
            reason=reason,
            alert_id=exclusion.alert_id,
            failure_class=exclusion.failure_class,
            evidence=exclusion.evidence,
            dry_run=exclusion.dry_run,
            by=by,
        )
        if decision.dry_run:
            self._audit(decision, "dry_run")
        else:
            self._releasing[node] = exclusion
        return decision

    def _open_breaker(self, now: float, reason: str) -> None:
        if self._breaker is None:
            self._breaker = {"since": now, "reason": reason}
            self._log.warning("action breaker open", reason=reason, time=now)

    def _audit(self, decision: Decision, result: str, error: str | None = None) -> None:
        self._counts[(decision.action, result)] += 1
        self._log.info(
            "action",
            action=decision.action,
            node=decision.node,
            result=result,
            reason=decision.reason,
            failure_class=decision.failure_class,
            evidence=list(decision.evidence),
            alert_id=decision.alert_id,
            by=decision.by,
            time=decision.time,
            **({"error": error} if error is not None else {}),
        )


def _touched(exclusion: Exclusion, now: float) -> Exclusion:
    """The exclusion with its node's latest confirmed failure at ``now``."""
    return dataclasses.replace(exclusion, last_failure=now)


def _reason(cand: Candidate, min_score: float, hold_s: float) -> str:
    if cand.source == "xid":
        return f"failure XID {cand.xid}" + (f" on GPU {cand.gpu}" if cand.gpu else "")
    what = cand.failure_class or "alert"
    return (
        f"{what} alert held at score >= {min_score:g} for {hold_s:g} s (peak {cand.peak_score:.2f})"
    )
