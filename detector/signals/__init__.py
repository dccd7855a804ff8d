"""detector.signals"""

from .map import SignalMap

__all__ = ["SignalMap"]
