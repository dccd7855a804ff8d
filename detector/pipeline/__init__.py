"""Scoring one tick, no I/O: signals -> scorers -> fusion -> per-node alert scores.

``Pipeline.step(frame)`` returns a ``TickResult`` (alert scores per node and GPU, the XIDs the
data showed, common-mode incidents, per-column fused scores); ``build_pipeline`` builds the
production pipeline from the config. What to do with the scores (alert episodes, XID forcing,
the alert policy) is the tick loop's (``detector.loop``). ``is_failure`` is the one rule that
judges an XID, whatever its source.
"""

from .build import build_pipeline
from .tick import Pipeline, PipelineParams, TeamReport, TickResult
from .xids import dedupe_episodes, is_failure

__all__ = [
    "Pipeline",
    "PipelineParams",
    "TeamReport",
    "TickResult",
    "build_pipeline",
    "dedupe_episodes",
    "is_failure",
]
