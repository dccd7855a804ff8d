"""The one tick loop that ``run``, ``replay`` and ``calibrate`` drive (tickloop.py): the
pipeline's scores -> XIDs judged -> alert episodes (alerts.py, episodes.py), each diagnosed
once when it starts (diagnoses.py) -> the alert policy's notifications (policy.py; cluster
incidents: incidents.py, their bottleneck: storm_meter.py) -> live accounting; and the
recording that lets calibration decide again at other thresholds (recording.py). No I/O."""

from .action_records import (
    ActionRequest,
    ActionStats,
    Candidate,
    Decision,
    Exclusion,
    Refusal,
    alert_id,
)
from .actions import ActionEngine
from .alerts import AlertChanges, Evidence, NodeAlerts, leading_gpu
from .diagnoses import AlertDiagnoses
from .episodes import EpisodeParams, Episodes
from .incidents import INCIDENT_ALERT, ClusterIncident
from .notification import Notification
from .policy import FAILURE_ALERT, AlertPolicy, alert_severity, xid_codes
from .recording import Decided, Recording
from .storm_meter import StormMeter
from .tickloop import Decisions, LoopTick, TickLoop, episode_params

__all__ = [
    "FAILURE_ALERT",
    "INCIDENT_ALERT",
    "ActionEngine",
    "ActionRequest",
    "ActionStats",
    "AlertChanges",
    "AlertDiagnoses",
    "AlertPolicy",
    "Candidate",
    "ClusterIncident",
    "Decided",
    "Decision",
    "Decisions",
    "EpisodeParams",
    "Episodes",
    "Evidence",
    "Exclusion",
    "LoopTick",
    "NodeAlerts",
    "Notification",
    "Recording",
    "Refusal",
    "StormMeter",
    "TickLoop",
    "alert_id",
    "alert_severity",
    "episode_params",
    "leading_gpu",
    "xid_codes",
]
