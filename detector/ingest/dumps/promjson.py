"""Prometheus HTTP API JSON dumps -> raw chunks (see :mod:`detector.ingest.dumps_formats`).

Accepted: ``/api/v1/query_range`` responses (resultType matrix) and ``/api/v1/query``
responses (vector, or matrix for a range selector); several documents may follow one another
in a file (e.g. JSON lines from a loop of curl calls). Values are the API's strings ("NaN",
"+Inf" included). A point that is not ``[time, "value"]`` (or whose time is NaN or infinite)
is skipped and reported with its JSON path; a failed query (``"status": "error"``), invalid
JSON or another result type raises DumpError naming the file (and the line for invalid JSON).
Native-histogram samples have no float value and are left out.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from typing import IO, Any

import numpy as np

from ...errors import DumpError
from ...model import FloatArray
from .formats import FileReport, RawChunk, SeriesTable


def read_prometheus_json(
    fh: IO[bytes], report: FileReport, table: SeriesTable
) -> Iterator[RawChunk]:
    """``/api/v1/query_range`` (matrix) or ``/api/v1/query`` (vector or matrix) responses; a
    file may hold several documents one after another (e.g. JSON lines). A file is loaded
    whole: the API bounds one response (11k points per series)."""
    try:
        text = fh.read().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DumpError(
            f"{report.path}: not UTF-8 JSON ({exc.reason} at byte {exc.start})"
        ) from exc
    decoder, pos, number = json.JSONDecoder(), 0, 0
    while True:
        while pos < len(text) and text[pos].isspace():
            pos += 1
        if pos >= len(text):
            return
        try:
            doc, pos = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as exc:
            raise DumpError(f"{report.path}:{exc.lineno}: invalid JSON: {exc.msg}") from exc
        except RecursionError:  # the decoder recurses per nesting level
            raise DumpError(f"{report.path}: invalid JSON: nested too deeply") from None
        yield from _json_document(doc, number, report, table)
        number += 1


def _json_document(
    doc: Any, number: int, report: FileReport, table: SeriesTable
) -> Iterator[RawChunk]:
    where = f"{report.path}: document {number + 1}"
    if not isinstance(doc, dict):
        raise DumpError(f"{where}: expected a Prometheus API response object")
    if doc.get("status") == "error":
        error_type = doc.get("errorType")  # absent in some proxies' answers: not "None: ..."
        prefix = f"{error_type}: " if error_type else ""
        raise DumpError(f"{where}: the query failed: {prefix}{doc.get('error')}")
    data = doc.get("data", doc)
    kind = data.get("resultType") if isinstance(data, dict) else None
    result = data.get("result") if isinstance(data, dict) else None
    if kind not in ("matrix", "vector") or not isinstance(result, list):
        raise DumpError(f"{where}: data.resultType {kind!r}: expected 'matrix' or 'vector' results")
    for i, series in enumerate(result):
        at = f"{where}: data.result[{i}]"
        metric = series.get("metric") if isinstance(series, dict) else None
        if not isinstance(metric, dict):
            report.bad_line(at, "missing 'metric' object")
            continue
        points = series.get("values", []) if kind == "matrix" else [series.get("value")]
        if kind == "vector" and series.get("value") is None:
            points = []  # a native-histogram sample ('histogram'): not a float series
        labels = tuple(sorted((str(k), str(v)) for k, v in metric.items() if k != "__name__"))
        sid = table.id_of(str(metric.get("__name__", "")), labels)
        times, values = _json_points(
            points, f"{at}.{'values' if kind == 'matrix' else 'value'}", report
        )
        if len(times):
            ids = np.full(len(times), sid, dtype=np.int32)
            table.blank_dcgm(ids, values)
            report.samples += len(times)
            yield RawChunk(ids, times, values)


def _json_points(points: Any, where: str, report: FileReport) -> tuple[FloatArray, FloatArray]:
    """``[[ts, "value"], ...]`` -> (times, values); bad points are reported and skipped.
    A point is a two-element list with a finite time (a NaN time cannot be ordered)."""
    try:
        if all(type(p) is list and len(p) == 2 for p in points):
            times = np.array([p[0] for p in points], dtype=np.float64)
            values = np.array([p[1] for p in points], dtype=np.float64)
            if times.ndim == 1 and values.ndim == 1 and np.isfinite(times).all():
                return times, values
    except (TypeError, ValueError, OverflowError):  # Overflow: an integer past float range
        pass
    good_t, good_v = [], []
    for j, point in enumerate(points if isinstance(points, list) else [points]):
        try:
            if not isinstance(point, list) or len(point) != 2:
                raise ValueError
            stamp, value = float(point[0]), float(point[1])
            if not math.isfinite(stamp):
                raise ValueError
        except (TypeError, ValueError, OverflowError):
            report.bad_line(f"{where}[{j}]", 'bad point (expected [time, "value"])', repr(point))
            continue
        good_t.append(stamp)
        good_v.append(value)
    return np.array(good_t, dtype=np.float64), np.array(good_v, dtype=np.float64)
