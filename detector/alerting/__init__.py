"""Alert delivery internals: the policy (what Alertmanager should see) and the coalescing queue.

Import ``detector.alerts`` (the sender); these modules are pure and do no I/O.
"""

from .sender import AlertSender, AlertStats

__all__ = ["AlertSender", "AlertStats"]
