"""Alerts out of the detector: delivery to Alertmanager (sender.py, queue.py) and the
Prometheus rules that fire on the same threshold and severities (prometheus_rules.py).

The policy that decides what Alertmanager sees is the tick loop's (``detector.loop``).
"""

from .prometheus_rules import RuleSettings, prom_duration, prometheus_rules
from .sender import AlertSender, AlertStats

__all__ = ["AlertSender", "AlertStats", "RuleSettings", "prom_duration", "prometheus_rules"]
