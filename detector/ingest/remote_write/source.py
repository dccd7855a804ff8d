"""Remote-written samples as a source of tick frames, beside the scrape round.

Contract
    ``RemoteWriteSource(index, ...)``: ``receive(body, headers)`` takes one remote-write 1.0
    request (decode.py) and admits its samples; ``frame(now)`` returns the tick's
    :class:`~detector.model.Frame`: per series, the newest sample admitted since the previous
    ``frame`` call (NaN where none), aligned to ``index`` like a scrape round's frame, and
    starts the next tick. Series go through the same :class:`~detector.series.SeriesIndex`
    (raw key -> column, label normalisation, ``labels.drop``, ``scrape.max_series_total``) as
    scraped ones; Prometheus has already added its target labels (``instance``, ``job`` and
    those of its relabelling, such as ``node``), so no ``extra`` labels are added here.

    Samples are admitted per series in order, as Prometheus' TSDB appends them: a sample
    whose timestamp is below the newest one admitted for its series is ``out_of_order``, one
    equal to it a ``duplicate``; one older than ``max_sample_age_s`` before the last tick's
    time is ``too_old`` (Prometheus' "out of bounds": a sender replaying a backlog after an
    outage would otherwise have its old state scored as the present); one whose series the
    index keeps out (``labels.drop``) or has no room for is ``dropped``; Prometheus'
    staleness marker (the NaN it writes when a series leaves its target's page) is ``stale``:
    a series with no sample in a tick is unobserved anyway, as a vanished scraped key is, and
    the marker must not take the place of a sample. When a GPU's workload label changes, the
    old series' marker and the new series' first sample have one timestamp and one column
    (the index follows the GPU's workload): admitted, the marker would make the new sample a
    ``duplicate`` and leave NaN in the tick, or the other way round. All of them are
    counted in ``stats`` and dropped; the request's other samples are kept (Prometheus'
    receiver refuses the whole request with 400 instead, which its sender then discards).
    The lateness allowance exists because a sender batches: Prometheus sends a sample up to
    ``batch_send_deadline`` (5 s by default) after its scrape, often after the tick its
    timestamp falls in was scored; it then counts in the next tick, as a slow scrape would.

    Requests are counted by ``stats.requests[result]``: ``ok`` or the RemoteWriteError reason.

    With ``keep_series`` (``record.dir`` set), ``written(frame)`` returns the samples a tick's
    frame holds (:class:`~detector.model.Sample`: name and labels of the newest admitted
    sample's series as remote-written) stamped with the tick's time: written to the recording
    beside the scrape round, they replay into the very tick that scored them (a late sample
    too, which counted in the tick after its timestamp).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from ...config import RemoteWriteConfig
from ...errors import RemoteWriteError
from ...jit import jit
from ...model import BoolArray, FloatArray, Frame, IntArray, Labels, Sample
from ...series import SeriesIndex
from .decode import check_headers, decode_write_request, split_key

__all__ = ["SAMPLE_RESULTS", "RemoteWriteSource", "RemoteWriteStats"]

# Index = the code ``_admit`` gives a sample.
SAMPLE_RESULTS = ("accepted", "dropped", "too_old", "out_of_order", "duplicate", "stale")
_NEVER = np.iinfo(np.int64).min
STALE_NAN_BITS = 0x7FF0000000000002  # Prometheus' staleness marker (value.StaleNaN)


@dataclass(slots=True)
class RemoteWriteStats:
    """Counts since the process started (the exporter reads them when scraped)."""

    requests: Counter[str] = field(default_factory=Counter)  # "ok" or a RemoteWriteError reason
    samples: Counter[str] = field(default_factory=Counter)  # by SAMPLE_RESULTS


@jit
def _admit(
    columns: IntArray,
    stamps: IntArray,
    values: FloatArray,
    oldest_ms: int,
    newest: IntArray,
    latest: FloatArray,
    seen: BoolArray,
) -> IntArray:
    """Each sample's SAMPLE_RESULTS code, in request order; admitted ones update ``newest``
    (per column, ms), ``latest`` (value) and ``seen``. A staleness marker is counted and
    otherwise ignored."""
    codes = np.empty(columns.shape[0], np.int64)
    bits = values.view(np.uint64)
    for i in range(columns.shape[0]):
        column = columns[i]
        stamp = stamps[i]
        if bits[i] == np.uint64(STALE_NAN_BITS):
            codes[i] = 5
        elif column < 0:
            codes[i] = 1
        elif stamp < oldest_ms:
            codes[i] = 2
        elif stamp < newest[column]:
            codes[i] = 3
        elif stamp == newest[column]:
            codes[i] = 4
        else:
            codes[i] = 0
            newest[column] = stamp
            latest[column] = values[i]
            seen[column] = True
    return codes


class RemoteWriteSource:
    """See the module docstring."""

    def __init__(
        self,
        index: SeriesIndex,
        *,
        max_body_bytes: int = 16 * 1024 * 1024,
        max_decoded_bytes: int = 64 * 1024 * 1024,
        max_sample_age_s: float = 60.0,
        keep_series: bool = False,
    ) -> None:
        self.index = index
        self.keep_series = keep_series
        # per column (keep_series): the raw key of its newest admitted sample, split
        self._series: list[tuple[str, str, Labels] | None] = []
        self.max_body_bytes = max_body_bytes
        self.max_decoded_bytes = max_decoded_bytes
        self.max_sample_age_s = max_sample_age_s
        self.stats = RemoteWriteStats()
        self._newest: IntArray = np.empty(0, np.int64)  # per column: newest admitted, ms
        self._latest: FloatArray = np.empty(0, np.float64)  # per column: its value
        self._seen: BoolArray = np.empty(0, np.bool_)  # per column: admitted since last frame
        self._last_tick = float("-inf")

    @classmethod
    def from_config(
        cls, config: RemoteWriteConfig, index: SeriesIndex, *, keep_series: bool = False
    ) -> RemoteWriteSource:
        return cls(
            index,
            max_body_bytes=config.max_body_bytes,
            max_decoded_bytes=config.max_decoded_bytes,
            max_sample_age_s=config.max_sample_age_s,
            keep_series=keep_series,
        )

    def refused(self, reason: str) -> None:
        """Count a request refused before it reached ``receive`` (e.g. its body too large)."""
        self.stats.requests[reason] += 1

    def receive(self, body: bytes, headers: Mapping[str, str]) -> Counter[str]:
        """Admit one request's samples; returns their results (also added to ``stats``).
        Raises RemoteWriteError (counted too) when the request cannot be read."""
        try:
            check_headers(headers)
            batch = decode_write_request(body, self.max_decoded_bytes)
            series_columns = self.index.columns(batch.keys, split_key)
        except RemoteWriteError as exc:
            self.stats.requests[exc.reason] += 1
            raise
        self._grow(len(self.index))
        oldest = self._last_tick - self.max_sample_age_s
        oldest_ms = int(oldest * 1000) if np.isfinite(oldest) else int(_NEVER)
        codes = _admit(
            series_columns[batch.sample_series],
            batch.timestamps_ms,
            batch.values,
            oldest_ms,
            self._newest,
            self._latest,
            self._seen,
        )
        if self.keep_series:
            self._keep(batch.keys, batch.sample_series[codes == 0], series_columns)
        counts = np.bincount(codes, minlength=len(SAMPLE_RESULTS))
        results = Counter(
            {name: int(n) for name, n in zip(SAMPLE_RESULTS, counts.tolist(), strict=True) if n}
        )
        self.stats.samples.update(results)
        self.stats.requests["ok"] += 1
        return results

    def frame(self, now: float) -> Frame:
        """This tick's frame (see the module docstring); the next tick starts empty."""
        width = len(self.index)
        self._grow(width)
        values = np.where(self._seen[:width], self._latest[:width], np.nan)
        self._seen[:width] = False
        self._last_tick = max(self._last_tick, now)
        return Frame(now, values)

    def written(self, frame: Frame) -> list[Sample]:
        """The samples ``frame`` (this source's) holds, as written, at the frame's time
        (``keep_series`` only; see the module docstring)."""
        out = []
        for column in np.flatnonzero(~np.isnan(frame.values)).tolist():
            kept = self._series[column] if column < len(self._series) else None
            if kept is not None:
                out.append(Sample(kept[1], kept[2], float(frame.values[column]), frame.time))
        return out

    def _keep(self, keys: list[str], admitted: IntArray, series_columns: IntArray) -> None:
        """Remember each admitted sample's series key by column (split once per new key)."""
        if len(self._series) < len(self.index):
            self._series.extend([None] * (len(self.index) - len(self._series)))
        for series, column in zip(
            admitted.tolist(), series_columns[admitted].tolist(), strict=True
        ):
            key, kept = keys[series], self._series[column]
            if kept is None or kept[0] != key:
                self._series[column] = (key, *split_key(key))

    def _grow(self, width: int) -> None:
        have = self._newest.shape[0]
        if width <= have:
            return
        more = max(width, 2 * have) - have  # amortised: a new series costs O(1)
        self._newest = np.concatenate((self._newest, np.full(more, _NEVER, np.int64)))
        self._latest = np.concatenate((self._latest, np.full(more, np.nan)))
        self._seen = np.concatenate((self._seen, np.zeros(more, np.bool_)))
