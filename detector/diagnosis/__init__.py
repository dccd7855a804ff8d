"""detector.diagnosis: what probably failed behind an alert, how sure, and what to do.

A pure stage (no I/O): ``diagnose(evidence, model)`` on an alert's evidence, the model built
from rules/diagnosis.yaml (``build_model``) and what ``detector calibrate`` learned
(``learn_counts``), the confusion table replay prints (``confusion_table``), the Alertmanager
labels and annotations of a diagnosis (``alert_text``), and the bottleneck of a checkpoint
storm (``storm_bottleneck``). docs/diagnosis.md is the guide.
"""

from .confusion import Confusion, DiagnosedFailure, confusion_table
from .diagnose import XID_CONFIDENCE, diagnose, posterior
from .learn import fit_temperature, learn_counts
from .model import DiagnosisModel, build_model, diagnosis_model
from .nfs_meter import NFS_METRICS, NfsMeter, NfsSnapshot, nfs_figures
from .notify import AlertText, alert_text
from .records import XID_PREFIX, Diagnosis, Evidence, SignalEvidence
from .storm import NFS_SIGNAL_PREFIX, NfsFigures, StormDiagnosis, storm_bottleneck

__all__ = [
    "NFS_METRICS",
    "NFS_SIGNAL_PREFIX",
    "XID_CONFIDENCE",
    "XID_PREFIX",
    "AlertText",
    "Confusion",
    "DiagnosedFailure",
    "Diagnosis",
    "DiagnosisModel",
    "Evidence",
    "NfsFigures",
    "NfsMeter",
    "NfsSnapshot",
    "SignalEvidence",
    "StormDiagnosis",
    "alert_text",
    "build_model",
    "confusion_table",
    "diagnose",
    "diagnosis_model",
    "fit_temperature",
    "learn_counts",
    "nfs_figures",
    "posterior",
    "storm_bottleneck",
]
