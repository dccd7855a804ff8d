"""Signal weights from labels: the pipeline applies calibrated weights, replay records which
signal led each node, and ``fit_calibration`` keeps fitted weights only when they help."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import numpy as np
import pytest

from detector.config import load_xid_catalog
from detector.config.load import load_config
from detector.evaluation import LiveAccounting
from detector.evaluation.calibration import CalibrationPoint, calibrate, calibration_from_result
from detector.evaluation.matching import evaluate
from detector.loop import AlertPolicy, Decisions, Recording, TickLoop
from detector.loop.episodes import EpisodeParams
from detector.model import Frame, XidEvent
from detector.pipeline.build import build_pipeline
from detector.pipeline.tick import Pipeline, TickResult
from detector.replay.fitting import (
    WEIGHT_FIT_FP_FACTOR,
    fit_calibration,
    fit_threshold,
    signal_hits,
)
from detector.replay.run import ReplayResult
from detector.series.index import SeriesIndex

T0 = 1_700_000_000.0
STEP = 30.0
BASE = EpisodeParams(0.5, 0.8, 0.0, 0.0)


def _temperature_pipeline(weights: Mapping[str, float] | None) -> tuple[Pipeline, list[int]]:
    index = SeriesIndex()
    columns = [
        index.add(
            "DCGM_FI_DEV_GPU_TEMP",
            (("Hostname", f"node{n}"), ("UUID", f"GPU-{n}-{g}"), ("gpu", str(g))),
        )
        for n in range(3)
        for g in range(4)
    ]
    return build_pipeline(load_config(None, env={}), index, signal_weights=weights), columns


def _run(pipeline: Pipeline, columns: list[int], ticks: int = 200) -> list[TickResult]:
    """Three nodes of four GPUs; GPU 1 of node 2 heats 1 C per tick from tick 150."""
    rng = np.random.default_rng(3)
    out = []
    for k in range(ticks):
        values = 60.0 + rng.normal(0.0, 0.5, len(columns))
        if k >= 150:
            values[2 * 4 + 1] += k - 149.0
        out.append(pipeline.step(Frame(T0 + STEP * k, values)))
    return out


def test_calibrated_weight_scales_the_fused_column_scores_of_its_signal() -> None:
    """A weight of 0.5 on gpu_temp halves that signal's fused column scores and lowers the
    node's score; the leading signal of the heating node is gpu_temp, the others have none."""
    plain, columns = _temperature_pipeline(None)
    halved, _ = _temperature_pipeline({"gpu_temp": 0.5, "unrelated": 3.0})
    a, b = _run(plain, columns), _run(halved, columns)
    assert np.max(a[-1].column_z) > 5.0
    np.testing.assert_allclose(b[-1].column_z, 0.5 * a[-1].column_z)
    assert b[-1].node_score[2] < a[-1].node_score[2]
    lead, _ = plain.lead_signals(a[-1])
    names = plain.signal_names
    assert [-1, -1] == lead[:2].tolist()
    assert "gpu_temp" == names[int(lead[2])]


def test_build_pipeline_takes_weights_from_the_file_unless_given() -> None:
    """The calibration file's signal_weights reach the pipeline (run and replay build it this
    way); an explicit signal_weights (calibration's second pass) replaces them."""
    result = calibrate(lambda th: CalibrationPoint(th, 1, 1, 0, 0.0), [0.7], fp_budget_per_day=1)
    cal = calibration_from_result(
        result, dump="d", days=1.0, failures=1, signal_weights={"gpu_temp": 0.5}
    )
    config = load_config(None, env={})
    assert {"gpu_temp": 0.5} == build_pipeline(config, SeriesIndex(), cal).params.signal_weights
    assert 0.7 == TickLoop.from_config(config, SeriesIndex(), cal).threshold
    replaced = build_pipeline(config, SeriesIndex(), cal, signal_weights={})
    assert {} == replaced.params.signal_weights
    assert {} == build_pipeline(config, SeriesIndex()).params.signal_weights


def _history(
    scores: np.ndarray, leads: np.ndarray, failures: list[XidEvent], names: tuple[str, ...]
) -> ReplayResult:
    """A recorded replay built by hand: one tick per minute."""
    times = T0 + 60.0 * np.arange(scores.shape[0])
    nodes = tuple(f"node{i}" for i in range(scores.shape[1]))
    recording = Recording.from_arrays(times, scores, leads, names, nodes)
    decisions = Decisions(
        load_xid_catalog(), episodes=BASE, policy=AlertPolicy(), accounting=LiveAccounting()
    )
    alerts = recording.decide(decisions.fresh(BASE)).alerts
    return ReplayResult(
        start=float(times[0]),
        end=float(times[-1]),
        ticks=scores.shape[0],
        series=0,
        alerts=alerts,
        failures=failures,
        all_xids=failures,
        evaluation=evaluate(alerts, failures, start=float(times[0]), end=float(times[-1])),
        wall_s=0.0,
        node_names=nodes,
        times=times,
        node_scores=scores,
        xid_held=np.zeros(scores.shape, dtype=bool),
        lead_signal=leads,
        signal_names=names,
        recording=recording,
        decisions=decisions,
    )


NAMES = ("noisy_counter", "gpu_temp", "xid_79")


def _planted(noisy_fp: int, temp_tp: int, *, temp_lead_min: int = 30) -> ReplayResult:
    """Two days of one-minute ticks on four nodes: ``noisy_counter`` leads ``noisy_fp`` false
    alerts (score 0.7 for 5 min), ``gpu_temp`` leads one true alert ``temp_lead_min`` minutes
    before each of ``temp_tp`` failures (score 0.6)."""
    ticks = 2 * 24 * 60
    scores = np.zeros((ticks, 4))
    leads = np.full((ticks, 4), -1, dtype=np.int32)
    failures = []
    for i in range(noisy_fp):
        t0 = 1500 + i * 137  # day 2
        scores[t0 : t0 + 5, i % 4] = 0.7
        leads[t0 : t0 + 5, i % 4] = 0
    for j in range(temp_tp):
        at = 600 + j * 200  # day 1
        node = j % 4
        scores[at - temp_lead_min : at, node] = 0.6
        leads[at - temp_lead_min : at, node] = 1
        failures.append(XidEvent(T0 + 60.0 * at, f"node{node}", "0", 79))
    return _history(scores, leads, failures, NAMES)


def test_alerts_at_threshold_name_the_signal_that_led_at_their_peak() -> None:
    """Re-thresholded alerts carry the recorded leading signal of their peak tick."""
    h = _planted(noisy_fp=2, temp_tp=1)
    assert h.recording is not None
    assert h.decisions is not None
    alerts = h.recording.decide(h.decisions.fresh(BASE)).alerts
    assert {("noisy_counter",), ("gpu_temp",)} == {a.signals for a in alerts}


def test_signal_hits_blame_the_false_alerts_leader_and_credit_the_precursor() -> None:
    """Counted at the looser operating point: noisy_counter led only unmatched alerts,
    gpu_temp only matched ones; XID names are never counted."""
    hits = signal_hits(_planted(noisy_fp=8, temp_tp=4), BASE, 0.5, 3600.0, 300.0)
    assert hits["noisy_counter"][0] == 0
    assert hits["noisy_counter"][1] == 8
    assert hits["gpu_temp"] == (4, 0)
    assert not any(s.startswith("xid_") for s in hits)
    assert WEIGHT_FIT_FP_FACTOR > 1.0


class FakeReplay:
    """Stands for replaying one history: pass 1 gives ``plain``; with weights, the history as
    the weights would have scored it (``weighted``). Records the weights it was asked for."""

    def __init__(self, plain: ReplayResult, weighted: ReplayResult) -> None:
        self.plain, self.weighted = plain, weighted
        self.calls: list[Mapping[str, float] | None] = []

    def __call__(self, weights: Mapping[str, float] | None) -> ReplayResult:
        self.calls.append(weights)
        return self.plain if weights is None else self.weighted


def _down_weighted(h: ReplayResult, factor: float) -> ReplayResult:
    """``h`` with the noisy counter's alerts scaled by ``factor`` (what its weight does)."""
    scores = np.where(h.lead_signal == 0, h.node_scores * factor, h.node_scores)
    return _history(scores, h.lead_signal, h.failures, NAMES)


def test_weights_that_let_the_threshold_drop_are_kept() -> None:
    """Noisy false alerts (0.7) outrank the precursors (0.6) until the noisy signal is
    weighted down: the weighted pass catches every failure before its XID within the
    budget, so its weights and threshold are the ones chosen."""
    plain = _planted(noisy_fp=8, temp_tp=4)
    fake = FakeReplay(plain, _down_weighted(plain, 0.5))
    fitted = fit_calibration(fake, BASE, 0.5, 3600.0, 300.0)
    assert fake.calls[0] is None
    assert fake.calls[1] is not None
    assert fake.calls[1]["noisy_counter"] < 1.0 < fake.calls[1]["gpu_temp"]
    assert fitted.unweighted.point.detected_before < 4
    assert fitted.signal_weights == fake.calls[1]
    assert fitted.threshold.point.detected_before == 4
    assert fitted.threshold.point.fp_per_day <= 0.5
    assert fitted.result is fake.weighted


def test_weights_that_do_not_help_are_dropped() -> None:
    """When the weighted history is no better (here: identical), the file gets no weights
    and the unweighted threshold stands."""
    plain = _planted(noisy_fp=8, temp_tp=4)
    fake = FakeReplay(plain, plain)
    fitted = fit_calibration(fake, BASE, 0.5, 3600.0, 300.0)
    assert 2 == len(fake.calls)
    assert fitted.signal_weights is None
    assert fitted.tried_weights
    assert fitted.threshold == fitted.unweighted
    assert fitted.result is plain


def test_healthy_history_or_opt_out_replays_once_without_weights() -> None:
    """No failures to learn from, or fit_weights=False: one replay, no weights."""
    healthy = _planted(noisy_fp=8, temp_tp=0)
    for history, fit in ((healthy, True), (_planted(noisy_fp=8, temp_tp=4), False)):
        fake = FakeReplay(history, history)
        fitted = fit_calibration(fake, BASE, 0.5, 3600.0, 300.0, fit_weights=fit)
        assert [None] == fake.calls
        assert fitted.signal_weights is None


@pytest.mark.parametrize("configured", [0.3, 0.5])
def test_threshold_stays_at_the_configured_one_where_the_history_cannot_tell(
    configured: float,
) -> None:
    """Precursors at 0.6 and nothing else: every threshold up to 0.6 catches all four early
    with no false positive, so the configured threshold stands; the former rule took the top."""
    history = _planted(noisy_fp=0, temp_tp=4)
    base = dataclasses.replace(BASE, threshold=configured)
    fitted = fit_threshold(history, base, 0.5, 3600.0, 300.0)
    assert (fitted.point.threshold, fitted.point.detected_before) == (configured, 4)
    highest = fit_threshold(history, base, 0.5, 3600.0, 300.0, anchored=False)
    assert (highest.point.threshold, highest.point.detected_before) == (0.6, 4)


def test_signal_hits_need_a_recorded_replay() -> None:
    """A replay that did not record leading signals is refused with the reason."""
    h = dataclasses.replace(_planted(noisy_fp=1, temp_tp=1), lead_signal=np.zeros((0, 0), np.int32))
    with pytest.raises(ValueError, match="record_scores"):
        signal_hits(h, BASE, 0.5, 3600.0, 300.0)
