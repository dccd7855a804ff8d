"""detector.replay"""

from .fitting import Fitted, fit_calibration
from .progress import ProgressBar
from .report.html import render_html
from .run import ReplayResult, dump_frames, load_event_files, run_replay, simulated_frames
from .summary import summary_lines

__all__ = [
    "Fitted",
    "ProgressBar",
    "ReplayResult",
    "dump_frames",
    "fit_calibration",
    "load_event_files",
    "render_html",
    "run_replay",
    "simulated_frames",
    "summary_lines",
]
