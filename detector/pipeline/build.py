"""The production pipeline from a config: its rules, one scorer per scorer name they use (with
the config's parameters) and the signal weights (the calibration file's or those being tried).
The tick loop (``detector.loop.TickLoop.from_config``) builds its pipeline here."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from ..config import Calibration, Config, load_signal_rules, load_xid_catalog
from ..scorers import ChangePoint, CountBurst, OwnPast, PeerDeviation, RobustZScore, Scorer
from ..scorers import build as build_scorer
from ..series import LabelRules, SeriesIndex
from .fusion import FusionParams
from .tick import Pipeline, PipelineParams


def build_pipeline(
    config: Config,
    index: SeriesIndex,
    calibration: Calibration | None = None,
    *,
    signal_weights: Mapping[str, float] | None = None,
) -> Pipeline:
    """The production pipeline for ``config``: built-in or configured rules and one scorer
    for every scorer name the rules use (parameters from ``config.scoring``). Signal weights
    multiply the rules' fusion weights: ``signal_weights`` when given (calibration trying
    weights it fits), else the calibration file's, else none. ``index`` must label series as
    ``config.labels`` says (cohort and GPU workload labels, pods' owners:
    ``LabelRules.from_config``), or this raises ValueError: a pipeline whose index ignored them
    would compare nodes and GPUs the config keeps apart."""
    wanted_rules = LabelRules.from_config(config.labels)
    for name in (
        "cohort_labels", "workload_labels", "pod_owner", "workload_comovement", "activity_signal"
    ):  # fmt: skip
        if getattr(index.rules, name) != getattr(wanted_rules, name):
            raise ValueError(
                f"build_pipeline: the series index's {name} {getattr(index.rules, name)} are "
                f"not the config's {getattr(wanted_rules, name)}: build the index with "
                "LabelRules.from_config(config.labels)"
            )
    signals = load_signal_rules(config.rules.signals)
    if not config.rules.default_rule:
        signals = signals.model_copy(
            update={"default_rule": signals.default_rule.model_copy(update={"enabled": False})}
        )
    xids = load_xid_catalog(config.rules.xid)
    sc = config.scoring
    configured: dict[str, Callable[[], Scorer]] = {
        "zscore": lambda: RobustZScore(half_life_s=sc.zscore_half_life_s),
        "changepoint": lambda: ChangePoint(half_life_s=sc.changepoint_half_life_s),
        "peers": lambda: PeerDeviation(min_peers=sc.peer_min_peers),
        "counts": lambda: CountBurst(warmup_s=sc.warmup_s),
        # the preset's durations are observations: one a scrape interval
        "own_past": lambda: OwnPast(observation_s=config.scrape.interval_s),
    }
    # One scorer for every name the rules use, in a stable order; own_past also for the nodes
    # without enough peers (PipelineParams.own_past_min_peers).
    wanted = {name for rule in signals.signals for name in rule.scorers}
    if signals.default_rule.enabled:
        wanted |= set(signals.default_rule.scorers)
    if sc.own_past_when_peerless:
        wanted.add("own_past")
    scorers = [
        configured[name]() if name in configured else build_scorer(name) for name in sorted(wanted)
    ]
    file_weights = (calibration.signal_weights if calibration is not None else None) or {}
    params = PipelineParams(
        fusion=FusionParams(
            common_mode_fraction=sc.common_mode_fraction,
            common_mode_window_s=sc.common_mode_window_s,
        ),
        top_k=sc.top_k,
        repeat_hold_s=sc.repeat_hold_s,
        signal_weights=dict(signal_weights if signal_weights is not None else file_weights),
        own_past_min_peers=sc.peer_min_peers if sc.own_past_when_peerless else 0,
    )
    return Pipeline(index, signals, xids, scorers, params)
