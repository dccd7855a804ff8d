"""Streaming scorers: vectorized over all signal columns, state in numpy arrays."""

from .base import Scorer, update_columns
from .changepoint import ChangePoint
from .counts import CountBurst
from .kernels.ew import touch
from .peers import PeerDeviation
from .registry import build
from .zscore import RobustZScore

__all__ = [
    "ChangePoint",
    "CountBurst",
    "PeerDeviation",
    "RobustZScore",
    "Scorer",
    "build",
    "touch",
    "update_columns",
]
