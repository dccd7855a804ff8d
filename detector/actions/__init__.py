"""detector.actions: exclude a node on a confirmed failure, off by default and safe.

``ActionEngine`` (pure: which node to exclude, what to refuse, the breaker, state) and the
executors that carry decisions out (Kubernetes, Slurm, webhook), joined by ``ActionRunner``.
docs/actions.md is the guide.
"""

from .engine import ActionEngine
from .inbox import drain_inbox, inbox_path, post_request, read_inbox
from .kubernetes import KubernetesExecutor
from .records import ActionRequest, ActionStats, Candidate, Decision, Exclusion, alert_id
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
