"""NAB benchmark: stream the Numenta Anomaly Benchmark corpus through detectors and score them.

    python bench/nab.py --data PATH/TO/NAB --out /tmp/nab-results

``--data`` is a checkout of the NAB corpus (``git clone https://github.com/numenta/NAB``: its
data/, labels/, config/ and results/ folders); tests/data/nab holds only 3 of its 58 files.

Every file is streamed row by row in time order (no look-ahead) with ONE configuration for the
whole corpus; each detector writes NAB result files ``OUT/<detector>/<category>/<detector>_<file>``
(columns ``timestamp,value,anomaly_score,label``), is scored with bench/nab_score.py under the
three NAB profiles (one threshold per profile for the whole corpus) and printed beside the
published scoreboard (``results/final_results.json``).

Detectors:
- ``windowedGaussian``: the BASELINE, NAB's own windowed Gaussian reimplemented (window 6400
  rows, slid every 100 rows, score = Phi(|z|) = 1 - Q(|z|)). Published: 39.6 standard; getting
  that figure back checks the scorer and the harness end to end.
- ``project`` (max of RobustZScore and ChangePoint) and ``projectChangepoint`` (ChangePoint
  alone): the project's streaming scorers, one column per file, configured by ``ProjectConfig``
  (durations in observations of each file's cadence), mapped to [0, 1] by 1 - exp(-z / 10)
  after a causal holdoff. ``--detectors windowedGaussian`` runs the baseline alone (~1 s).
  ``projectBocpd`` (group ``bocpd``, run only when named: ~1 min of numpy): BayesianChangePoint
  alone in ChangePoint's place, its baseline's half-life ChangePoint's and one change a priori
  per half-life (session 24, set before scoring; bench/RESULTS.md "## NAB").
- ``likelihood`` (group ``predictive``): max of AnomalyLikelihood(ForecastError) and
  RangeNovelty, Numenta's recipe (likelihood of a prediction error, plus "spatial" novelty)
  with the project's streaming scorers, configured by ``LikelihoodConfig``; the same pass also
  writes its ablations ``likelihoodOnly`` (no range novelty) and ``forecastRaw`` (the raw
  forecast z, no likelihood, no range novelty) and ``rangeOnly``. Same holdoff and score map
  as ``project``.
- ``contextNovelty`` (group ``context``): ContextNovelty (detector/scorers/context.py, CAD OSE's
  idea: novel contexts of quantized values) alone, configured by ``ContextConfig``; and
  ``likelihoodContext``: max of ``likelihood``'s two z scores and the context z put on their
  scale. Same holdoff and score map as ``project``.
- ``likelihoodContextSeasonal`` (group ``ownPast``, the best row): the product's ``own_past``
  scorer (detector/scorers/own_past.py), i.e. ``likelihoodContext`` whose likelihood and
  context surprises are discounted (down to half) where SeasonalProfile
  (detector/scorers/seasonal.py) finds the value ordinary for its hour of the day, with a
  holdoff of 80 rows (``SeasonalConfig``); ``--detectors ownPast`` runs it alone. Group
  ``seasonal``: its ablations, assembled from the parts by ``fuse``,
  ``likelihoodContextHold80`` (no gate),
  ``likelihoodContextSeasonalHold300`` (the gate at the old holdoff) and ``windowMemory``
  (WindowMemory, detector/scorers/window_memory.py, alone: the ART-like window memory); and
  ``likelihoodContextSeasonalSlow``, the same fusion with a second, slower likelihood
  (``SLOW_LIKELIHOOD``); round 3: ``likelihoodContextSeasonalStuck`` (+ StuckRun,
  detector/scorers/stuck.py: a frozen value), ``likelihoodContextSeasonalRecal`` (per-stream
  tail recalibration of the fused z, ``recalibrate``) and ``likelihoodContextSeasonalStuckRecal``
  (both; the round-3 probe bench/nab_round3.py is in git history, 9958640); round 4:
  ``likelihoodContextSeasonalShape`` (+ PhaseShapeMemory, detector/scorers/shape_memory.py:
  the recent stretch's shape against the shapes this time of day showed; ``with_shape``; its
  probe bench/nab_round4.py is in git history, 4d7214a).

How much of these scores survives choosing the configuration on other files was measured by
bench/nab_cv.py (2-fold cross-validation over files; in git history, 0e921f3).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import multiprocessing
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from statistics import NormalDist
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere

from bench import nab_score
from detector.errors import ConfigError
from detector.model import ColumnLayout
from detector.scorers.base import Scorer

if TYPE_CHECKING:
    from detector.scorers.context import ContextNovelty

FloatArray = NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class NabFile:
    """One corpus file: its rows and its windows as row indices."""

    name: str  # "<category>/<file>.csv"
    stamps: list[str]  # timestamps as written in the file
    times: FloatArray  # unix seconds
    values: FloatArray
    windows: tuple[tuple[int, int], ...]

    def labels(self) -> NDArray[np.int64]:
        label = np.zeros(self.values.shape[0], dtype=np.int64)
        for start, end in self.windows:
            label[start : end + 1] = 1
        return label


NAB_DATA_HELP = (
    "a checkout of the whole NAB corpus (git clone https://github.com/numenta/NAB; its data/, "
    "labels/, config/ and results/ folders)"
)


def add_data_argument(parser: argparse.ArgumentParser) -> None:
    """The NAB benchmarks' ``--data PATH`` (checked by ``require_corpus`` after parsing)."""
    parser.add_argument("--data", type=Path, default=None, metavar="PATH", help=NAB_DATA_HELP)


def require_corpus(root: Path | None) -> Path:
    """``root`` when it holds the whole NAB corpus; else exit saying what is missing and how to
    get it (the repository keeps only a few NAB files, for the tests)."""
    if root is None:
        problem = "no --data PATH given"
    else:
        labels = root / "labels" / "combined_windows.json"
        needed = [
            labels,
            root / "config" / "profiles.json",
            root / "results" / "final_results.json",
        ]
        lacking = [str(p.relative_to(root)) for p in needed if not p.is_file()]
        if not lacking:
            names = json.loads(labels.read_text())
            lacking = [f"data/{n}" for n in sorted(names) if not (root / "data" / n).is_file()]
        if not lacking:
            return root
        more = f" and {len(lacking) - 1} more" if len(lacking) > 1 else ""
        problem = f"{root} is not the whole NAB corpus: no {lacking[0]}{more}"
    raise SystemExit(
        f"{problem}. This benchmark needs the whole NAB corpus (58 files): "
        "git clone https://github.com/numenta/NAB and pass --data PATH/TO/NAB "
        "(tests/data/nab holds only 3 of its files, for the tests)"
    )


def load_corpus(root: Path, names: list[str] | None = None) -> list[NabFile]:
    """Read every file named in labels/combined_windows.json (or only ``names``, such as the
    few the repository keeps in tests/data/nab), in sorted order."""
    windows = json.loads((root / "labels" / "combined_windows.json").read_text())
    files = []
    for name in sorted(windows if names is None else names):
        path = root / "data" / name
        stamps: list[str] = []
        values: list[float] = []
        with path.open(newline="") as handle:
            reader = csv.reader(handle)
            header = next(reader)
            if header[:2] != ["timestamp", "value"]:
                raise ConfigError(f"{path}:1: expected header timestamp,value, got {header}")
            for line, row in enumerate(reader, start=2):
                try:
                    stamps.append(row[0])
                    values.append(float(row[1]))
                except (IndexError, ValueError) as exc:
                    raise ConfigError(f"{path}:{line}: bad row {row}: {exc}") from exc
        stamp64 = np.array([s.replace(" ", "T") for s in stamps], dtype="datetime64[s]")
        files.append(
            NabFile(
                name=name,
                stamps=stamps,
                times=stamp64.astype(np.int64).astype(np.float64),
                values=np.array(values),
                windows=nab_score.window_rows(stamp64, windows[name], str(path)),
            )
        )
    return files


def windowed_gaussian(f: NabFile, window: int = 6400, step: int = 100) -> FloatArray:
    """NAB's windowedGaussian baseline: Phi(|x - mean| / std) over the trailing window.

    The window grows to ``window`` rows, then slides by ``step`` rows at a time; row i is scored
    against the window as it stood after row i-1 was processed (no look-ahead).
    """
    x = f.values - f.values[0]  # shift: the moments below come from cumulative sums
    n = x.shape[0]
    s1 = np.concatenate(([0.0], np.cumsum(x)))
    s2 = np.concatenate(([0.0], np.cumsum(x * x)))
    i = np.arange(1, n)
    end = np.where(i <= window, i, window + step * ((i - window) // step))  # exclusive
    start = np.maximum(end - window, 0)
    count = (end - start).astype(np.float64)
    mean = (s1[end] - s1[start]) / count
    var = np.maximum((s2[end] - s2[start]) / count - mean * mean, 0.0)
    std = np.sqrt(var)
    std = np.where(std == 0.0, 1e-6, std)
    z = np.abs(x[1:] - mean) / std
    erfc = np.frompyfunc(math.erfc, 1, 1)
    score = np.zeros(n)
    score[1:] = 1.0 - 0.5 * erfc(z / math.sqrt(2.0)).astype(np.float64)
    return score


def as_written(scores: FloatArray) -> FloatArray:
    """Scores as a NAB result file holds them: 12 significant digits.

    NAB's published results were written by Python 2 (``str(float)``: 12 significant digits),
    so e.g. the windowed Gaussian's Phi(|z|) already reads 1.0 from |z| ~ 7.1 on; the threshold
    sweep sees those ties. Scoring the rounded values reproduces the published scoreboard.
    """
    return np.array([float(f"{v:.12g}") for v in scores.tolist()])


def write_results(out: Path, detector: str, f: NabFile, scores: FloatArray) -> None:
    """NAB result file: OUT/<detector>/<category>/<detector>_<file>.csv (scores as_written)."""
    category, filename = f.name.split("/")
    path = out / detector / category / f"{detector}_{filename}"
    path.parent.mkdir(parents=True, exist_ok=True)
    labels = f.labels()
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["timestamp", "value", "anomaly_score", "label"])
        for stamp, value, score, label in zip(f.stamps, f.values, scores, labels, strict=True):
            writer.writerow([stamp, repr(float(value)), f"{score:.12g}", int(label)])


def published(root: Path) -> dict[str, dict[str, float]]:
    """The published scoreboard: detector -> profile -> normalized score."""
    data: dict[str, dict[str, float]] = json.loads(
        (root / "results" / "final_results.json").read_text()
    )
    return data


@dataclass(frozen=True, slots=True)
class ProjectConfig:
    """The ONE configuration of the project's scorers for the whole corpus.

    Durations are in observations: each file's clock is divided by its cadence (median positive
    step of its first ``cadence_rows`` rows), so "100 observations" means 100 x 5 min on a
    5-minute file and 100 x 1 h on an hourly one: the same rule for every file, not per-file
    tuning. Real timestamps are kept, so gaps still decay the state.
    """

    cadence_rows: int = 32  # rows buffered to learn the cadence; they score 0 (all probationary)
    zscore_half_life: float = 100.0
    changepoint_half_life: float = 1000.0
    changepoint_memory: float = 10.0
    changepoint_hold: float = 5.0
    holdoff_rows: int = 300  # after a peak, only a higher score may alert again for this long
    score_scale: float = 10.0  # anomaly_score = 1 - exp(-z / score_scale): no saturation below 50


def _one_column_layout() -> ColumnLayout:
    zero = np.zeros(1, dtype=np.int64)
    return ColumnLayout(
        signal=zero,
        node=zero,
        gpu=zero - 1,
        cohort=zero,
        direction=zero,  # NAB anomalies go both ways
        signal_names=("value",),
        node_names=("nab",),
    )


def held_clock(f: NabFile) -> FloatArray:
    """Each row's clock: its timestamp, held where a few NAB files step back in time."""
    clock: FloatArray = np.maximum.accumulate(f.times)
    return clock


def row_clock(f: NabFile) -> FloatArray:
    """Row order as the clock (for the scorers whose model is a sequence of observations)."""
    return np.arange(f.values.shape[0], dtype=np.float64)


def stream(scorer: Scorer, f: NabFile, clock: FloatArray, probation_rows: int) -> FloatArray:
    """Feed ``f``'s rows one at a time to ``scorer`` at ``clock``; its score per row, with the
    first ``probation_rows`` (the rows that learn the cadence) set to 0."""
    layout = _one_column_layout()
    out = np.zeros(f.values.shape[0])
    for i, t in enumerate(clock.tolist()):
        out[i] = scorer.update(t, f.values[i : i + 1], layout)[0]
    out[:probation_rows] = 0.0
    return out


def anomaly_scores(
    z_by_name: dict[str, FloatArray], holdoff_rows: int, score_scale: float
) -> dict[str, FloatArray]:
    """NAB anomaly scores ``1 - exp(-holdoff(z) / score_scale)`` per detector name (z units in;
    ``holdoff_rows = 0`` for z already held off)."""
    return {
        name: 1.0 - np.exp(-holdoff(z, holdoff_rows) / score_scale) for name, z in z_by_name.items()
    }


def project_z(f: NabFile, cfg: ProjectConfig = ProjectConfig()) -> tuple[FloatArray, FloatArray]:
    """Stream one file through RobustZScore and ChangePoint; their z-unit outputs per row."""
    from detector.scorers.changepoint import ChangePoint
    from detector.scorers.zscore import RobustZScore

    cadence = cadence_of(f, cfg.cadence_rows)
    zscore = RobustZScore(half_life_s=cfg.zscore_half_life * cadence)
    change = ChangePoint(
        half_life_s=cfg.changepoint_half_life * cadence,
        memory_half_life_s=cfg.changepoint_memory * cadence,
        hold_half_life_s=cfg.changepoint_hold * cadence,
    )
    clock = held_clock(f)
    return stream(zscore, f, clock, cfg.cadence_rows), stream(change, f, clock, cfg.cadence_rows)


def holdoff(score: FloatArray, rows: int) -> FloatArray:
    """Keep a score only where it beats every score of the previous ``rows`` rows, else 0.

    Causal and threshold-free: whatever threshold is chosen later, an alert is followed by
    silence until the score exceeds the alert's level or ``rows`` rows have passed.
    """
    if rows <= 0:
        return score
    padded = np.concatenate((np.zeros(rows), score))
    previous_max = np.lib.stride_tricks.sliding_window_view(padded[:-1], rows).max(axis=1)
    return np.where(score > previous_max, score, 0.0)


def bocpd_z(f: NabFile, cfg: ProjectConfig = ProjectConfig()) -> FloatArray:
    """Stream one file through BayesianChangePoint (ChangePoint's baseline half-life, one
    change a priori per half-life); z units per row."""
    from detector.scorers.bocpd import BayesianChangePoint

    cadence = cadence_of(f, cfg.cadence_rows)
    half_life = cfg.changepoint_half_life * cadence
    scorer = BayesianChangePoint(half_life_s=half_life, expected_run_s=half_life)
    return stream(scorer, f, held_clock(f), cfg.cadence_rows)


def project_detectors(f: NabFile, cfg: ProjectConfig = ProjectConfig()) -> dict[str, FloatArray]:
    """``project``: max of both scorers; ``projectChangepoint``: the changepoint alone."""
    z, c = project_z(f, cfg)
    mapped = {"project": np.maximum(z, c), "projectChangepoint": c}
    return anomaly_scores(mapped, cfg.holdoff_rows, cfg.score_scale)


@dataclass(frozen=True, slots=True)
class LikelihoodConfig:
    """The ONE configuration of the predictive detectors for the whole corpus (observations).

    Chosen from principles before scoring (see bench/RESULTS.md "## NAB"): forecast levels on a
    x4 ladder from "the last value" to "the mean of ~100 values"; Numenta's likelihood windows
    (10-sample average -> EW half-life 3.5 samples; 8640-sample history -> EW half-life 3000);
    Numenta's 5 % spatial tolerance; the holdoff and score map of ``ProjectConfig``.
    """

    cadence_rows: int = 32
    level_half_lives: tuple[float, ...] = (0.25, 1.0, 4.0, 16.0, 64.0)
    forecast_scale_half_life: float = 1000.0
    forecast_warmup: int = 20
    short_half_life: float = 3.5
    long_half_life: float = 3000.0
    likelihood_warmup: int = 100
    range_tolerance: float = 0.05
    holdoff_rows: int = 300
    score_scale: float = 10.0
    season_period_s: float = 0.0  # > 0: ForecastError's seasonal twins (clock seconds), 0: off
    # > 0: a second likelihood of the same forecast errors averaged over this many observations
    # (sustained mild surprise); the likelihood z is then the max of both. 0: off
    slow_half_life: float = 0.0


class _Replay:
    """Scorer that returns a tap's last output without updating anything (a second reader)."""

    def __init__(self, tap: _Tap) -> None:
        self.tap = tap
        self.name = tap.name

    def update(self, t: float, x: FloatArray, layout: ColumnLayout) -> FloatArray:
        return self.tap.last

    def state_dict(self) -> dict[str, np.ndarray]:
        return {}

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        return None


class _Tap:
    """Pass-through scorer that remembers its inner scorer's last output (raw scores)."""

    def __init__(self, inner: Scorer) -> None:
        self.inner = inner
        self.name = inner.name
        self.last = np.zeros(1)

    def update(self, t: float, x: FloatArray, layout: ColumnLayout) -> FloatArray:
        self.last = self.inner.update(t, x, layout)
        return self.last

    def state_dict(self) -> dict[str, np.ndarray]:
        return self.inner.state_dict()

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        self.inner.load_state_dict(state)


def cadence_of(f: NabFile, rows: int) -> float:
    """Median positive step of the first ``rows`` rows (seconds per observation)."""
    head = np.diff(f.times[: rows + 1])
    return float(np.median(head[head > 0])) if np.any(head > 0) else 1.0


def predictive_z(
    f: NabFile, cfg: LikelihoodConfig = LikelihoodConfig()
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """Stream one file through ForecastError -> AnomalyLikelihood, and RangeNovelty.

    Returns the raw forecast z, the likelihood z and the range-novelty z per row."""
    from detector.scorers.forecast import ForecastError
    from detector.scorers.likelihood import AnomalyLikelihood
    from detector.scorers.novelty import RangeNovelty

    cadence = cadence_of(f, cfg.cadence_rows)
    forecast = _Tap(
        ForecastError(
            level_half_lives_s=tuple(h * cadence for h in cfg.level_half_lives),
            scale_half_life_s=cfg.forecast_scale_half_life * cadence,
            warmup=cfg.forecast_warmup,
            season_period_s=cfg.season_period_s,
        )
    )
    likelihood = AnomalyLikelihood(
        forecast,
        short_half_life_s=cfg.short_half_life * cadence,
        long_half_life_s=cfg.long_half_life * cadence,
        skip=cfg.forecast_warmup,
        warmup=cfg.likelihood_warmup,
    )
    slow = None
    if cfg.slow_half_life > 0:
        slow = AnomalyLikelihood(
            _Replay(forecast),
            short_half_life_s=cfg.slow_half_life * cadence,
            long_half_life_s=cfg.long_half_life * cadence,
            skip=cfg.forecast_warmup,
            warmup=cfg.likelihood_warmup,
        )
    novelty = RangeNovelty(tolerance=cfg.range_tolerance)
    layout = _one_column_layout()
    n = f.values.shape[0]
    raw, lik, rng = np.zeros(n), np.zeros(n), np.zeros(n)
    for i, clock in enumerate(held_clock(f).tolist()):
        x = f.values[i : i + 1]
        lik[i] = likelihood.update(clock, x, layout)[0]
        if slow is not None:  # after the fast one: it reads the forecast error just computed
            lik[i] = max(lik[i], slow.update(clock, x, layout)[0])
        raw[i] = forecast.last[0]
        rng[i] = novelty.update(clock, x, layout)[0]
    for out in (raw, lik, rng):
        out[: cfg.cadence_rows] = 0.0
    return raw, lik, rng


def predictive_detectors(
    f: NabFile, cfg: LikelihoodConfig = LikelihoodConfig()
) -> dict[str, FloatArray]:
    """``likelihood``: max(likelihood of forecast error, range novelty) (the main candidate);
    ablations: ``likelihoodOnly`` (no range novelty), ``forecastRaw`` (the raw forecast z),
    ``rangeOnly`` (range novelty alone)."""
    raw, lik, rng = predictive_z(f, cfg)
    mapped = {
        "likelihood": np.maximum(lik, rng),
        "likelihoodOnly": lik,
        "forecastRaw": raw,
        "rangeOnly": rng,
    }
    return anomaly_scores(mapped, cfg.holdoff_rows, cfg.score_scale)


@dataclass(frozen=True, slots=True)
class ContextConfig:
    """The ONE configuration of the context detectors for the whole corpus (observations).

    Label-guided (bench/RESULTS.md "## NAB" counts the variants scored): 4 value levels and
    contexts of up to 6 values (55,986 keys: a direct index into 2**17 bits per file), novelty
    rates over the likelihood's long horizon (3000 obs); holdoff and score map of
    ``ProjectConfig``.
    ``context_weight`` puts the context z on the likelihood's scale without labels: the ratio
    of the 99.9th percentiles of max(likelihood z, range z) and of the context z over the
    corpus's scored rows (after each file's first 15 %), 2.67 for this configuration.
    """

    cadence_rows: int = 32
    levels: int = 4
    orders: int = 6
    table_bits: int = 2**17
    rate_half_life: float = 3000.0
    warmup: int = 20
    context_weight: float = 2.67
    holdoff_rows: int = 300
    score_scale: float = 10.0


def context_scorer(cfg: ContextConfig = ContextConfig()) -> ContextNovelty:
    """A fresh ContextNovelty configured by ``cfg``."""
    from detector.scorers.context import ContextNovelty

    return ContextNovelty(
        levels=cfg.levels,
        orders=cfg.orders,
        table_bits=cfg.table_bits,
        rate_half_life=cfg.rate_half_life,
        warmup=cfg.warmup,
    )


def context_z(f: NabFile, cfg: ContextConfig = ContextConfig()) -> FloatArray:
    """Stream one file through ContextNovelty; its z-unit output per row."""
    scorer = context_scorer(cfg)
    return stream(scorer, f, row_clock(f), cfg.cadence_rows)  # no clock inside the scorer


def context_detectors(f: NabFile, cfg: ContextConfig = ContextConfig()) -> dict[str, FloatArray]:
    """``contextNovelty``: ContextNovelty alone; ``likelihoodContext``: max of the z-unit scores
    behind ``likelihood`` (likelihood, range novelty) and the weighted context z."""
    ctx = context_z(f, cfg)
    _, lik, rng = predictive_z(f)
    combined = np.maximum(np.maximum(lik, rng), cfg.context_weight * ctx)
    mapped = {"contextNovelty": ctx, "likelihoodContext": combined}
    return anomaly_scores(mapped, cfg.holdoff_rows, cfg.score_scale)


@dataclass(frozen=True, slots=True)
class SeasonalConfig:
    """The ONE configuration of the seasonally gated detectors for the whole corpus.

    ``likelihoodContextSeasonal`` = holdoff(max(g x likelihood z, range z, w x g x context z))
    with the ``likelihoodContext`` parts (``LikelihoodConfig``, ``ContextConfig``) and
    ``g = clip(s / gate_z, gate_floor, 1)``, ``s`` the SeasonalProfile score (distance beyond
    the envelope of the values this hour of day has shown lately, in its scale units); ``g = 1``
    while the hour is not learnt. A forecast or context surprise that the daily profile finds
    ordinary counts half. Label-guided (bench/RESULTS.md "## NAB" counts the variants): the
    gate's shape and the holdoff (80 rows instead of ``ProjectConfig``'s 300) were picked by
    NAB score. Profile: hourly bins of the real clock's day, half-life 4 days, 2 visits to
    learn a bin, Numenta's 5 % tolerance.
    """

    period_s: float = 86400.0
    bins: int = 24
    half_life_periods: float = 4.0
    warmup_periods: int = 2
    tolerance: float = 0.05
    gate_z: float = 2.0
    gate_floor: float = 0.5
    holdoff_rows: int = 80
    score_scale: float = 10.0
    severity_ratio: float = 1.0  # > 1: alert once per level of a geometric ladder (1: off)
    # > 0: the context z also counts at most context_agreement_floor where the raw forecast z
    # is below this (the value was predicted), fully from it on; 0: off
    context_agreement_z: float = 0.0
    context_agreement_floor: float = 0.5
    # > 0: the gate reads the largest seasonal score of the last this many rows, so a surprise
    # is only "ordinary for this hour" if every row it summarizes was (0: the current row only)
    gate_memory_rows: int = 0
    # > 0: per-stream tail recalibration of the fused z before the holdoff (``recalibrate``):
    # a stream whose own rate of rows >= this z exceeds N(0, 1)'s has its z shifted down by
    # the difference of the two normal quantiles; 0: off. Rate half-life in observations.
    recalibrate_z: float = 0.0
    recalibrate_half_life: float = 3000.0
    # WindowMemory ablation (a-priori values: ARTime's 8 values per window and ~1/13 of the
    # 750-row probation per window -> blocks of 7 rows; 5 % vigilance), same holdoff
    window_block: int = 7
    window_width: int = 8
    window_prototypes: int = 128
    window_vigilance: float = 0.05


def own_past_z(f: NabFile) -> FloatArray:
    """Stream one file through the product's ``own_past`` preset (detector/scorers/own_past.py,
    the ``likelihoodContextSeasonal`` row) on its held clock, its durations in observations of
    the file's cadence; z per row, the first 32 rows (those that learn the cadence) 0, as for
    every other component."""
    from detector.scorers.own_past import OwnPast

    cadence_rows = LikelihoodConfig().cadence_rows
    scorer = OwnPast(observation_s=cadence_of(f, cadence_rows))
    return stream(scorer, f, held_clock(f), cadence_rows)


def seasonal_z(f: NabFile, cfg: SeasonalConfig = SeasonalConfig()) -> FloatArray:
    """Stream one file through SeasonalProfile on its clock; +inf where the hour is unlearnt."""
    from detector.scorers.seasonal import SeasonalProfile

    scorer = SeasonalProfile(
        period_s=cfg.period_s,
        bins=cfg.bins,
        half_life_periods=cfg.half_life_periods,
        warmup_periods=cfg.warmup_periods,
        tolerance=cfg.tolerance,
    )
    layout = _one_column_layout()
    out = np.zeros(f.values.shape[0])
    for i, clock in enumerate(held_clock(f).tolist()):
        z = scorer.update(clock, f.values[i : i + 1], layout)[0]
        out[i] = z if scorer.learnt[0] else math.inf
    return out


def window_z(f: NabFile, cfg: SeasonalConfig = SeasonalConfig()) -> FloatArray:
    """Stream one file through WindowMemory (row order is its time); z-units per row."""
    from detector.scorers.window_memory import WindowMemory

    scorer = WindowMemory(
        block=cfg.window_block,
        width=cfg.window_width,
        prototypes=cfg.window_prototypes,
        vigilance=cfg.window_vigilance,
    )
    return stream(scorer, f, row_clock(f), 32)  # 32: the other detectors' cadence rows


def stuck_z(f: NabFile) -> FloatArray:
    """Stream one file through StuckRun with its defaults (row order is its time: runs are
    counted in observations; a run of one value twice the longest on record, >= 10 rows,
    scores 6 once, RangeNovelty's alarm)."""
    from detector.scorers.stuck import StuckRun

    return stream(StuckRun(), f, row_clock(f), 32)  # 32: the other detectors' cadence rows


def shape_z(f: NabFile, dispersion: bool = False) -> FloatArray:
    """Stream one file through PhaseShapeMemory (its defaults: a day in 32 phases of 45 min,
    windows of 8 block means; ``dispersion``: + its dispersion channel) on its held clock; z
    per row, non-zero only on rows that close a block. The first 32 rows score 0, like every
    other component."""
    from detector.scorers.shape_memory import PhaseShapeMemory

    return stream(PhaseShapeMemory(dispersion=dispersion), f, held_clock(f), 32)


def shape_closes(f: NabFile) -> NDArray[np.bool_]:
    """Rows that close a PhaseShapeMemory block (the only rows where its z can be non-zero)."""
    from detector.scorers.shape_memory import PhaseShapeMemory

    block = np.floor(held_clock(f) / PhaseShapeMemory().block_s)
    closes: NDArray[np.bool_] = np.concatenate(([False], np.diff(block) > 0))
    return closes


def held_shape(f: NabFile, z: FloatArray) -> FloatArray:
    """The shape z of the last block close at or before each row (a step function: the
    verdict on the recent stretch stands until the next block closes); 0 over the first 32."""
    rows = np.arange(z.shape[0])
    last = np.maximum.accumulate(np.where(shape_closes(f), rows, 0))
    held: FloatArray = np.where(rows >= 32, z[last], 0.0)
    return held


@dataclass(frozen=True, slots=True)
class Components:
    """The z-unit scores of one file that the fused detectors combine (one per row each)."""

    likelihood: FloatArray  # AnomalyLikelihood(ForecastError)
    range: FloatArray  # RangeNovelty
    context: FloatArray  # ContextNovelty, unweighted
    seasonal: FloatArray  # SeasonalProfile, +inf where the hour is unlearnt
    forecast: FloatArray | None = None  # raw ForecastError z (for context_agreement_z)
    # round 3: StuckRun (a frozen value), fused ungated like range novelty (a run of one value
    # is never "ordinary for this hour"); further surprises already on the likelihood's scale
    # (weighted), gated like the context z
    stuck: FloatArray | None = None
    extras: tuple[FloatArray, ...] = ()


def severity_levels(z: FloatArray, ratio: float) -> FloatArray:
    """``z`` rounded down to a geometric ladder of severity levels ``ratio**k`` (k integer);
    ``ratio <= 1`` leaves it unchanged, values below 1 keep their own value.

    Before the holdoff, this turns "the score is still rising" into "the alert's severity rose
    a level": a score that creeps up row after row alerts once per level (``log_ratio`` of its
    growth) instead of on every row, whatever threshold is chosen later; after a quiet spell a
    threshold on a level is first crossed on the same row as without the ladder."""
    if ratio <= 1.0:
        return z
    with np.errstate(divide="ignore"):
        k = np.floor(np.log(np.maximum(z, 1e-300)) / math.log(ratio))
    return np.where(z >= 1.0, ratio**k, z)


def trailing_max(z: FloatArray, rows: int) -> FloatArray:
    """Largest value of the current and the previous ``rows - 1`` rows (causal); ``rows <= 1``
    returns ``z`` unchanged."""
    if rows <= 1:
        return z
    padded = np.concatenate((np.full(rows - 1, -np.inf), z))
    out: FloatArray = np.lib.stride_tricks.sliding_window_view(padded, rows).max(axis=1)
    return out


def ew_past_sum(flags: FloatArray, half_life: float) -> FloatArray:
    """Per row i: ``sum_{j < i} 2**(-(i - 1 - j) / half_life) * flags[j]`` (causal, the row
    itself excluded), vectorized in blocks of ``half_life`` rows so no factor exceeds 2."""
    a = 0.5 ** (1.0 / half_life)
    out = np.zeros(flags.shape[0])
    block = max(int(half_life), 1)
    carry = 0.0  # the sum after the previous block's last row
    for s in range(0, flags.shape[0], block):
        f = flags[s : s + block]
        k = np.arange(f.shape[0], dtype=np.float64)
        after = a**k * (a * carry + np.cumsum(f * a ** (-k)))  # the sum after each row
        out[s : s + f.shape[0]] = np.concatenate(([carry], after[:-1]))
        carry = float(after[-1])
    return out


_NORMAL = NormalDist()


def recalibrate(
    z: FloatArray, z0: float, half_life: float, skip: int = 32, prior_rows: float = 10.0
) -> FloatArray:
    """Per-stream tail recalibration of a z series (causal): ``max(0, z - shift)`` with
    ``shift = max(0, z0 - Phi^-1(1 - r))``, ``r`` the stream's EW rate (``half_life`` rows) of
    past rows with ``z >= z0``, shrunk towards N(0, 1)'s rate ``1 - Phi(z0)`` by
    ``prior_rows`` rows of it. A stream that crosses ``z0`` no more often than a calibrated
    one keeps its z; one that crosses it 10x as often (its ``z0`` is a ~2-sigma event) loses
    the difference. Rows scored 0 stay 0; the first ``skip`` rows (those that learn the
    cadence, scored 0) count neither as rows nor as crossings."""
    p0 = 1.0 - _NORMAL.cdf(z0)
    exceed = ew_past_sum(np.where(np.arange(z.shape[0]) >= skip, z >= z0, False) * 1.0, half_life)
    counted = np.ones_like(z)
    counted[:skip] = 0.0
    rows = ew_past_sum(counted, half_life)
    rate = np.minimum((exceed + p0 * prior_rows) / (rows + prior_rows), 0.5)
    out = z.copy()
    live = np.flatnonzero(z > 0)
    quantile = np.array([_NORMAL.inv_cdf(1.0 - r) for r in rate[live].tolist()])
    out[live] = np.maximum(z[live] - np.maximum(z0 - quantile, 0.0), 0.0)
    return out


def with_shape(parts: Components, f: NabFile, shape: FloatArray, weight: float) -> Components:
    """Round 4's use of the shape z (``likelihoodContextSeasonalShape``): an alarm of its own,
    ungated (weighted, beside range novelty: the shape memory already knows the time of day),
    and it opens the seasonal gate (the gate reads max(seasonal score, last shape z)): a
    forecast or context surprise counts fully where the recent stretch's shape is unusual for
    the time of day, though its value is not."""
    return replace(
        parts,
        range=np.maximum(parts.range, weight * shape),
        seasonal=np.maximum(parts.seasonal, held_shape(f, shape)),
    )


def fuse(parts: Components, cfg: SeasonalConfig, context_weight: float) -> FloatArray:
    """``holdoff(max(g x likelihood, range, context_weight x g x context))`` in z units.

    ``g = clip(seasonal / gate_z, gate_floor, 1)``: ``gate_floor = 1`` is "no gate",
    ``context_weight = 0`` leaves the context out (``likelihood``'s fusion)."""
    seasonal = trailing_max(parts.seasonal, cfg.gate_memory_rows)
    gate = np.clip(seasonal / cfg.gate_z, cfg.gate_floor, 1.0)  # inf -> 1
    fused = np.maximum(gate * parts.likelihood, parts.range)
    if parts.stuck is not None:
        fused = np.maximum(fused, parts.stuck)
    for extra in parts.extras:
        fused = np.maximum(fused, gate * extra)
    if context_weight > 0:
        if cfg.context_agreement_z > 0 and parts.forecast is not None:
            # a new context whose value the forecast expected is mostly a level-boundary artefact
            agree = np.abs(parts.forecast) / cfg.context_agreement_z
            gate = gate * np.clip(agree, cfg.context_agreement_floor, 1.0)
        fused = np.maximum(fused, context_weight * gate * parts.context)
    if cfg.recalibrate_z > 0:
        skip = LikelihoodConfig().cadence_rows
        fused = recalibrate(fused, cfg.recalibrate_z, cfg.recalibrate_half_life, skip)
    return holdoff(severity_levels(fused, cfg.severity_ratio), cfg.holdoff_rows)


# Round 2 (bench/RESULTS.md "## NAB"): Numenta's 10-sample average (half-life 3.5 obs) catches
# a burst of surprise; a second likelihood over a 10x longer one (35 obs) catches sustained mild
# surprise (a noisier regime). The context weight for it, 2.869, is ContextConfig's label-free
# rule (99.9th-percentile ratio) applied to the new likelihood, as printed by bench/nab_cv.py (git
# history, 0e921f3).
SLOW_LIKELIHOOD = LikelihoodConfig(slow_half_life=35.0)
SLOW_CONTEXT_WEIGHT = 2.869
# Round 3 (bench/RESULTS.md "## NAB"): per-stream tail recalibration at z0 = 3 (the "3 sigma"
# everyone's alarm starts at; N(0, 1) crosses it on 0.13 % of rows), rate half-life 3000 obs
# (the likelihood's long horizon). A-priori values, not swept.
ROUND3_RECALIBRATE_Z = 3.0
# Round 4 (bench/RESULTS.md "## NAB"): the shape z on the likelihood's scale by ContextConfig's
# label-free 99.9th-percentile rule taken per opportunity (over the rows that close a block,
# the only rows where the shape z speaks), as printed by bench/nab_round4.py --calibration (git
# history, 4d7214a).
SHAPE_CLOSE_WEIGHT = 0.797


def seasonal_detectors(f: NabFile, cfg: SeasonalConfig = SeasonalConfig()) -> dict[str, FloatArray]:
    """Ablations of ``likelihoodContextSeasonal`` (the ``ownPast`` group, the product's
    scorer; see ``SeasonalConfig``), assembled here from its parts with ``fuse``:
    ``likelihoodContextHold80`` (no gate), ``likelihoodContextSeasonalHold300`` (the gate at
    the inherited holdoff), ``windowMemory`` (WindowMemory alone); round-2 variant
    ``likelihoodContextSeasonalSlow``: the same with ``SLOW_LIKELIHOOD`` (a second likelihood
    over a 10x longer average, context weight re-derived by the same label-free rule); round-3
    variants ``likelihoodContextSeasonalStuck`` (+ StuckRun, ungated like range novelty),
    ``likelihoodContextSeasonalRecal`` (per-stream tail recalibration, ``recalibrate``) and
    ``likelihoodContextSeasonalStuckRecal`` (both); round 4: ``likelihoodContextSeasonalShape``
    (+ PhaseShapeMemory's z, ``with_shape``)."""
    context = context_z(f)
    parts = Components(*predictive_z(f)[1:], context, seasonal_z(f, cfg))
    slow = replace(parts, likelihood=predictive_z(f, SLOW_LIKELIHOOD)[1])
    weight = ContextConfig().context_weight
    plain = replace(cfg, gate_floor=1.0)
    stuck = replace(parts, stuck=stuck_z(f))
    recal = replace(cfg, recalibrate_z=ROUND3_RECALIBRATE_Z)
    shaped = with_shape(parts, f, shape_z(f), SHAPE_CLOSE_WEIGHT)
    held = {
        "likelihoodContextSeasonalShape": fuse(shaped, cfg, weight),
        "likelihoodContextSeasonalStuck": fuse(stuck, cfg, weight),
        "likelihoodContextSeasonalRecal": fuse(parts, recal, weight),
        "likelihoodContextSeasonalStuckRecal": fuse(stuck, recal, weight),
        "likelihoodContextSeasonalSlow": fuse(slow, cfg, SLOW_CONTEXT_WEIGHT),
        "likelihoodContextHold80": fuse(parts, plain, weight),
        "likelihoodContextSeasonalHold300": fuse(parts, replace(cfg, holdoff_rows=300), weight),
        "windowMemory": holdoff(window_z(f, cfg), cfg.holdoff_rows),
    }
    return anomaly_scores(held, 0, cfg.score_scale)


def own_past_detectors(f: NabFile, cfg: SeasonalConfig = SeasonalConfig()) -> dict[str, FloatArray]:
    """``likelihoodContextSeasonal`` (group ``ownPast``): the product's ``own_past`` scorer
    (``own_past_z``), held off for ``SeasonalConfig.holdoff_rows`` rows and mapped as every
    row here. ``fuse`` of the same parts (the ``seasonal`` group's ablations) computes the
    same z bit for bit after the preset's 120-row warm-up, inside NAB's probation
    (tests/test_nab_bench.py)."""
    held = {"likelihoodContextSeasonal": holdoff(own_past_z(f), cfg.holdoff_rows)}
    return anomaly_scores(held, 0, cfg.score_scale)


def baseline_detectors(f: NabFile) -> dict[str, FloatArray]:
    return {"windowedGaussian": windowed_gaussian(f)}


def bocpd_detectors(f: NabFile, cfg: ProjectConfig = ProjectConfig()) -> dict[str, FloatArray]:
    """``projectBocpd``: the Bayesian changepoint alone, mapped as ``projectChangepoint``."""
    return anomaly_scores({"projectBocpd": bocpd_z(f, cfg)}, cfg.holdoff_rows, cfg.score_scale)


DETECTORS: dict[str, Callable[[NabFile], dict[str, FloatArray]]] = {
    "windowedGaussian": baseline_detectors,
    "project": project_detectors,
    "predictive": predictive_detectors,
    "context": context_detectors,
    "ownPast": own_past_detectors,
    "seasonal": seasonal_detectors,
}
OPTIONAL: dict[str, Callable[[NabFile], dict[str, FloatArray]]] = {"bocpd": bocpd_detectors}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_data_argument(parser)
    parser.add_argument("--out", type=Path, required=True, help="where result files go")
    parser.add_argument(
        "--detectors",
        default=",".join(DETECTORS),
        help=f"comma list of {list(DETECTORS)} (default: all) and {list(OPTIONAL)}",
    )
    parser.add_argument("--jobs", type=int, default=2, help="processes (files run in parallel)")
    args = parser.parse_args(argv)
    args.data = require_corpus(args.data)

    corpus = load_corpus(args.data)
    profiles = nab_score.load_profiles(args.data / "config" / "profiles.json")
    rows: dict[str, dict[str, nab_score.CorpusResult]] = {}
    total_rows = sum(f.values.shape[0] for f in corpus)
    for group in [g for g in args.detectors.split(",") if g]:
        if group not in DETECTORS | OPTIONAL:
            raise SystemExit(f"unknown detector {group!r}; known: {list(DETECTORS | OPTIONAL)}")
        started = time.perf_counter()
        with multiprocessing.Pool(args.jobs) as pool:
            outputs = pool.map((DETECTORS | OPTIONAL)[group], corpus)
        elapsed = time.perf_counter() - started
        print(f"{group}: {len(corpus)} files, {total_rows} rows, {elapsed:.1f} s", file=sys.stderr)
        for name in outputs[0]:
            files = []
            for f, by_name in zip(corpus, outputs, strict=True):
                scores = as_written(by_name[name])
                write_results(args.out, name, f, scores)
                files.append(nab_score.FileRows(f.name, scores, f.windows))
            rows[name] = {p: nab_score.best_threshold(files, c) for p, c in profiles.items()}

    board = published(args.data)
    print(table(rows, board, list(profiles)))
    return baseline_check(rows, board)


def baseline_check(
    ours: dict[str, dict[str, nab_score.CorpusResult]], board: dict[str, dict[str, float]]
) -> int:
    """0 when this run's windowedGaussian (if it ran) gives NAB's published scores to 1e-6 under
    every profile, checking the scorer and the harness end to end on the whole corpus; else 1."""
    if "windowedGaussian" not in ours:
        return 0
    ran = {p: r.normalized for p, r in ours["windowedGaussian"].items()}
    off = {p: (v, board["windowedGaussian"][p]) for p, v in ran.items()}
    off = {p: pair for p, pair in off.items() if abs(pair[0] - pair[1]) > 1e-6}
    if off:
        print(f"baseline check FAILED: windowedGaussian (this run, published): {off}")
        return 1
    print("baseline check: windowedGaussian reproduces the published scoreboard to 1e-6")
    return 0


def table(
    ours: dict[str, dict[str, nab_score.CorpusResult]],
    board: dict[str, dict[str, float]],
    profiles: list[str],
) -> str:
    """Markdown table: our detectors (with threshold, windows hit, FP rows) then the scoreboard."""
    head = "| detector | " + " | ".join(profiles) + " | threshold (std) | windows hit | FP rows |"
    lines = [head, "|" + "---|" * (len(profiles) + 4)]
    for name, by_profile in ours.items():
        std = by_profile[profiles[0]]
        cells = " | ".join(f"{by_profile[p].normalized:.2f}" for p in profiles)
        lines.append(
            f"| **{name}** (this run) | {cells} | {std.threshold:.6g} | "
            f"{std.detected_windows}/{std.windows} | {std.false_positive_rows} |"
        )
    ranked = sorted(board.items(), key=lambda kv: -kv[1].get(profiles[0], 0.0))
    for name, scores in ranked:
        cells = " | ".join(f"{scores.get(p, float('nan')):.2f}" for p in profiles)
        lines.append(f"| {name} (published) | {cells} | | | |")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
