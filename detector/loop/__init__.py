"""detector.loop"""

from .policy import AlertPolicy, Notification

__all__ = ["AlertPolicy", "Notification"]
