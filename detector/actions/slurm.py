"""Slurm executor: drain a node with a reason, resume it on release, through ``scontrol``.

Contract:

- ``apply(decision)`` runs ``scontrol update NodeName=N State=DRAIN Reason=<reason>``; the
  reason names the detector, the class, the alert id and the evidence (Slurm shows it in
  ``sinfo -R`` and ``scontrol show node``). Jobs running on the node finish; no new job starts.
- ``release(decision)`` runs ``scontrol update NodeName=N State=RESUME``.
- ``runner`` (injectable) runs one argv and returns (exit status, stdout, stderr); the default
  starts the process with asyncio, no shell (the reason is one argument, never parsed by a
  shell), with ``SLURM_CONF`` set from ``slurm.conf`` when given, and kills it past
  ``slurm.timeout_s``. A non-zero exit, a missing executable or a
  timeout is an ``ActionError`` naming the node and scontrol's message.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Awaitable, Callable, Mapping, Sequence

from ..config import ActionsConfig
from ..errors import ActionError
from ..loop import Decision

__all__ = ["Runner", "SlurmExecutor", "run_process"]

Runner = Callable[[Sequence[str]], Awaitable[tuple[int, str, str]]]
_REASON_LIMIT = 200  # scontrol keeps long reasons, sinfo's column does not


async def run_process(
    argv: Sequence[str], timeout_s: float = 30.0, env: Mapping[str, str] | None = None
) -> tuple[int, str, str]:
    """Run ``argv`` without a shell: (exit status, stdout, stderr). OSError if it cannot start;
    TimeoutError (after killing it) past ``timeout_s``."""
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=None if env is None else dict(env),
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout_s)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()
        raise
    return proc.returncode or 0, out.decode(errors="replace"), err.decode(errors="replace")


class SlurmExecutor:
    """See the module docstring."""

    def __init__(self, config: ActionsConfig, *, runner: Runner | None = None) -> None:
        self.scontrol = config.slurm.scontrol
        timeout_s = config.slurm.timeout_s
        env = None
        if config.slurm.conf is not None:
            env = {**os.environ, "SLURM_CONF": str(config.slurm.conf)}
        self._run: Runner = runner or (lambda argv: run_process(argv, timeout_s, env))

    async def apply(self, decision: Decision) -> None:
        """Drain ``decision.node`` with a reason naming class, alert and evidence."""
        reason = f"gpu-failure-detector: {decision.failure_class or 'failure'}: {decision.reason}"
        reason += f"; alert {decision.alert_id}"
        if decision.evidence:
            reason += f"; evidence {', '.join(decision.evidence)}"
        reason = reason.replace("\n", " ")[:_REASON_LIMIT]
        await self._scontrol(decision.node, "State=DRAIN", f"Reason={reason}")

    async def release(self, decision: Decision) -> None:
        """Resume ``decision.node``."""
        await self._scontrol(decision.node, "State=RESUME")

    async def aclose(self) -> None:
        return None

    async def _scontrol(self, node: str, *fields: str) -> None:
        argv = [self.scontrol, "update", f"NodeName={node}", *fields]
        try:
            status, out, err = await self._run(argv)
        except (OSError, TimeoutError) as exc:
            raise ActionError(f"slurm: node {node}: {' '.join(argv[:4])}: {exc!r}") from exc
        if status != 0:
            message = (err or out).strip()[:300]
            raise ActionError(f"slurm: node {node}: scontrol exited {status}: {message}")
