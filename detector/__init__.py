"""Real-time multi-signal GPU failure detector."""

__version__ = "0.1.0"
