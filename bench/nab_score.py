"""The Numenta Anomaly Benchmark (NAB) score, reimplemented from its published definition.

Follows NAB v1.1 (the ``Sweeper`` that produced ``results/final_results.json``):

- Rows before the probationary length ``min(floor(0.15 n), 0.15 * 5000)`` are not scored.
- Every scored row gets a *sweep score*, the value it contributes when it is a detection.
  Inside window ``[s, e]`` (row indices, width ``w = e - s + 1``) row ``i`` sits at
  ``y = -(e - i + 1) / w`` and is worth ``A_TP * sigma(y) / sigma(-1)``, so a detection on the
  window's first row is worth exactly ``A_TP``. Outside windows a row after window ``[s, e]`` sits
  at ``y = (i - e) / (w - 1)`` and costs ``A_FP * sigma(y)`` (negative); before any window it
  costs ``A_FP`` in full. ``sigma(y) = 2 / (1 + exp(5 y)) - 1``, and ``-1`` from ``y >= 3`` on.
- A window is worth the best (earliest) of its detections, or ``-A_FN`` when it has none;
  every detection outside windows adds its (negative) sweep score.
- A row is a detection when its anomaly score is ``>= threshold``; ONE threshold serves the whole
  corpus, chosen per profile to maximize the corpus total (an exact sweep over every distinct
  anomaly score, not a local search).
- Normalized score ``100 (raw - null) / (perfect - null)``: ``null`` never fires (every window
  missed: ``-A_FN`` per scored window), ``perfect`` hits every window on its first row
  (``A_TP`` per window).

Window positions are row indices in the file, not times: NAB files have gaps and repeated
timestamps, and NAB locates a window limit at the first row carrying that exact timestamp.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from detector.errors import ConfigError

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]

PROBATION_FRACTION = 0.15
OUTSIDE = -1  # window id of a scored row outside every window
PROBATION = -2  # window id of a row in the probationary period (never scored)


@dataclass(frozen=True, slots=True)
class CostMatrix:
    """One NAB application profile: weights of a true positive, false positive, missed window."""

    tp: float
    fp: float
    fn: float


@dataclass(frozen=True, slots=True)
class FileRows:
    """One scored file: its anomaly scores and where its windows are (row indices, inclusive)."""

    name: str
    scores: FloatArray
    windows: tuple[tuple[int, int], ...]


@dataclass(frozen=True, slots=True)
class CorpusResult:
    """The corpus total at one threshold, raw and normalized."""

    threshold: float
    raw: float
    normalized: float
    windows: int
    detected_windows: int
    false_positive_rows: int


def load_profiles(path: Path) -> dict[str, CostMatrix]:
    """Read NAB's ``config/profiles.json``; a missing weight is a ConfigError naming it."""
    data = json.loads(path.read_text())
    profiles: dict[str, CostMatrix] = {}
    for name, body in data.items():
        try:
            matrix = body["CostMatrix"]
            profiles[name] = CostMatrix(
                float(matrix["tpWeight"]), float(matrix["fpWeight"]), float(matrix["fnWeight"])
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"{path}: profile {name!r}: bad or missing weight {exc}") from exc
    return profiles


def probation_length(rows: int) -> int:
    """Rows at the start of a file that NAB does not score."""
    return int(min(math.floor(PROBATION_FRACTION * rows), PROBATION_FRACTION * 5000))


def scaled_sigmoid(y: FloatArray) -> FloatArray:
    """NAB's reward curve: +0.987 at y=-1 (window start), 0 at y=0, -1 from y=3 on."""
    with np.errstate(over="ignore"):
        value = 2.0 / (1.0 + np.exp(5.0 * y)) - 1.0
    return np.where(y >= 3.0, -1.0, value)


def window_rows(
    timestamps: NDArray[np.datetime64], limits: list[list[str]], name: str
) -> tuple[tuple[int, int], ...]:
    """Map window limits (timestamps) to row indices: the first row with that exact timestamp."""
    rows: list[tuple[int, int]] = []
    for start, end in limits:
        found = []
        for limit in (start, end):
            hits = np.flatnonzero(timestamps == np.datetime64(limit.replace(" ", "T")))
            if hits.size == 0:
                raise ConfigError(f"{name}: window limit {limit!r} is not a timestamp of the file")
            found.append(int(hits[0]))
        if found[1] < found[0] or (rows and found[0] <= rows[-1][1]):
            raise ConfigError(f"{name}: window {start!r}..{end!r} is reversed or overlaps")
        rows.append((found[0], found[1]))
    return tuple(rows)


def sweep_scores(
    rows: int, windows: tuple[tuple[int, int], ...], cost: CostMatrix
) -> tuple[FloatArray, IntArray]:
    """Per row: the value it adds as a detection, and its window id (OUTSIDE, PROBATION, or k).

    Window ids are local to the file (0..len(windows)-1), in file order.
    """
    index = np.arange(rows, dtype=np.float64)
    value = np.full(rows, -cost.fp)  # before any window: full FP cost
    window_id = np.full(rows, OUTSIDE, dtype=np.int64)
    max_tp = float(scaled_sigmoid(np.array([-1.0]))[0])
    for k, (start, end) in enumerate(windows):
        width = end - start + 1
        inside = slice(start, end + 1)
        value[inside] = cost.tp * scaled_sigmoid(-(end - index[inside] + 1.0) / width) / max_tp
        window_id[inside] = k
        after_end = end + 1
        next_start = windows[k + 1][0] if k + 1 < len(windows) else rows
        after = slice(after_end, next_start)
        with np.errstate(divide="ignore"):
            position = (index[after] - end) / float(width - 1) if width > 1 else np.inf
        value[after] = cost.fp * scaled_sigmoid(np.broadcast_to(position, index[after].shape))
    window_id[: probation_length(rows)] = PROBATION
    return value, window_id


@dataclass(frozen=True, slots=True)
class _Corpus:
    anomaly: FloatArray  # scored rows of every file, sorted by anomaly score descending
    value: FloatArray
    window: IntArray  # global window id, OUTSIDE for rows outside windows
    windows_scored: int
    windows_total: int


def _prepare(files: list[FileRows], cost: CostMatrix) -> _Corpus:
    anomalies: list[FloatArray] = []
    values: list[FloatArray] = []
    ids: list[IntArray] = []
    offset = 0
    scored: set[int] = set()
    total = 0
    for f in files:
        value, wid = sweep_scores(f.scores.shape[0], f.windows, cost)
        keep = wid != PROBATION
        global_id = np.where(wid[keep] >= 0, wid[keep] + offset, OUTSIDE)
        scored.update(int(w) for w in np.unique(global_id[global_id >= 0]))
        anomalies.append(np.asarray(f.scores, dtype=np.float64)[keep])
        values.append(value[keep])
        ids.append(global_id)
        offset += len(f.windows)
        total += len(f.windows)
    anomaly = np.concatenate(anomalies) if anomalies else np.zeros(0)
    order = np.argsort(-anomaly, kind="stable")
    return _Corpus(
        anomaly=anomaly[order],
        value=np.concatenate(values)[order] if values else np.zeros(0),
        window=np.concatenate(ids)[order] if ids else np.zeros(0, dtype=np.int64),
        windows_scored=len(scored),
        windows_total=total,
    )


def _cumulative(corpus: _Corpus, cost: CostMatrix) -> tuple[FloatArray, IntArray, IntArray]:
    """Corpus total, windows detected and FP rows after admitting rows[0..k] as detections."""
    delta = np.where(corpus.window == OUTSIDE, corpus.value, 0.0)
    first_hit = np.zeros(corpus.window.shape[0], dtype=np.int64)
    inside = np.flatnonzero(corpus.window >= 0)
    # A window's worth is its best detection so far; walk each window's rows in admission order.
    by_window = inside[np.argsort(corpus.window[inside], kind="stable")]
    bounds = np.flatnonzero(np.diff(corpus.window[by_window])) + 1
    for rows in np.split(by_window, bounds):
        if rows.size == 0:
            continue
        best = np.maximum.accumulate(corpus.value[rows])
        previous = np.concatenate(([-cost.fn], best[:-1]))
        delta[rows] = best - previous
        first_hit[rows[0]] = 1
    total = -cost.fn * corpus.windows_scored + np.cumsum(delta)
    fp_rows = np.cumsum(corpus.window == OUTSIDE).astype(np.int64)
    return total, np.cumsum(first_hit), fp_rows


def _normalize(raw: float, corpus: _Corpus, cost: CostMatrix) -> float:
    null = -cost.fn * corpus.windows_scored
    perfect = cost.tp * corpus.windows_total
    if perfect == null:  # no windows at all: nothing to normalize against
        return math.nan
    return 100.0 * (raw - null) / (perfect - null)


def best_threshold(files: list[FileRows], cost: CostMatrix) -> CorpusResult:
    """The corpus score at the one threshold that maximizes it (ties: the highest threshold)."""
    corpus = _prepare(files, cost)
    null = -cost.fn * corpus.windows_scored
    best = CorpusResult(math.inf, null, _normalize(null, corpus, cost), corpus.windows_total, 0, 0)
    if corpus.anomaly.size == 0:
        return best
    total, detected, fp_rows = _cumulative(corpus, cost)
    # Only the last row of a run of equal anomaly scores is a reachable threshold.
    ends = np.flatnonzero(np.append(corpus.anomaly[1:] != corpus.anomaly[:-1], True))
    k = int(ends[np.argmax(total[ends])])
    if total[k] > best.raw:
        raw = float(total[k])
        best = CorpusResult(
            float(corpus.anomaly[k]),
            raw,
            _normalize(raw, corpus, cost),
            corpus.windows_total,
            int(detected[k]),
            int(fp_rows[k]),
        )
    return best


def score_at(files: list[FileRows], cost: CostMatrix, threshold: float) -> CorpusResult:
    """The corpus score when every row with anomaly score >= threshold is a detection."""
    corpus = _prepare(files, cost)
    raw = -cost.fn * corpus.windows_scored
    detected = fp_rows = 0
    admitted = int(np.count_nonzero(corpus.anomaly >= threshold))
    if admitted:
        total, hits, fps = _cumulative(corpus, cost)
        raw, detected, fp_rows = (
            float(total[admitted - 1]),
            int(hits[admitted - 1]),
            int(fps[admitted - 1]),
        )
    return CorpusResult(
        threshold, raw, _normalize(raw, corpus, cost), corpus.windows_total, detected, fp_rows
    )
