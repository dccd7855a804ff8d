"""A compiled walk over a decompressed remote-write ``WriteRequest`` (protobuf wire format).

Why not only protobuf's own classes: reading a parsed message from Python costs a wrapper
object per field access. On a request of 2,000 dcgm series (11 labels, one sample each)
``WriteRequest.ParseFromString`` alone ran at 0.31M series/s and reading the labels back out of
the parsed messages at 0.06M series/s (a profile of the first version; bench/
remote_write_bench.py prints the figures of both paths). The walk below reads the same bytes in
one compiled pass and returns, per time series, the byte span of its labels (the raw series
key: Prometheus writes the same labels as the same bytes every request, so the series index
looks it up with one dict access, as it does a scraped page's raw key) and, per sample, its
series, value and timestamp. A span seen for the first time is decoded by protobuf
(``prompb_pb2.TimeSeries``), which also checks what the walk does not (UTF-8 of names and
values); see decode.py.

Contract of ``walk(buf)``: returns ``(status, at, starts, ends, sample_series, values,
timestamps)``. ``status`` 0: the arrays hold every series and sample (arrays sized to them).
Otherwise ``at`` is the byte offset of the problem and ``status`` one of the ``WIRE_*`` codes
below (``WIRE_SCATTERED``: valid protobuf, but a series' labels are not one run of bytes; the
caller decodes such a request with protobuf instead). Fields other than labels and samples
(exemplars, native histograms, metadata, unknown ones) are skipped by their wire type.
"""

from __future__ import annotations

import numpy as np

from ...jit import jit
from ...model import FloatArray, IntArray

__all__ = ["WIRE_PROBLEMS", "WIRE_SCATTERED", "walk"]

WIRE_OK = 0
WIRE_TRUNCATED = 1
WIRE_BAD_VARINT = 2
WIRE_BAD_TYPE = 3
WIRE_GROUP = 4
WIRE_SCATTERED = 5
WIRE_FIELD_ZERO = 6
WIRE_PROBLEMS = {
    WIRE_TRUNCATED: "truncated message (a length or value runs past the end)",
    WIRE_BAD_VARINT: "malformed varint",
    WIRE_BAD_TYPE: "a field has the wrong wire type for WriteRequest",
    WIRE_GROUP: "group wire types are not part of remote write",
    WIRE_FIELD_ZERO: "field number 0",
}


@jit
def _varint(buf: np.ndarray, pos: int, end: int) -> tuple[int, int]:
    """(value as uint64 bits in an int64, next position); next -1 truncated, -2 malformed."""
    result = np.uint64(0)
    shift = np.uint64(0)
    for i in range(10):
        if pos >= end:
            return 0, -1
        byte = np.uint64(buf[pos])
        pos += 1
        result |= (byte & np.uint64(0x7F)) << shift
        if byte < np.uint64(0x80):
            return int(np.int64(result)), pos
        shift += np.uint64(7)
        if i == 9:
            break
    return 0, -2


@jit
def _skip(buf: np.ndarray, pos: int, end: int, wire: int) -> int:
    """Position after a field's payload of wire type ``wire``; -1 truncated, -2 bad varint,
    -4 a group."""
    if wire == 0:
        _, pos = _varint(buf, pos, end)
        return pos
    if wire == 1:
        return pos + 8 if pos + 8 <= end else -1
    if wire == 5:
        return pos + 4 if pos + 4 <= end else -1
    if wire == 2:
        length, pos = _varint(buf, pos, end)
        if pos < 0:
            return pos
        if length < 0 or length > end - pos:
            return -1
        return pos + length
    return -4


@jit
def walk(
    buf: np.ndarray,
) -> tuple[int, int, IntArray, IntArray, IntArray, FloatArray, IntArray]:
    """See the module docstring."""
    n = buf.shape[0]
    cap = n // 2 + 1  # every series and every sample takes at least two bytes
    no = np.empty(0, np.int64)  # the arrays of a failed walk
    nof = np.empty(0, np.float64)
    starts = np.empty(cap, np.int64)
    ends = np.empty(cap, np.int64)
    sample_series = np.empty(cap, np.int64)
    values = np.empty(cap, np.float64)
    stamps = np.empty(cap, np.int64)
    series = 0
    samples = 0
    pos = 0
    while pos < n:
        at = pos
        tag, pos = _varint(buf, pos, n)
        if pos < 0:
            return -pos, at, no, no, no, nof, no
        field = tag >> 3
        wire = tag & 7
        if field == 0:
            return WIRE_FIELD_ZERO, at, no, no, no, nof, no
        if field != 1:  # metadata, Cortex's source, unknown: skipped
            pos = _skip(buf, pos, n, wire)
            if pos < 0:
                return -pos, at, no, no, no, nof, no
            continue
        if wire != 2:
            return WIRE_BAD_TYPE, at, no, no, no, nof, no
        length, pos = _varint(buf, pos, n)
        if pos < 0:
            return -pos, at, no, no, no, nof, no
        if length < 0 or length > n - pos:
            return WIRE_TRUNCATED, at, no, no, no, nof, no
        ts_end = pos + length
        label_start = -1
        label_end = -1
        scattered = False
        while pos < ts_end:  # one TimeSeries
            at = pos
            tag, pos = _varint(buf, pos, ts_end)
            if pos < 0:
                return -pos, at, no, no, no, nof, no
            field = tag >> 3
            wire = tag & 7
            if field == 0:
                return WIRE_FIELD_ZERO, at, no, no, no, nof, no
            if (field == 1 or field == 2) and wire != 2:
                return WIRE_BAD_TYPE, at, no, no, no, nof, no
            after = _skip(buf, pos, ts_end, wire)
            if after < 0:
                return -after, at, no, no, no, nof, no
            if field == 1:  # a Label: the labels' run of bytes is the series key
                if label_start < 0:
                    label_start = at
                elif label_end != at:
                    scattered = True
                label_end = after
            elif field == 2:  # a Sample: fixed64 value (1), varint timestamp (2)
                _, body = _varint(buf, pos, ts_end)  # the length, checked by _skip
                value = 0.0
                stamp = 0
                while body < after:
                    at = body
                    tag, body = _varint(buf, body, after)
                    if body < 0:
                        return -body, at, no, no, no, nof, no
                    sfield = tag >> 3
                    swire = tag & 7
                    if sfield == 0:
                        return WIRE_FIELD_ZERO, at, no, no, no, nof, no
                    if sfield == 1 and swire == 1:
                        if body + 8 > after:
                            return WIRE_TRUNCATED, at, no, no, no, nof, no
                        value = buf[body : body + 8].view(np.float64)[0]
                        body += 8
                    elif sfield == 2 and swire == 0:
                        stamp, body = _varint(buf, body, after)
                        if body < 0:
                            return -body, at, no, no, no, nof, no
                    elif sfield == 1 or sfield == 2:
                        return WIRE_BAD_TYPE, at, no, no, no, nof, no
                    else:
                        body = _skip(buf, body, after, swire)
                        if body < 0:
                            return -body, at, no, no, no, nof, no
                sample_series[samples] = series
                values[samples] = value
                stamps[samples] = stamp
                samples += 1
            pos = after
        if scattered:
            return WIRE_SCATTERED, at, no, no, no, nof, no
        if label_start < 0:  # no labels: an empty key, refused by the caller
            label_start = ts_end
            label_end = ts_end
        starts[series] = label_start
        ends[series] = label_end
        series += 1
    return (
        WIRE_OK,
        n,
        starts[:series],
        ends[:series],
        sample_series[:samples],
        values[:samples],
        stamps[:samples],
    )
