"""detector.actions: carry out the tick loop's node exclusions, off by default and safe.

The decisions (which node to exclude, what to refuse, the breaker, their state) are the tick
loop's ``ActionEngine`` (``detector.loop``), so a replay lists what ``run`` would have done;
this folder holds the executors that carry them out (Kubernetes, Slurm, webhook; the
``ActionRunner``) and the inbox through which a person's release reaches the daemon.
docs/actions.md is the guide.
"""

from ..loop import (
    ActionEngine,
    ActionRequest,
    ActionStats,
    Candidate,
    Decision,
    Exclusion,
    alert_id,
)
from .inbox import drain_inbox, inbox_path, post_request, read_inbox
from .kubernetes import KubernetesExecutor
from .runner import ActionRunner, Executor, build_executor
from .slurm import SlurmExecutor, run_process
from .webhook import WebhookExecutor, webhook_payload

STATE_KEY = "actions"  # the engine's part of the daemon's state file meta

__all__ = [
    "STATE_KEY",
    "ActionEngine",
    "ActionRequest",
    "ActionRunner",
    "ActionStats",
    "Candidate",
    "Decision",
    "Exclusion",
    "Executor",
    "KubernetesExecutor",
    "SlurmExecutor",
    "WebhookExecutor",
    "alert_id",
    "build_executor",
    "drain_inbox",
    "inbox_path",
    "post_request",
    "read_inbox",
    "run_process",
    "webhook_payload",
]
