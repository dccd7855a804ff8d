"""Decisions carried out: the engine's decisions handed to the configured executor.

Contract:

- ``Executor`` (Protocol): ``await apply(decision)`` excludes ``decision.node``, ``await
  release(decision)`` undoes it, ``await aclose()``; both raise ``ActionError`` when the
  scheduler did not do it. Implementations: ``KubernetesExecutor``, ``SlurmExecutor``,
  ``WebhookExecutor`` (``build_executor(config)`` picks the configured one).
- ``ActionRunner.step(now, candidates, n_nodes, shadow)``: the engine's ``update``, then every
  decision with ``to_execute`` through the executor, one after the other, each outcome
  reported back to the engine (audit line, counter). Returns every decision of the tick
  (refusals and dry-run ones included) for the caller to show. An executor error is logged
  and counted, never raised: one unreachable API server must not stop the tick loop.
- ``ActionRunner.release(node, now, by)``: a person's release, carried out the same way.

Wiring in the tick loop (``run``; ``replay``/``calibrate`` use the engine alone, forced to
dry-run with ``config.actions.model_copy(update={"dry_run": True})``, so a replay lists what
``run`` would have done and never touches a scheduler)::

    engine = ActionEngine(config.actions)
    engine.load_state_dict(meta[STATE_KEY])        # when the state file has it
    runner = ActionRunner(engine, build_executor(config.actions))
    # every tick:
    engine.apply_requests(drain_inbox(inbox_path(config.state.path)), now)
    candidates = [Candidate.from_xid(e) for e in tick.xids if catalog.is_failure(e.xid)]
    candidates += [Candidate.from_alert(a, score_now(a), incident=in_incident(a))
                   for a in open_alerts]
    await runner.step(now, candidates, len(tick.node_names), shadow=config.alerts.shadow)
    exporter.set_action_stats(engine.stats())
    meta[STATE_KEY] = engine.state_dict()            # saved with the rest of the state
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from ..config import ActionsConfig
from ..errors import ActionError
from ..loop import ActionEngine, Candidate, Decision
from .kubernetes import KubernetesExecutor
from .slurm import SlurmExecutor
from .webhook import WebhookExecutor

__all__ = ["ActionRunner", "Executor", "build_executor"]


class Executor(Protocol):
    async def apply(self, decision: Decision) -> None: ...

    async def release(self, decision: Decision) -> None: ...

    async def aclose(self) -> None: ...


def build_executor(config: ActionsConfig) -> Executor:
    """The executor ``actions.kind`` names, with production defaults."""
    if config.kind == "kubernetes":
        return KubernetesExecutor(config)
    if config.kind == "slurm":
        return SlurmExecutor(config)
    return WebhookExecutor(config)


class ActionRunner:
    """See the module docstring."""

    def __init__(self, engine: ActionEngine, executor: Executor) -> None:
        self.engine = engine
        self.executor = executor

    async def step(
        self, now: float, candidates: Iterable[Candidate], n_nodes: int, shadow: bool = False
    ) -> list[Decision]:
        decisions = self.engine.update(now, candidates, n_nodes, shadow)
        for decision in decisions:
            if decision.to_execute:
                await self.carry_out(decision)
        return decisions

    async def release(self, node: str, now: float, by: str) -> Decision | None:
        """Release ``node`` for a person; None when the detector has not excluded it."""
        decision = self.engine.release(node, now, by)
        if decision is not None and decision.to_execute:
            await self.carry_out(decision)
        return decision

    async def carry_out(self, decision: Decision) -> str | None:
        """Run one decision through the executor; the error text, or None on success."""
        error: str | None = None
        try:
            if decision.action == "exclude":
                await self.executor.apply(decision)
            else:
                await self.executor.release(decision)
        except ActionError as exc:
            error = str(exc)
        self.engine.record_outcome(decision, error)
        return error
