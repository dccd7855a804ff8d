"""detector.replay"""

from .diagnosis import (
    alert_diagnoses,
    describe_learned,
    diagnosis_confusion,
    learn_diagnosis,
    report_document,
)
from .fitting import Fitted, fit_calibration
from .progress import ProgressBar
from .recovery import Recovery, recovery_analysis
from .report.html import render_html
from .run import ReplayResult, dump_frames, load_event_files, run_replay, simulated_frames
from .summary import summary_lines

__all__ = [
    "Fitted",
    "ProgressBar",
    "Recovery",
    "ReplayResult",
    "alert_diagnoses",
    "describe_learned",
    "diagnosis_confusion",
    "dump_frames",
    "fit_calibration",
    "learn_diagnosis",
    "load_event_files",
    "recovery_analysis",
    "render_html",
    "report_document",
    "run_replay",
    "simulated_frames",
    "summary_lines",
]
