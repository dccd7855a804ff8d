"""Dump text formats -> raw chunks of (series id, time, value), in file order.

Used by :mod:`detector.ingest.dumps`; nothing here sorts or caches. A reader streams one file
(gzip already undone) and yields :class:`RawChunk` s whose series ids index a
:class:`SeriesTable` of raw ``(name, labels)`` pairs, shared by all files of one dump.
Times are unix seconds, values float64 (NaN kept; the dcgm-exporter blank sentinel becomes
NaN for ``DCGM_``/``dcgm_`` metrics, as the live parser does).

Bad input: a line (or JSON point) that cannot be read is skipped and recorded in the file's
:class:`FileReport` as ``"<file>:<line>: <reason>: <content>"``; whether the file as a whole
is acceptable is decided by the caller. Whatever makes the rest of a file unreadable
(invalid JSON, a JSON document that is not a query result, corrupt gzip) raises DumpError.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import numpy as np

from ...errors import ParseError
from ...model import DCGM_BLANK_THRESHOLD, FloatArray, Labels
from ..parse import parse_exposition, split_series
from .fast import sample_fields

BLOCK_BYTES = 8 << 20  # text read per parse call: whole lines, ~100k samples
# A timestamp above this cannot be seconds (year 5138) but is milliseconds after 1973: text
# dumps written with Prometheus-text ms timestamps are accepted that way.
MS_THRESHOLD = 1e11
_DCGM_PREFIXES = ("DCGM_", "dcgm_")
_EOF_LINES = re.compile(rb"^[ \t]*#[ \t]+EOF[ \t]*\r?$", re.MULTILINE)
_COMMENT_LINE = re.compile(rb"^[ \t]*#[^\n]*\n", re.MULTILINE)
_MAX_SHOWN = 200
IdArray = np.ndarray[Any, np.dtype[np.int32]]


@dataclass(slots=True)
class RawChunk:
    """Samples in file order; ``ids`` index the dump's SeriesTable."""

    ids: IdArray
    times: FloatArray
    values: FloatArray

    def __len__(self) -> int:
        return int(self.times.shape[0])


@dataclass
class FileReport:
    """What reading one file found: sample count, skipped lines and the first messages."""

    path: Path
    format: str
    samples: int = 0
    bad: int = 0
    errors: list[str] = field(default_factory=list)

    def bad_line(self, where: str, reason: str, content: str = "") -> None:
        self.bad += 1
        if len(self.errors) < 5:
            shown = content if len(content) <= _MAX_SHOWN else content[:_MAX_SHOWN] + "..."
            self.errors.append(f"{where}: {reason}" + (f": {shown!r}" if content else ""))


# A page saved from an exporter's /metrics has no timestamps: say what writes a replayable dump.
_NO_TIMESTAMP = (
    "sample without timestamp (a dump needs one on every sample; `detector record` or "
    "promtool/Prometheus API exports write them)"
)


class SeriesTable:
    """Raw series of one dump: ``(name, labels)`` -> dense id, plus raw-text lookups."""

    def __init__(self) -> None:
        self.series: list[tuple[str, Labels]] = []
        self._ids: dict[tuple[str, Labels], int] = {}
        self._text: dict[str, int] = {}
        self._dcgm: list[bool] = []

    def __len__(self) -> int:
        return len(self.series)

    def id_of(self, name: str, labels: Labels) -> int:
        sid = self._ids.get((name, labels))
        if sid is None:
            sid = len(self.series)
            self.series.append((name, labels))
            self._ids[(name, labels)] = sid
            self._dcgm.append(name.startswith(_DCGM_PREFIXES))
        return sid

    def id_of_text(self, text: str) -> int:
        """Id of a raw series text: OpenMetrics ``name{...}`` or tsdb-dump ``{__name__=...}``.
        Raises ParseError or ValueError when the text is not a series."""
        sid = self._text.get(text)
        if sid is None:
            name, labels = split_tsdb_series(text) if text[:1] == "{" else split_series(text)
            sid = self._text[text] = self.id_of(name, labels)
        return sid

    def ids_of_texts(self, texts: list[str]) -> IdArray:
        known = self._text
        ids = [known[t] if t in known else self.id_of_text(t) for t in texts]
        return np.array(ids, dtype=np.int32)

    def blank_dcgm(self, ids: IdArray, values: FloatArray) -> None:
        """dcgm-exporter's 'no data' sentinel -> NaN, in place (as parse.py does live)."""
        high = np.isfinite(values) & (values >= DCGM_BLANK_THRESHOLD)
        if high.any():
            high &= np.array(self._dcgm, dtype=bool)[ids]
            values[high] = np.nan


# --- promtool tsdb dump: {__name__="x", a="b"} 1.5 1700000000000 ---------------------------
_GO_QUOTED = r'"(?:[^"\\]|\\.)*"'
_GO_LABEL = re.compile(rf"[ \t]*([a-zA-Z_][a-zA-Z0-9_]*|{_GO_QUOTED})=({_GO_QUOTED})[ \t]*")
_GO_ESCAPE = re.compile(r"\\(x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8}|[abfnrtv\\\"'])")
_GO_SIMPLE = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v"}


def _go_unescape(match: re.Match[str]) -> str:
    code = match.group(1)
    if code[0] in "xuU" and len(code) > 1:
        return chr(int(code[1:], 16))
    return _GO_SIMPLE.get(code, code)


def _go_unquote(text: str) -> str:
    return _GO_ESCAPE.sub(_go_unescape, text) if "\\" in text else text


def split_tsdb_series(text: str) -> tuple[str, Labels]:
    """``{__name__="x", a="b"}`` (Go strconv.Quote escapes) -> ("x", (("a", "b"),))."""
    if not (text.startswith("{") and text.endswith("}")):
        raise ValueError('expected {label="value", ...}')
    body, pos, labels = text[1:-1], 0, {}
    while pos < len(body):
        match = _GO_LABEL.match(body, pos)
        if match is None:
            raise ValueError(f"invalid label at offset {pos + 1}")
        key = match.group(1)
        label = _go_unquote(key[1:-1]) if key[0] == '"' else key
        labels[label] = _go_unquote(match.group(2)[1:-1])
        pos = match.end()
        if pos < len(body):
            if body[pos] != ",":
                raise ValueError(f"expected ',' at offset {pos + 1}")
            pos += 1
    name = labels.pop("__name__", "")
    return name, tuple(sorted(labels.items()))


def text_blocks(fh: IO[bytes], size: int = BLOCK_BYTES) -> Iterator[tuple[bytes, int]]:
    """Blocks of whole lines and the 1-based line number each block starts at."""
    line, rest = 1, b""
    while data := fh.read(size):
        data = rest + data
        cut = data.rfind(b"\n") + 1
        if cut == 0:
            rest = data
            continue
        block, rest = data[:cut], data[cut:]
        yield block, line
        line += block.count(b"\n")
    if rest:
        yield rest + b"\n", line


def read_tsdb_dump(fh: IO[bytes], report: FileReport, table: SeriesTable) -> Iterator[RawChunk]:
    """Lines ``{labels} value ts_ms`` (series-ordered). Vectorized per block; a block with a
    bad line is re-read line by line to keep the good ones and name the bad ones."""
    for block, first in text_blocks(fh):
        fast = _plain_samples(block, table, tsdb=True)
        if fast is not None:
            report.samples += len(fast)
            yield fast
            continue
        lines = block.decode("utf-8", errors="replace").split("\n")
        try:
            chunk = _tsdb_fast(lines, table)
        except (ValueError, OverflowError, ParseError):  # Overflow: a ms count past int64
            chunk = _tsdb_slow(lines, first, report, table)
        if len(chunk):
            table.blank_dcgm(chunk.ids, chunk.values)
            report.samples += len(chunk)
            yield chunk


def _tsdb_fast(lines: list[str], table: SeriesTable) -> RawChunk:
    texts, values, stamps = [], [], []
    for line in lines:
        if line and not line.isspace():
            series, value, stamp = line.rstrip("\r").rsplit(" ", 2)  # ValueError if short
            texts.append(series)
            values.append(value)
            stamps.append(stamp)
    times = np.array(stamps, dtype=np.int64) / 1000.0
    return RawChunk(table.ids_of_texts(texts), times, np.array(values, dtype=np.float64))


def _tsdb_slow(lines: list[str], first: int, report: FileReport, table: SeriesTable) -> RawChunk:
    ids, times, values = [], [], []
    for offset, line in enumerate(lines):
        if not line or line.isspace():
            continue
        parts = line.rstrip("\r").rsplit(" ", 2)
        where = f"{report.path}:{first + offset}"
        try:
            if len(parts) != 3:
                raise ValueError("expected '{labels} value timestamp_ms'")
            value, stamp = float(parts[1]), int(parts[2]) / 1000.0
            sid = table.id_of_text(parts[0])
        except (ValueError, OverflowError, ParseError) as exc:
            reason = exc.reason if isinstance(exc, ParseError) else str(exc)
            report.bad_line(where, f"bad sample line ({reason})", line)
            continue
        ids.append(sid)
        times.append(stamp)
        values.append(value)
    return RawChunk(np.array(ids, dtype=np.int32), np.array(times), np.array(values))


# --- OpenMetrics / Prometheus text with per-sample timestamps -------------------------------
def read_openmetrics(fh: IO[bytes], report: FileReport, table: SeriesTable) -> Iterator[RawChunk]:
    """Text with timestamps (seconds; Prometheus-text ms recognised by magnitude). Several
    pages may follow one another, with or without ``# EOF``: each block is parsed as
    OpenMetrics with its EOF lines blanked (line numbers kept) and one EOF appended."""
    for whole, at in text_blocks(fh):
        for block, first in _segments(whole, at):
            yield from _openmetrics_block(block, first, report, table)


def _segments(block: bytes, first: int) -> Iterator[tuple[bytes, int]]:
    """``block`` (whole lines; the first is line ``first``) cut into runs of comment lines
    and runs of other lines, each with its first line's number: a family's ``# TYPE`` line
    does not send the samples around it to the parser."""
    if b"#" not in block:
        yield block, first
        return
    pos, line, comments = 0, first, -1  # comments: where the current run of them began
    for match in _COMMENT_LINE.finditer(block):
        if match.start() > pos:  # other lines before this comment
            if comments >= 0:
                yield block[comments:pos], line
                line += block.count(b"\n", comments, pos)
                comments = -1
            yield block[pos : match.start()], line
            line += block.count(b"\n", pos, match.start())
        comments = match.start() if comments < 0 else comments
        pos = match.end()
    if comments >= 0:
        yield block[comments:pos], line
        line += block.count(b"\n", comments, pos)
    if pos < len(block):
        yield block[pos:], line


def _openmetrics_block(
    block: bytes, first: int, report: FileReport, table: SeriesTable
) -> Iterator[RawChunk]:
    """read_openmetrics for one run of lines: dumps_fast's, or else the parser's."""
    fast = _plain_samples(block, table)
    if fast is not None:
        report.samples += len(fast)
        yield fast
        return
    data = (_EOF_LINES.sub(b"", block) if b"EOF" in block else block) + b"# EOF\n"
    exp = parse_exposition(data, str(report.path), openmetrics=True)
    for err in exp.errors:
        if isinstance(err, ParseError):
            report.bad_line(f"{report.path}:{first + err.line - 1}", err.reason, err.content)
        else:
            report.bad_line(str(report.path), str(err))
    if not exp.keys:
        return
    times = np.array(exp.timestamps, dtype=np.float64)  # None -> NaN
    locate = _LineFinder(block, first)
    ids = _ids_or_report(exp.keys, locate, report, table)
    keep = ~np.isnan(times) & (ids >= 0)
    missing = np.flatnonzero(~keep & (ids >= 0))
    for n, i in enumerate(missing):
        if len(report.errors) >= 5:  # the rest are only counted
            report.bad += len(missing) - n
            break
        line = locate(exp.keys[i], bare=True)
        report.bad_line(f"{report.path}:{line}", _NO_TIMESTAMP, exp.keys[i])
    times = np.where(times > MS_THRESHOLD, times / 1000.0, times)
    values = np.array(exp.values, dtype=np.float64)
    chunk = RawChunk(ids[keep].astype(np.int32), times[keep], values[keep])
    report.samples += len(chunk)
    yield chunk


def _plain_samples(block: bytes, table: SeriesTable, *, tsdb: bool = False) -> RawChunk | None:
    """The block's samples by dumps_fast when it is only plain sample lines whose keys are
    all series (else None: the format's own reader reads it, and names what is wrong)."""
    fields = sample_fields(block, tsdb=tsdb)
    if fields is None:
        return None
    try:
        ids = table.ids_of_texts(fields.keys)[fields.run]
    except (ParseError, ValueError):  # ValueError: a tsdb key split_tsdb_series rejects
        return None
    values, times = fields.values, fields.times
    table.blank_dcgm(ids, values)
    if tsdb:
        return RawChunk(ids, times / 1000.0, values)
    return RawChunk(ids, np.where(times > MS_THRESHOLD, times / 1000.0, times), values)


def _ids_or_report(
    keys: list[str], locate: _LineFinder, report: FileReport, table: SeriesTable
) -> np.ndarray[Any, np.dtype[np.int64]]:
    """Series ids of raw keys; -1 (and a reported line) for a key split_series rejects."""
    try:
        return table.ids_of_texts(keys).astype(np.int64)
    except ParseError:
        pass
    out = np.empty(len(keys), dtype=np.int64)
    for i, key in enumerate(keys):
        try:
            out[i] = table.id_of_text(key)
        except ParseError as exc:
            out[i] = -1
            report.bad_line(f"{report.path}:{locate(key, bare=False)}", exc.reason, key)
    return out


class _LineFinder:
    """Line numbers of samples in a block, for messages only (the parser does not keep them):
    each call searches forward from the previous hit, so repeated keys get successive lines."""

    def __init__(self, block: bytes, first: int) -> None:
        self.block, self.first, self.after = block, first, 0
        self.lines: list[str] | None = None

    def __call__(self, key: str, bare: bool) -> int:
        """Line of the next sample of ``key`` (``bare``: one without a timestamp)."""
        if self.lines is None:
            self.lines = self.block.decode("utf-8", errors="replace").split("\n")
        for i in range(self.after, len(self.lines)):
            text = self.lines[i].strip()
            if text.startswith(key) and (not bare or len(text[len(key) :].split()) == 1):
                self.after = i + 1
                return self.first + i
        return self.first + self.after
