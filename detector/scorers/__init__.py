"""Streaming scorers: vectorized over all signal columns, state in numpy arrays."""

from .base import Scorer, update_columns
from .changepoint import ChangePoint
from .counts import CountBurst
from .kernels.ew import touch
from .own_past import OwnPast
from .peers import PeerDeviation
from .registry import build
from .zscore import RobustZScore

__all__ = [
    "ChangePoint",
    "CountBurst",
    "OwnPast",
    "PeerDeviation",
    "RobustZScore",
    "Scorer",
    "build",
    "touch",
    "update_columns",
]
