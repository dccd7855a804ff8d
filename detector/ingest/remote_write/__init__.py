"""Prometheus remote-write 1.0 in: decode (decode.py, wire.py) and a frame source
(source.py)."""

from .decode import (
    WriteBatch,
    check_headers,
    decode_write_request,
    encode_write_request,
    split_key,
)
from .source import SAMPLE_RESULTS, RemoteWriteSource, RemoteWriteStats

__all__ = [
    "SAMPLE_RESULTS",
    "RemoteWriteSource",
    "RemoteWriteStats",
    "WriteBatch",
    "check_headers",
    "decode_write_request",
    "encode_write_request",
    "split_key",
]
