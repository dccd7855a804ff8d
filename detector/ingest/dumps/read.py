"""Recorded Prometheus data for ``detector replay``: format detection, reading, caching.

Formats (ARCHITECTURE.md "Dump formats"), detected per file by content, gzip undone whatever
the file is called:

- ``openmetrics``: OpenMetrics/Prometheus text with a timestamp on every sample, in seconds
  (the ``promtool tsdb create-blocks-from openmetrics`` input), or several scrape pages one
  after another with or without ``# EOF``. Integer timestamps above 1e11 are milliseconds
  (Prometheus text), so concatenated 0.0.4 scrapes with timestamps read right too.
- ``prometheus-json``: HTTP API responses, ``resultType`` matrix (query_range, or an instant
  query with a range selector) or vector; one or several documents per file.
- ``tsdb-dump``: ``promtool tsdb dump`` lines ``{__name__="x", a="b"} value ts_ms``.

:func:`read_dump` merges all files and yields :class:`SampleBatch` es in non-decreasing time
order (equal times keep file order), columns from the caller's SeriesIndex. Every format is
sorted (series-ordered formats need it; others are cheap to sort). Big dumps go through an
on-disk cache (``dumps_store``: external merge sort into memory-mapped arrays beside the dump,
reused while the sources keep their size and mtime), so a dump larger than memory replays and
a second replay skips parsing.

Text dumps are read a block (8 MB of whole lines) at a time; a block of plain sample lines,
the bulk of a promtool-layout dump, by ``dumps_fast`` (the parser's result, faster), any other
by the exposition parser.

Bad input policy: a bad line is skipped and counted; a file is rejected with a DumpError
naming the first bad line (``file:line: reason: content``) when it has more than
``10 + 1%`` bad lines, or no good sample at all, or any bad line with ``strict=True``. Skipped
lines are logged once per file and reported in :class:`DumpStats`. A file in no known format
raises DumpError naming the file.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import re
import shutil
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Literal, cast

import numpy as np

from ...errors import DumpError
from ...logs import get_logger
from ...model import Labels, SampleBatch
from ...series import SeriesIndex, host_names, normalize, pod_named_nodes, raw_grouping
from .formats import FileReport, RawChunk, SeriesTable, read_openmetrics, read_tsdb_dump
from .promjson import read_prometheus_json
from .store import (
    Cache,
    RunBuilder,
    install_cache,
    merge_runs,
    open_cache,
    source_signature,
    write_cache,
)
from .writer import OpenMetricsWriter, write_openmetrics

__all__ = [
    "DumpFormat",
    "DumpStats",
    "OpenMetricsWriter",
    "default_cache_dir",
    "detect_format",
    "dump_files",
    "read_dump",
    "write_openmetrics",
]

DumpFormat = Literal["openmetrics", "prometheus-json", "tsdb-dump"]
_SNIFF_BYTES = 64 << 10
_TSDB_START = re.compile(rb'\{[ \t]*(?:[a-zA-Z_][a-zA-Z0-9_]*|"(?:[^"\\]|\\.)*")="')
_TEXT_START = re.compile(rb"#|[a-zA-Z_:][a-zA-Z0-9_:]*[{ \t]")
_READERS: dict[str, Callable[[IO[bytes], FileReport, SeriesTable], Iterator[RawChunk]]] = {
    "openmetrics": read_openmetrics,
    "prometheus-json": read_prometheus_json,
    "tsdb-dump": read_tsdb_dump,
}
_log = get_logger(component="dumps")


@dataclass
class DumpStats:
    """What one :func:`read_dump` did; pass one in to have it filled."""

    files: dict[str, str] = field(default_factory=dict)  # file -> detected format
    samples: int = 0
    series: int = 0  # raw series in the dump (before label normalization)
    bad_lines: int = 0
    errors: list[str] = field(default_factory=list)  # the first few bad lines, file:line
    parsed_files: int = 0  # 0 when the cache served the dump
    cache_hit: bool = False
    cache_dir: Path | None = None  # where the cache is (None: read in memory)


def open_dump(path: Path) -> IO[bytes]:
    """The file's bytes, gunzipped when it starts with the gzip magic."""
    try:
        with path.open("rb") as probe:
            gzipped = probe.read(2) == b"\x1f\x8b"
        return cast(IO[bytes], gzip.open(path, "rb")) if gzipped else path.open("rb")
    except OSError as exc:
        raise DumpError(f"{path}: cannot read: {exc.strerror or exc}") from exc


def detect_format(path: Path) -> DumpFormat:
    """Sniff the first bytes of ``path``; DumpError when no known format fits."""
    try:
        with open_dump(path) as fh:
            head = fh.read(_SNIFF_BYTES)
    except (OSError, EOFError, zlib.error) as exc:
        raise DumpError(f"{path}: unreadable (corrupt or truncated gzip?): {exc}") from exc
    if not head:
        raise DumpError(f"{path}: the file is empty (no samples)")
    text = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    if _TSDB_START.match(text):
        return "tsdb-dump"
    if text[:1] in (b"{", b"[") and text[1:].lstrip()[:1] in (b'"', b"}", b"]", b"{"):
        return "prometheus-json"
    if _TEXT_START.match(text) or (head and not text):
        return "openmetrics"
    shown = text[:60].decode("utf-8", errors="replace")
    raise DumpError(
        f"{path}: not a known dump format (OpenMetrics text with timestamps, Prometheus API "
        f"JSON, or promtool tsdb dump lines); it starts with {shown!r}"
    )


def dump_files(paths: Path | Sequence[Path]) -> list[Path]:
    """The files of a dump: each path as given, a directory as its visible regular files
    (sorted by name, not recursive)."""
    out: list[Path] = []
    for path in [paths] if isinstance(paths, Path) else paths:
        path = Path(path)
        if path.is_dir():
            out.extend(sorted(p for p in path.iterdir() if p.is_file() and p.name[0] != "."))
        elif path.is_file():
            out.append(path)
        elif path.exists():  # a pipe (<(zcat ...)) or a device: read more than once, so no
            raise DumpError(f"{path}: not a regular file; save the dump to a file first")
        else:
            raise DumpError(f"{path}: no such dump file or directory")
    if not out:
        raise DumpError(
            f"{', '.join(map(str, paths)) if not isinstance(paths, Path) else paths}: no dump files"
        )
    return out


def default_cache_dir(paths: Path | Sequence[Path]) -> Path:
    """``<dump>.npcache`` beside a single dump file or directory; for several paths, beside
    the first one with a hash of all of them in the name."""
    given = [paths] if isinstance(paths, Path) else [Path(p) for p in paths]
    first = given[0]
    if len(given) == 1:
        return first.with_name(first.name + ".npcache")
    digest = hashlib.sha1("\n".join(str(p.resolve()) for p in given).encode()).hexdigest()
    return first.with_name(f"{first.name}.{digest[:10]}.npcache")


def read_dump(
    paths: Path | Sequence[Path],
    index: SeriesIndex,
    *,
    chunk_samples: int = 2_000_000,
    cache: bool = True,
    cache_dir: Path | None = None,
    strict: bool = False,
    stats: DumpStats | None = None,
) -> Iterator[SampleBatch]:
    """Batches of at most about ``chunk_samples`` samples in time order over the whole dump.

    Columns come from ``index`` (new series are added; existing columns are reused). With
    ``cache`` the sorted dump is kept in ``cache_dir`` (default :func:`default_cache_dir`); an
    unwritable cache location falls back to reading in memory, with a warning. Raises
    DumpError (file and line) on unreadable input; see the module docstring for bad lines.
    """
    stats = DumpStats() if stats is None else stats
    files = dump_files(paths)
    if cache:
        directory = default_cache_dir(paths) if cache_dir is None else cache_dir
        served = _from_cache(files, directory, index, chunk_samples, strict, stats)
        if served is not None:
            yield from served
            return
    runs, table = _parse(files, RunBuilder(chunk_samples), strict, stats)
    mapping = _columns(table.series, index)
    changes = WorkloadChanges(table.series, mapping, index)
    for run in merge_runs(runs, chunk_samples):
        changes.schedule(run.times, run.ids)
        yield _batch(run.times, mapping[run.ids], run.values)


def _from_cache(
    files: list[Path],
    directory: Path,
    index: SeriesIndex,
    chunk_samples: int,
    strict: bool,
    stats: DumpStats,
) -> Iterator[SampleBatch] | None:
    """Batches from a valid cache (built first if needed), or None if it cannot be written."""
    signature = source_signature(files)
    opened = open_cache(directory, signature)
    if opened is not None:
        stats.cache_hit = True
    else:
        opened = _build_cache(files, directory, signature, chunk_samples, strict, stats)
        if opened is None:
            return None
    stats.cache_dir = directory
    stats.files = dict(opened.manifest.get("files", {}))
    stats.samples = int(opened.manifest["samples"])
    stats.series = len(opened.series)
    stats.bad_lines = int(opened.manifest.get("bad_lines", 0))
    stats.errors = list(opened.manifest.get("errors", []))
    if strict and stats.bad_lines:  # the cache was built tolerantly: strict still refuses
        raise DumpError(f"{stats.errors[0]} ({stats.bad_lines} bad lines in the dump)")
    return _stream_cache(opened, index, chunk_samples)


def _build_cache(
    files: list[Path],
    directory: Path,
    signature: list[list[Any]],
    chunk_samples: int,
    strict: bool,
    stats: DumpStats,
) -> Cache | None:
    tmp = directory.with_name(f"{directory.name}.tmp-{os.getpid()}")
    try:
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir(parents=True)
    except OSError as exc:
        _log.warning(
            "dump cache not writable, reading in memory", cache=str(directory), error=str(exc)
        )
        return None
    try:
        runs, table = _parse(files, RunBuilder(chunk_samples, tmp / "runs"), strict, stats)
        manifest = {
            "sources": signature,
            "files": stats.files,
            "bad_lines": stats.bad_lines,
            "errors": stats.errors,
        }
        write_cache(tmp, runs, table.series, manifest, chunk_samples)
        del runs
        shutil.rmtree(tmp / "runs", ignore_errors=True)
        install_cache(tmp, directory)
    except OSError as exc:  # disk full, permissions...: the replay still runs, in memory
        _log.warning(
            "dump cache could not be written, reading in memory",
            cache=str(directory),
            error=str(exc),
        )
        return None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return open_cache(directory, signature)


def _stream_cache(opened: Cache, index: SeriesIndex, chunk_samples: int) -> Iterator[SampleBatch]:
    mapping = _columns(opened.series, index)
    changes = WorkloadChanges(opened.series, mapping, index)
    total = int(opened.times.shape[0])
    step = max(1, chunk_samples)
    for start in range(0, total, step):
        end = min(total, start + step)
        times, ids = np.array(opened.times[start:end]), np.array(opened.columns[start:end])
        changes.schedule(times, ids)
        yield _batch(times, mapping[ids], np.array(opened.values[start:end]))


def _batch(times: np.ndarray, columns: np.ndarray, values: np.ndarray) -> SampleBatch:
    """The samples of a batch but those of series the index keeps out (column -1:
    ``labels.drop``)."""
    keep = columns >= 0
    if keep.all():
        return SampleBatch(times, columns, values)
    return SampleBatch(times[keep], columns[keep], values[keep])


class WorkloadChanges:
    """A dump's changes of GPU workload (or cohort label), scheduled on the index as its
    samples are read.

    A dump holds every spelling of a series from the start: a GPU's series under its first
    job's pod, then under the next job's, then with no pod while idle. All spellings map to one
    column (the workload is a context label), and the one that sent the column's latest sample
    says the GPU's workload then. For the columns with spellings of more than one
    ``series.grouping``, each sample whose grouping differs from the column's previous sample's
    schedules that spelling's context at the sample's time (``SeriesIndex.schedule_context``);
    the pipeline applies them tick by tick. Batches must come in time order, as ``read_dump``
    yields them."""

    def __init__(
        self, series: Sequence[tuple[str, Labels]], mapping: Any, index: SeriesIndex
    ) -> None:
        self.index = index
        self.mapping = mapping
        rules = index.rules
        self.code = np.full(len(series), -1, dtype=np.int64)  # raw id -> its context's number
        self.work = np.full(len(series), -1, dtype=np.int64)  # raw id -> its grouping's number
        self.contexts: list[Labels] = []
        self.last = np.full(len(index), -1, dtype=np.int64)  # column -> last grouping number
        if not rules.workload_labels and not rules.relabel:
            return
        spelled: dict[int, dict[int, tuple[str, ...]]] = {}  # GPU column -> raw id -> grouping
        for raw, (_, labels) in enumerate(series):
            column = int(mapping[raw])
            if column >= 0 and index.infos[column].gpu:
                spelled.setdefault(column, {})[raw] = raw_grouping(labels, rules)
        numbers: dict[tuple[str, ...], int] = {}
        for spellings in spelled.values():
            if len(set(spellings.values())) < 2:
                continue  # one grouping all along: its column's context says it
            for raw, name in spellings.items():
                self.work[raw] = numbers.setdefault(name, len(numbers))
                self.code[raw] = len(self.contexts)
                metric, labels = series[raw]
                self.contexts.append(normalize(metric, labels, rules, index.hosts)[4])

    def schedule(self, times: np.ndarray, raw_ids: np.ndarray) -> None:
        """Schedule the workload changes among these samples (a batch, in time order)."""
        if not self.contexts:
            return
        picked = np.flatnonzero(self.code[raw_ids] >= 0)
        if not picked.size:
            return
        raw = raw_ids[picked]
        columns, work = self.mapping[raw], self.work[raw]
        order = np.lexsort((picked, columns))  # per column, in time order
        columns, work, picked, raw = columns[order], work[order], picked[order], raw[order]
        before = np.empty_like(work)
        before[1:] = work[:-1]
        first = np.ones(work.shape[0], dtype=bool)
        first[1:] = columns[1:] != columns[:-1]
        before[first] = self.last[columns[first]]
        last = np.ones(work.shape[0], dtype=bool)
        last[:-1] = first[1:]
        self.last[columns[last]] = work[last]
        changed = np.flatnonzero(work != before)
        for k in changed[np.argsort(picked[changed], kind="stable")].tolist():
            context = self.contexts[int(self.code[raw[k]])]
            self.index.schedule_context(float(times[picked[k]]), int(columns[k]), context)


def _columns(series: Sequence[tuple[str, Labels]], index: SeriesIndex) -> Any:
    """Index column of each raw series (several raw spellings may share a column). Into an
    empty index, nodes named by a scrape address go in under their host name (host_names)."""
    if not len(index):
        index.hosts = host_names(series, index.rules)
        index.pod_named = pod_named_nodes(series, index.rules, index.hosts)
    return np.array([index.add(name, labels) for name, labels in series], dtype=np.int64)


def _parse(
    files: list[Path], builder: RunBuilder, strict: bool, stats: DumpStats
) -> tuple[list[Any], SeriesTable]:
    """Read every file into sorted runs; apply the bad-line policy per file."""
    table = SeriesTable()
    stats.files, stats.samples, stats.bad_lines, stats.errors = {}, 0, 0, []
    stats.parsed_files = 0
    for path in files:
        fmt = detect_format(path)
        report = FileReport(path, fmt)
        with open_dump(path) as fh:
            chunks = _READERS[fmt](fh, report, table)
            while True:
                try:
                    chunk = next(chunks)
                except StopIteration:
                    break
                except (OSError, EOFError, zlib.error) as exc:
                    raise DumpError(
                        f"{path}: unreadable (corrupt or truncated gzip?): {exc}"
                    ) from exc
                builder.add(chunk)
        _judge(report, strict)
        stats.files[str(path)] = fmt
        stats.parsed_files += 1
        stats.samples += report.samples
        stats.bad_lines += report.bad
        stats.errors.extend(report.errors[: max(0, 10 - len(stats.errors))])
    stats.series = len(table)
    return builder.finish(), table


def _judge(report: FileReport, strict: bool) -> None:
    """Raise if the file has too many bad lines (module docstring); else log what was skipped."""
    if not report.bad:
        return
    budget = 0 if strict else 10 + (report.samples + report.bad) // 100
    if report.bad > budget or report.samples == 0:
        more = f" ({report.bad} bad lines in total)" if report.bad > 1 else ""
        raise DumpError(report.errors[0] + more)
    _log.warning(
        "skipped bad lines in dump",
        file=str(report.path),
        bad_lines=report.bad,
        samples=report.samples,
        first=report.errors[0],
    )
