"""Remote-write 1.0 requests -> a batch of samples keyed by raw series keys.

The one boundary where snappy (``cramjam``) and protobuf errors become
:class:`~detector.errors.RemoteWriteError` (its ``reason`` picks the HTTP status).

- ``check_headers(headers)``: remote-write 1.0 only: ``Content-Encoding: snappy`` and
  ``Content-Type: application/x-protobuf`` (none given is taken as 1.0, as Prometheus'
  receiver does); a ``proto=`` other than ``prometheus.WriteRequest`` (remote-write 2.0) is
  ``unsupported_media_type`` (HTTP 415, on which 2.0 senders fall back to 1.0).
- ``decode_write_request(body, max_decoded_bytes)``: snappy block format (the declared size is
  checked before anything is decompressed: a small body cannot make the daemon allocate
  gigabytes), then the protobuf ``WriteRequest``: by the compiled walk (wire.py) where numba
  compiles, else, or when a series' labels are not one run of bytes, by protobuf's classes.
- A series' raw key is the latin-1 text of its Label fields' bytes as sent (``key_of``), so
  the series index caches it like a scraped page's raw key; ``split_key`` turns a new one
  into the metric name and sorted labels (decoded by protobuf, which checks UTF-8; empty
  label values dropped, as Prometheus treats them as absent).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import cramjam
import numpy as np
from google.protobuf.message import DecodeError

from ... import jit
from ...errors import RemoteWriteError
from ...model import FloatArray, IntArray, Labels
from . import prompb_pb2 as pb
from .wire import WIRE_PROBLEMS, WIRE_SCATTERED, walk

__all__ = [
    "WriteBatch",
    "check_headers",
    "decode_write_request",
    "encode_write_request",
    "key_of",
    "split_key",
]

_V1_PROTO = "prometheus.WriteRequest"


@dataclass(frozen=True, slots=True)
class WriteBatch:
    """The samples of one request: ``keys[sample_series[i]]`` is sample i's series."""

    keys: list[str]
    sample_series: IntArray
    values: FloatArray
    timestamps_ms: IntArray

    def __len__(self) -> int:
        return len(self.values)


def check_headers(headers: Mapping[str, str]) -> None:
    """Refuse what is not a remote-write 1.0 request (header names lower-case)."""
    encoding = headers.get("content-encoding", "").strip().lower()
    if encoding != "snappy":
        raise RemoteWriteError(
            "encoding", f"Content-Encoding must be snappy (got {encoding or 'none'!r})"
        )
    media, *params = (p.strip() for p in headers.get("content-type", "").split(";"))
    if media.lower() not in ("", "application/x-protobuf"):
        raise RemoteWriteError(
            "unsupported_media_type", f"Content-Type must be application/x-protobuf (got {media!r})"
        )
    for param in params:
        name, _, value = param.partition("=")
        if name.strip().lower() == "proto" and value.strip() != _V1_PROTO:
            raise RemoteWriteError(
                "unsupported_media_type",
                f"only remote-write 1.0 ({_V1_PROTO}) is accepted (got proto={value.strip()})",
            )


def decompress(body: bytes, max_decoded_bytes: int) -> memoryview:
    """The snappy block-format payload (a view of cramjam's buffer: not copied into bytes);
    its declared size is checked first."""
    try:
        size = cramjam.snappy.decompress_raw_len(body)
    except cramjam.DecompressionError as exc:
        raise RemoteWriteError("snappy", f"not snappy block format: {exc}") from None
    if size > max_decoded_bytes:
        raise RemoteWriteError(
            "too_large",
            f"decompressed size {size} bytes over remote_write.max_decoded_bytes "
            f"({max_decoded_bytes})",
        )
    try:
        return memoryview(cramjam.snappy.decompress_raw(body))
    except cramjam.DecompressionError as exc:
        raise RemoteWriteError("snappy", f"corrupt snappy data: {exc}") from None


def decode_write_request(body: bytes, max_decoded_bytes: int) -> WriteBatch:
    """See the module docstring; raises RemoteWriteError naming the problem."""
    raw = decompress(body, max_decoded_bytes)
    if jit.COMPILED:
        status, at, starts, ends, series, values, stamps = walk(np.frombuffer(raw, np.uint8))
        if status == 0:
            # latin-1 maps byte i to character i: one decode, then a slice per series
            text = str(raw, "latin-1")
            keys = [text[s:e] for s, e in zip(starts.tolist(), ends.tolist(), strict=True)]
            return WriteBatch(keys, series, values, stamps)
        if status != WIRE_SCATTERED:
            detail = WIRE_PROBLEMS.get(status, f"wire status {status}")
            raise RemoteWriteError("protobuf", f"not a WriteRequest: {detail} at byte {at}")
    return _decode_with_protobuf(raw)


def _decode_with_protobuf(raw: memoryview) -> WriteBatch:
    request = pb.WriteRequest()
    try:
        request.ParseFromString(bytes(raw))
    except DecodeError as exc:
        raise RemoteWriteError("protobuf", f"not a WriteRequest: {exc}") from None
    keys: list[str] = []
    series: list[int] = []
    values: list[float] = []
    stamps: list[int] = []
    for i, ts in enumerate(request.timeseries):
        keys.append(key_of(ts.labels))
        for sample in ts.samples:
            series.append(i)
            values.append(sample.value)
            stamps.append(sample.timestamp)
    return WriteBatch(
        keys,
        np.array(series, dtype=np.int64),
        np.array(values, dtype=np.float64),
        np.array(stamps, dtype=np.int64),
    )


def encode_write_request(
    series: Iterable[tuple[str, Labels, Iterable[tuple[int, float]]]],
) -> bytes:
    """A snappy-compressed WriteRequest of ``(metric, labels, [(timestamp ms, value)])``, labels
    sorted with ``__name__`` among them as Prometheus sends them (tests and bench/ use it)."""
    request = pb.WriteRequest()
    for name, labels, samples in series:
        ts = request.timeseries.add()
        for label, text in sorted((("__name__", name), *labels)):
            ts.labels.add(name=label, value=text)
        for stamp, value in samples:
            ts.samples.add(value=value, timestamp=stamp)
    return bytes(cramjam.snappy.compress_raw(request.SerializeToString()))


def key_of(labels: Iterable[pb.Label]) -> str:
    """The raw key of a series' labels (protobuf Label messages): their wire bytes as text."""
    wire: bytes = pb.TimeSeries(labels=labels).SerializeToString()
    return wire.decode("latin-1")


def split_key(key: str) -> tuple[str, Labels]:
    """Metric name and sorted labels of a raw key (the series index's splitter)."""
    try:
        series = pb.TimeSeries.FromString(key.encode("latin-1"))
    except DecodeError as exc:
        raise RemoteWriteError("protobuf", f"undecodable series labels: {exc}") from None
    name = ""
    labels: dict[str, str] = {}
    for label in series.labels:
        if label.name in labels or (label.name == "__name__" and name):
            raise RemoteWriteError(
                "series", f"label {label.name!r} given twice in {_shown(series)}"
            )
        if label.name == "__name__":
            name = label.value
        elif label.value:
            labels[label.name] = label.value
    if not name:
        raise RemoteWriteError("series", f"no metric name (__name__) in {_shown(series)}")
    return name, tuple(sorted(labels.items()))


def _shown(series: pb.TimeSeries) -> str:
    text = "{" + ", ".join(f'{lb.name}="{lb.value}"' for lb in series.labels) + "}"
    return text if len(text) <= 200 else text[:200] + "..."
