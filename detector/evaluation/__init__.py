"""detector.evaluation"""

from .accounting import AccountingSnapshot, Detection, LiveAccounting
from .calibration import (
    CalibrationPoint,
    CalibrationResult,
    calibrate,
    calibration_from_result,
    candidate_thresholds,
    caught,
    describe_weights,
    fit_signal_weights,
)
from .matching import (
    AlertRow,
    Evaluation,
    FailureRow,
    describe_other_xids,
    evaluate,
    failure_sources,
)

__all__ = [
    "AccountingSnapshot",
    "AlertRow",
    "CalibrationPoint",
    "CalibrationResult",
    "Detection",
    "Evaluation",
    "FailureRow",
    "LiveAccounting",
    "calibrate",
    "calibration_from_result",
    "candidate_thresholds",
    "caught",
    "describe_other_xids",
    "describe_weights",
    "evaluate",
    "failure_sources",
    "fit_signal_weights",
]
