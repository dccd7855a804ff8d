"""detector.pipeline"""

from .build import build_pipeline, episode_params
from .episodes import EpisodeParams, Episodes
from .tick import Pipeline, TickResult, pipeline_state, restore_pipeline
from .xids import dedupe_episodes, is_failure

__all__ = [
    "EpisodeParams",
    "Episodes",
    "Pipeline",
    "TickResult",
    "build_pipeline",
    "dedupe_episodes",
    "episode_params",
    "is_failure",
    "pipeline_state",
    "restore_pipeline",
]
