"""Writing dumps: OpenMetrics text that ``promtool tsdb create-blocks-from openmetrics`` and
``detector replay`` both read.

Output contract (what promtool needs, checked against the real binary in the tests):

- every sample has a timestamp, in seconds; every series is one block of lines in increasing
  time (promtool drops out-of-order samples), one sample per (series, time): the last added
  wins;
- every family is one contiguous block introduced by its ``# TYPE`` line, family names are
  unique, the file ends with ``# EOF``;
- types are only claimed when OpenMetrics allows them for the sample names at hand: ``gauge``
  as declared; ``counter`` only for ``<family>_total`` samples (family = name without
  ``_total``); everything else (histogram and summary parts, counters without ``_total``,
  untyped) is ``unknown`` under its own sample name, which loses no data. With
  ``total_suffix`` a counter declared without ``_total`` (dcgm-exporter's names) is written as
  strict OpenMetrics names it: ``# TYPE X counter`` and ``X_total`` samples.

Samples may arrive in any order. Memory stays bounded: samples are buffered and, past
``spill_samples``, appended to one binary spill file per metric name in a temporary directory;
closing sorts one metric name at a time (so peak memory is the largest metric's samples).
A ``.gz`` path is written gzip-compressed. The file appears atomically at close.
"""

from __future__ import annotations

import gzip
import os
import shutil
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import TracebackType
from typing import IO, Any

import numpy as np

from ...errors import DumpError
from ...model import Exposition, Labels, Sample, SampleBatch
from ...series import SeriesIndex
from ..parse import split_series

_RECORD = np.dtype([("sid", np.int64), ("t", np.float64), ("v", np.float64)])
_WRITE_BLOCK = 100_000
_ESCAPES = str.maketrans({"\\": "\\\\", '"': '\\"', "\n": "\\n"})


def series_text(name: str, labels: Labels) -> str:
    """``name{a="b",...}`` with OpenMetrics escapes (labels in the given order)."""
    if not labels:
        return name
    body = ",".join(f'{k}="{v.translate(_ESCAPES)}"' for k, v in labels)
    return f"{name}{{{body}}}"


def _format_numbers(values: np.ndarray[Any, Any], trim: bool) -> list[str]:
    texts = list(map(repr, values.tolist()))
    if trim:
        texts = [t[:-2] if t.endswith(".0") else t for t in texts]
    if not np.isfinite(values).all():
        for i in np.flatnonzero(~np.isfinite(values)).tolist():
            v = values[i]
            texts[i] = "NaN" if v != v else ("+Inf" if v > 0 else "-Inf")
    return texts


class OpenMetricsWriter:
    """Streaming writer of one dump file; use as a context manager (see module docstring).

    ``types`` maps metric family (or sample) names to their Prometheus type, as in
    ``Exposition.types``. ``total_suffix``: samples of a counter named without ``_total`` are
    renamed ``<name>_total`` (strict OpenMetrics; see the module docstring). On an exception
    inside the ``with`` block nothing is written.
    """

    def __init__(
        self,
        path: Path,
        types: Mapping[str, str] | None = None,
        *,
        spill_samples: int = 1_000_000,
        spill_dir: Path | None = None,
        total_suffix: bool = False,
    ) -> None:
        self.path = Path(path)
        self.types: dict[str, str] = dict(types or {})
        self.total_suffix = total_suffix
        self.spill_samples = max(1, spill_samples)
        self._spill_parent = spill_dir
        self._spill: Path | None = None
        self._sid: dict[tuple[str, Labels], int] = {}
        self._sid_name: list[int] = []  # series -> metric name id
        self._sid_text: list[str] = []
        self._names: dict[str, int] = {}
        self._raw: dict[str, int] = {}  # raw exposition key -> series
        self._by_column: dict[int, int] = {}  # SeriesIndex column -> series
        self._buf_sid: list[int] = []
        self._buf_t: list[float] = []
        self._buf_v: list[float] = []
        self.samples = 0

    def __enter__(self) -> OpenMetricsWriter:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        if kind is None:
            self.close()
        else:
            self._cleanup()

    def _series(self, name: str, labels: Labels) -> int:
        sid = self._sid.get((name, labels))
        if sid is None:
            sid = self._sid[(name, labels)] = len(self._sid_text)
            written = name + "_total" if self.total_suffix and self._bare_counter(name) else name
            self._sid_name.append(self._names.setdefault(written, len(self._names)))
            self._sid_text.append(series_text(written, labels))
        return sid

    def _bare_counter(self, name: str) -> bool:
        """A counter's sample named without ``_total`` (its family is the name itself)."""
        return not name.endswith("_total") and self.types.get(name) == "counter"

    def _append(self, sid: int, time: float | None, value: float) -> None:
        if time is None or time != time:
            raise DumpError(f"{self.path}: sample {self._sid_text[sid]} has no timestamp")
        self._buf_sid.append(sid)
        self._buf_t.append(time)
        self._buf_v.append(value)
        if len(self._buf_sid) >= self.spill_samples:
            self._spill_buffer()

    def add(self, sample: Sample) -> None:
        """Add one sample (its timestamp is required)."""
        self._append(self._series(sample.name, sample.labels), sample.timestamp, sample.value)

    def add_many(self, samples: Iterable[Sample]) -> None:
        for sample in samples:
            self.add(sample)

    def add_exposition(self, exp: Exposition, default_time: float | None = None) -> None:
        """Add a parsed scrape; samples without a timestamp get ``default_time`` (the scrape
        time). Its declared types are used for families not typed yet."""
        for family, kind in exp.types.items():
            self.types.setdefault(family, kind)
        raw = self._raw
        for key, value, time in zip(exp.keys, exp.values, exp.timestamps, strict=True):
            sid = raw.get(key)
            if sid is None:
                sid = raw[key] = self._series(*split_series(key))
            self._append(sid, default_time if time is None else time, value)

    def add_batch(self, batch: SampleBatch, index: SeriesIndex) -> None:
        """Add a batch of indexed samples, written with the series' identity and context
        labels (e.g. a simulated cluster written as a dump)."""
        columns = np.unique(batch.columns).tolist()
        for column in columns:
            if column not in self._by_column:
                info = index.infos[column]
                labels = tuple(sorted(info.labels + info.context))
                self._by_column[column] = self._series(info.metric, labels)
        sids = [self._by_column[c] for c in batch.columns.tolist()]
        for sid, time, value in zip(sids, batch.times.tolist(), batch.values.tolist(), strict=True):
            self._append(sid, time, value)

    def _buffer_records(self) -> np.ndarray[Any, Any]:
        records = np.empty(len(self._buf_sid), dtype=_RECORD)
        records["sid"], records["t"], records["v"] = self._buf_sid, self._buf_t, self._buf_v
        self.samples += len(records)
        self._buf_sid, self._buf_t, self._buf_v = [], [], []
        return records

    def _split_by_name(self, records: np.ndarray[Any, Any]) -> dict[int, np.ndarray[Any, Any]]:
        names = np.array(self._sid_name, dtype=np.int64)[records["sid"]]
        order = np.argsort(names, kind="stable")
        records, names = records[order], names[order]
        cuts = np.flatnonzero(np.diff(names)) + 1
        return {
            int(part_names[0]): part
            for part, part_names in zip(np.split(records, cuts), np.split(names, cuts), strict=True)
            if len(part)
        }

    def _spill_buffer(self) -> None:
        if self._spill is None:
            parent = self._spill_parent or self.path.parent
            self._spill = Path(tempfile.mkdtemp(prefix=".om-spill-", dir=parent))
        for name_id, part in self._split_by_name(self._buffer_records()).items():
            with (self._spill / f"{name_id}.bin").open("ab") as fh:
                part.tofile(fh)

    def _families(self) -> list[tuple[str, str, int]]:
        """(family, type, metric name id) per metric name, in output order (see docstring)."""
        chosen: dict[int, tuple[str, str]] = {}
        for name, name_id in self._names.items():
            kind = self.types.get(name)
            if kind == "gauge":
                chosen[name_id] = (name, "gauge")
            elif name.endswith("_total") and "counter" in (kind, self.types.get(name[:-6])):
                chosen[name_id] = (name[:-6], "counter")
            else:
                chosen[name_id] = (name, "unknown")
        taken = set(self._names)
        for name, name_id in self._names.items():
            family, kind = chosen[name_id]
            if kind == "counter" and family in taken:  # 'foo' exists as a metric itself
                chosen[name_id] = (name, "unknown")
        return sorted((family, kind, nid) for nid, (family, kind) in chosen.items())

    def close(self) -> None:
        """Sort and write the file (atomically), then drop the spill files."""
        try:
            tail = self._split_by_name(self._buffer_records()) if self._buf_sid else {}
            texts = np.array(self._sid_text, dtype=object)
            rank = np.empty(len(texts), dtype=np.int64)
            rank[np.argsort(texts, kind="stable")] = np.arange(len(texts))
            tmp = self.path.with_name(f".{self.path.name}.tmp-{os.getpid()}")
            try:
                with _open_text(tmp, gz=self.path.name.endswith(".gz")) as out:
                    for family, kind, name_id in self._families():
                        records = self._records_of(name_id, tail.get(name_id))
                        if not len(records):
                            continue
                        out.write(f"# TYPE {family} {kind}\n")
                        self._write_records(out, records, rank)
                    out.write("# EOF\n")
                os.replace(tmp, self.path)
            except OSError as exc:  # the user named the dump, not the temp file beside it
                reason = exc.strerror or str(exc)
                raise DumpError(f"{self.path}: cannot write the dump: {reason}") from None
        finally:
            self._cleanup()

    def _records_of(self, name_id: int, tail: np.ndarray[Any, Any] | None) -> Any:
        parts = [np.empty(0, dtype=_RECORD)]
        if self._spill is not None and (self._spill / f"{name_id}.bin").exists():
            parts.append(np.fromfile(self._spill / f"{name_id}.bin", dtype=_RECORD))
        if tail is not None:
            parts.append(tail)
        return np.concatenate(parts)

    def _write_records(self, out: IO[str], records: Any, rank: Any) -> None:
        sids, times = records["sid"], records["t"]
        order = np.lexsort((times, rank[sids]))  # stable: on equal (series, time) last added wins
        records = records[order]
        sids, times = records["sid"], records["t"]
        keep = np.ones(len(records), dtype=bool)
        keep[:-1] = (sids[1:] != sids[:-1]) | (times[1:] != times[:-1])
        records = records[keep]
        keys = self._sid_text
        for start in range(0, len(records), _WRITE_BLOCK):  # bounded text per write
            part = records[start : start + _WRITE_BLOCK]
            values = _format_numbers(part["v"], trim=False)
            stamps = _format_numbers(part["t"], trim=True)
            lines = zip(part["sid"].tolist(), values, stamps, strict=True)
            out.write("".join([f"{keys[s]} {v} {t}\n" for s, v, t in lines]))

    def _cleanup(self) -> None:
        if self._spill is not None:
            shutil.rmtree(self._spill, ignore_errors=True)
            self._spill = None
        for stale in self.path.parent.glob(f".{self.path.name}.tmp-{os.getpid()}"):
            stale.unlink(missing_ok=True)


def _open_text(path: Path, gz: bool) -> IO[str]:
    if gz:
        return gzip.open(path, "wt", encoding="utf-8", compresslevel=6)
    return path.open("w", encoding="utf-8")


def write_openmetrics(
    path: Path, samples: Iterable[Sample], types: Mapping[str, str] | None = None
) -> None:
    """Write ``samples`` (any order, timestamps required) as one promtool-ready dump file."""
    with OpenMetricsWriter(path, types) as writer:
        writer.add_many(samples)
