"""Prometheus remote-write 1.0 in: decoding, the frame source, the HTTP endpoint, the daemon.

The end-to-end test with a real Prometheus is tests/test_e2e_remote_write.py.
"""

from __future__ import annotations

import base64
import hashlib
import math
import struct
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import cramjam
import httpx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from detector.config import Config
from detector.errors import RemoteWriteError
from detector.ingest import RemoteWriteSource
from detector.ingest.parse import parse_exposition, split_series
from detector.ingest.remote_write import (
    check_headers,
    decode_write_request,
    encode_write_request,
    split_key,
)
from detector.ingest.remote_write import prompb_pb2 as pb
from detector.model import Frame
from detector.series import LabelRules, SeriesIndex, merge_frames
from detector.service.daemon import Daemon
from detector.service.export import Exporter
from detector.service.server import Readiness, Server, start_server

HEADERS = {
    "Content-Encoding": "snappy",
    "Content-Type": "application/x-protobuf",
    "X-Prometheus-Remote-Write-Version": "0.1.0",
}
LOWER = {k.lower(): v for k, v in HEADERS.items()}
T0 = 1_700_000_000_000  # ms
LIMIT = 1 << 20
TEMP = ("DCGM_FI_DEV_GPU_TEMP", (("Hostname", "node-01"), ("gpu", "0"), ("job", "dcgm")))


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _snappy(raw: bytes) -> bytes:
    return bytes(cramjam.snappy.compress_raw(raw))


def _decoded(body: bytes) -> list[tuple[str, tuple[tuple[str, str], ...], int, float]]:
    """(metric, labels, timestamp, value) per sample, through the public decoder."""
    batch = decode_write_request(body, LIMIT)
    out = []
    for i in range(len(batch)):
        name, labels = split_key(batch.keys[int(batch.sample_series[i])])
        out.append((name, labels, int(batch.timestamps_ms[i]), float(batch.values[i])))
    return out


# -- decoding ------------------------------------------------------------------------------
_names = st.from_regex(r"[a-zA-Z_][a-zA-Z0-9_]{0,12}", fullmatch=True)
_values = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=12)
_series = st.tuples(
    _names,
    st.dictionaries(_names.filter(lambda n: n != "__name__"), _values, max_size=6),
    st.lists(
        st.tuples(st.integers(-(2**62), 2**62), st.floats(allow_nan=False, width=64)),
        max_size=4,
    ),
)


@settings(max_examples=60, deadline=None)
@given(st.lists(_series, max_size=12))
def test_decoding_returns_every_sample_with_its_series(series: list[Any]) -> None:
    """Every sample of a request comes back with its metric, sorted labels, time and value."""
    request = [(name, tuple(labels.items()), samples) for name, labels, samples in series]
    expected = [
        (name, tuple(sorted(labels)), stamp, value)
        for name, labels, samples in request
        for stamp, value in samples
    ]
    assert expected == _decoded(encode_write_request(request))


def test_fields_a_receiver_does_not_read_are_skipped() -> None:
    """Exemplars and native histograms inside a series, and metadata beside them, are
    skipped: the samples are read as without them."""
    series = pb.TimeSeries(
        labels=[pb.Label(name="__name__", value="up"), pb.Label(name="job", value="dcgm")],
        samples=[pb.Sample(value=1.0, timestamp=T0)],
    ).SerializeToString()
    exemplar = _field(1, _field(1, b"trace_id")) + b"\x11" + struct.pack("<d", 2.5)
    histogram = b"\x08\x07" + _field(9, b"\x01\x02")
    series += _field(3, exemplar) + _field(4, histogram)
    metadata = pb.MetricMetadata(type=pb.MetricMetadata.GAUGE, metric_family_name="up")
    raw = _field(3, metadata.SerializeToString()) + _field(1, series)
    assert [("up", (("job", "dcgm"),), T0, 1.0)] == _decoded(_snappy(raw))


def test_labels_written_after_the_samples_are_still_read() -> None:
    """Valid protobuf whose labels are not one run of bytes (a label after a sample) decodes
    the same."""
    label = pb.Label(name="gpu", value="3").SerializeToString()
    series = (
        _field(1, pb.Label(name="__name__", value="DCGM_FI_DEV_GPU_TEMP").SerializeToString())
        + _field(2, pb.Sample(value=61.0, timestamp=T0).SerializeToString())
        + _field(1, label)
    )
    assert [("DCGM_FI_DEV_GPU_TEMP", (("gpu", "3"),), T0, 61.0)] == _decoded(
        _snappy(_field(1, series))
    )


STALE = struct.unpack("<d", struct.pack("<Q", 0x7FF0000000000002))[0]


def test_a_stale_marker_is_read_as_nan() -> None:
    """Prometheus' staleness marker arrives as its NaN."""
    ((_, _, _, value),) = _decoded(encode_write_request([("up", (), [(T0, STALE)])]))
    assert math.isnan(value)


def test_a_stale_marker_never_takes_the_place_of_a_sample() -> None:
    """A GPU's workload changes: the old series' staleness marker and the new series' first
    sample share a timestamp and a column. The sample is taken, the marker counted as stale;
    a plain NaN sample stays a sample."""
    gpu = (("Hostname", "node-01"), ("gpu", "0"))
    rules = LabelRules(workload_labels=("pod",))
    source = RemoteWriteSource(SeriesIndex(rules))
    old = ("DCGM_FI_DEV_GPU_TEMP", (*gpu, ("pod", "job-a")))
    new = ("DCGM_FI_DEV_GPU_TEMP", (*gpu, ("pod", "job-b")))
    _write(source, (T0, 40.0), series=old)
    assert [40.0] == source.frame(T0 / 1000).values.tolist()
    body = encode_write_request([(*old, [(T0 + 1000, STALE)]), (*new, [(T0 + 1000, 41.0)])])
    assert Counter({"stale": 1, "accepted": 1}) == source.receive(body, LOWER)
    assert [41.0] == source.frame(T0 / 1000 + 1).values.tolist()
    assert Counter({"accepted": 1}) == _write(source, (T0 + 2000, math.nan), series=new)


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        (b"\x0a\x10\x0a\x02", "truncated message"),
        (_field(1, b"\x12\x09\x09" + b"\0" * 7), "truncated message"),
        (b"\x0a\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", "malformed varint"),
        (b"\x08\x01", "wrong wire type"),
        (b"\x2b\x2c", "group wire types"),
    ],
)
def test_a_malformed_write_request_is_refused_naming_the_problem(raw: bytes, problem: str) -> None:
    """Bytes that are no WriteRequest raise RemoteWriteError (reason protobuf) naming what is
    wrong and where."""
    with pytest.raises(RemoteWriteError) as error:
        decode_write_request(_snappy(raw), LIMIT)
    assert "protobuf" == error.value.reason
    assert problem in str(error.value)
    assert "at byte" in str(error.value)


def test_a_series_whose_labels_do_not_decode_is_refused() -> None:
    """Labels are decoded (UTF-8 checked) by protobuf when their series is new."""
    label = b"\x0a\x08__name__\x12\x02\xff\xfe"  # a value that is not UTF-8
    with pytest.raises(RemoteWriteError) as error:
        RemoteWriteSource(SeriesIndex()).receive(_snappy(_field(1, _field(1, label))), LOWER)
    assert "undecodable series labels" in str(error.value)


def test_corrupt_snappy_is_refused() -> None:
    """A body that is not snappy block format is refused with reason snappy."""
    with pytest.raises(RemoteWriteError) as error:
        decode_write_request(b"\x10\x09hello, not snappy", LIMIT)
    assert "snappy" == error.value.reason


def test_a_declared_size_over_the_limit_is_refused_before_decompressing() -> None:
    """The decompressed size the body declares is checked against the limit first."""
    body = _snappy(b"\0" * 5000)
    with pytest.raises(RemoteWriteError) as error:
        decode_write_request(body, 4096)
    assert "too_large" == error.value.reason
    assert "5000" in str(error.value)


@pytest.mark.parametrize(
    ("headers", "reason"),
    [
        ({"content-type": "application/x-protobuf"}, "encoding"),
        ({"content-encoding": "gzip"}, "encoding"),
        (
            {"content-encoding": "snappy", "content-type": "application/json"},
            "unsupported_media_type",
        ),
        (
            {
                "content-encoding": "snappy",
                "content-type": "application/x-protobuf;proto=io.prometheus.write.v2.Request",
            },
            "unsupported_media_type",
        ),
    ],
)
def test_requests_that_are_not_remote_write_1_are_refused(
    headers: dict[str, str], reason: str
) -> None:
    """Only snappy protobuf WriteRequests (remote-write 1.0) are taken."""
    with pytest.raises(RemoteWriteError) as error:
        check_headers(headers)
    assert reason == error.value.reason


def test_a_1_0_request_with_its_proto_parameter_is_taken() -> None:
    """Content-Type with proto=prometheus.WriteRequest is remote-write 1.0."""
    check_headers(
        {
            "content-encoding": "snappy",
            "content-type": "application/x-protobuf; proto=prometheus.WriteRequest",
        }
    )


@pytest.mark.parametrize(
    ("labels", "problem"),
    [
        ([("job", "x")], "no metric name"),
        ([("__name__", "up"), ("job", "a"), ("job", "b")], "twice"),
    ],
)
def test_a_series_without_name_or_with_a_label_twice_is_refused(
    labels: list[tuple[str, str]], problem: str
) -> None:
    """The series index never sees a series it could not name."""
    series = pb.TimeSeries(labels=[pb.Label(name=n, value=v) for n, v in labels])
    body = _snappy(_field(1, series.SerializeToString()))
    source = RemoteWriteSource(SeriesIndex())
    with pytest.raises(RemoteWriteError) as error:
        source.receive(body, LOWER)
    assert "series" == error.value.reason
    assert problem in str(error.value)
    assert Counter({"series": 1}) == source.stats.requests


# -- the frame source ----------------------------------------------------------------------
def _write(
    source: RemoteWriteSource, *samples: tuple[int, float], series: Any = TEMP
) -> Counter[str]:
    name, labels = series
    return source.receive(encode_write_request([(name, labels, list(samples))]), LOWER)


def test_a_tick_frame_holds_each_series_newest_sample_since_the_last_tick() -> None:
    """Several samples of a series before a tick: the frame has the newest; columns no
    sample reached are NaN; the next tick starts empty."""
    index = SeriesIndex()
    source = RemoteWriteSource(index)
    _write(source, (T0, 40.0), (T0 + 1000, 41.0))
    _write(source, (T0 + 2000, 42.0))
    other = ("DCGM_FI_DEV_POWER_USAGE", (("Hostname", "node-01"), ("gpu", "0")))
    _write(source, (T0, 300.0), series=other)
    frame = source.frame(T0 / 1000 + 3)
    assert T0 / 1000 + 3 == frame.time
    assert [42.0, 300.0] == frame.values.tolist()
    _write(source, (T0 + 3000, 43.0))
    assert [43.0, None] == [None if np.isnan(v) else v for v in source.frame(T0 / 1000 + 4).values]


def test_out_of_order_duplicate_and_too_old_samples_are_dropped_and_counted() -> None:
    """Per series, as Prometheus' TSDB appends: older than the newest admitted is out of
    order, equal a duplicate; older than max_sample_age_s before the last tick too old."""
    source = RemoteWriteSource(SeriesIndex(), max_sample_age_s=30.0)
    assert Counter({"accepted": 1}) == _write(source, (T0 + 5000, 45.0))
    assert Counter({"out_of_order": 1, "duplicate": 1, "accepted": 1}) == _write(
        source, (T0 + 4000, 44.0), (T0 + 5000, 45.5), (T0 + 6000, 46.0)
    )
    assert [46.0] == source.frame(T0 / 1000 + 60).values.tolist()  # oldest now: T0 + 30 s
    old = ("DCGM_FI_DEV_SM_CLOCK", (("gpu", "0"),))
    assert Counter({"too_old": 1}) == _write(source, (T0 + 29_000, 1.0), series=old)
    assert Counter({"accepted": 1}) == _write(source, (T0 + 31_000, 1.0), series=old)
    expected = Counter({"accepted": 3, "out_of_order": 1, "duplicate": 1, "too_old": 1})
    assert expected == source.stats.samples
    assert Counter({"ok": 4}) == source.stats.requests


def test_a_remote_written_series_lands_in_its_scraped_column() -> None:
    """The series index is shared: a series Prometheus remote-writes (target labels added by
    Prometheus) has the column the same series has when scraped with those target labels."""
    index = SeriesIndex(LabelRules())
    page = parse_exposition(
        b'DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-1",Hostname="node-01"} 40\n', "page"
    )
    target = (("instance", "10.0.0.1:9400"), ("job", "dcgm"), ("node", "node-01"))
    scraped = index.columns(page.keys, split_series, target)
    source = RemoteWriteSource(index)
    name, labels = split_series(page.keys[0])
    _write(source, (T0, 41.0), series=(name, labels + target))
    assert 1 == len(index)
    assert [41.0] == source.frame(T0 / 1000 + 1).values[scraped].tolist()


def test_series_kept_out_by_labels_drop_are_counted_as_dropped() -> None:
    """A series labels.drop keeps out of the index is dropped, and counted."""
    rules = LabelRules.from_config(Config().labels)
    index = SeriesIndex(rules)
    source = RemoteWriteSource(index)
    veth = ("node_network_receive_bytes_total", (("device", "veth12ab"), ("job", "node")))
    assert rules.dropped(*veth)
    assert Counter({"dropped": 1}) == _write(source, (T0, 1.0), series=veth)
    assert 0 == len(index)


# -- the HTTP endpoint ---------------------------------------------------------------------
SHA = "sha256:" + hashlib.sha256(b"secret").hexdigest()


@pytest.fixture
async def endpoint() -> AsyncIterator[tuple[Server, RemoteWriteSource, Exporter]]:
    config = Config.model_validate(
        {"server": {"basic_auth": {"prom": SHA}}, "remote_write": {"enabled": True}}
    )
    source = RemoteWriteSource(SeriesIndex(), max_body_bytes=4096, max_decoded_bytes=8192)
    exporter = Exporter(CollectorRegistry(), version="t")
    exporter.remote_write = source.stats
    server = await start_server(
        config, exporter, Readiness(15.0), host="127.0.0.1", port=0, remote_write=source
    )
    yield server, source, exporter
    await server.close()


AUTH = {"Authorization": "Basic " + base64.b64encode(b"prom:secret").decode()}


async def _post(server: Server, body: bytes, **headers: str) -> httpx.Response:
    async with httpx.AsyncClient() as client:
        return await client.post(
            f"http://127.0.0.1:{server.port}/api/v1/write",
            content=body,
            headers=HEADERS | AUTH | headers,
        )


async def test_a_write_is_answered_204_and_counted_in_metrics(
    endpoint: tuple[Server, RemoteWriteSource, Exporter],
) -> None:
    """A good request gets 204 No Content; /metrics counts the request and its samples."""
    server, source, exporter = endpoint
    response = await _post(server, encode_write_request([(*TEMP, [(T0, 40.0), (T0, 40.0)])]))
    assert 204 == response.status_code
    assert [40.0] == source.frame(T0 / 1000).values.tolist()
    page = parse_exposition(exporter.render()[0], "metrics")
    got = dict(zip(page.keys, page.values, strict=True))
    assert 1.0 == got['detector_remote_write_requests_total{result="ok"}']
    assert 1.0 == got['detector_remote_write_samples_total{result="accepted"}']
    assert 1.0 == got['detector_remote_write_samples_total{result="duplicate"}']


@pytest.mark.parametrize(
    ("body", "headers", "status", "text"),
    [
        (b"garbage", {}, 400, "snappy"),
        (_snappy(b"\x0a\x05\x0a"), {}, 400, "truncated"),
        (_snappy(b"\0" * 9000), {}, 413, "max_decoded_bytes"),
        (b"x" * 5000, {}, 413, "max_body_bytes"),
        (
            b"",
            {"Content-Type": "application/x-protobuf;proto=io.prometheus.write.v2.Request"},
            415,
            "1.0",
        ),
    ],
)
async def test_a_bad_write_gets_a_status_and_message_naming_the_problem(
    endpoint: tuple[Server, RemoteWriteSource, Exporter],
    body: bytes,
    headers: dict[str, str],
    status: int,
    text: str,
) -> None:
    """Unreadable: 400; too large: 413; another protocol version: 415; each says why."""
    server, source, _ = endpoint
    response = await _post(server, body, **headers)
    assert status == response.status_code
    assert text in response.text
    assert 0 == source.stats.requests["ok"]
    assert 1 == sum(source.stats.requests.values())


async def test_a_write_without_credentials_is_refused(
    endpoint: tuple[Server, RemoteWriteSource, Exporter],
) -> None:
    """With basic auth configured, a write needs the credentials (401 without)."""
    server, source, _ = endpoint
    async with httpx.AsyncClient() as client:
        response = await client.post(
            f"http://127.0.0.1:{server.port}/api/v1/write",
            content=encode_write_request([(*TEMP, [(T0, 1.0)])]),
            headers=HEADERS,
        )
    assert 401 == response.status_code
    assert Counter() == source.stats.samples


async def test_the_write_path_takes_only_post(
    endpoint: tuple[Server, RemoteWriteSource, Exporter],
) -> None:
    """GET /api/v1/write: 405 with Allow: POST."""
    server, _, _ = endpoint
    async with httpx.AsyncClient() as client:
        response = await client.get(f"http://127.0.0.1:{server.port}/api/v1/write", headers=AUTH)
    assert (405, "POST") == (response.status_code, response.headers["allow"])


async def test_without_remote_write_the_path_is_not_found() -> None:
    """Remote write off (no sink): POST /api/v1/write is refused like any unknown request."""
    server = await start_server(
        Config(),
        Exporter(CollectorRegistry(), version="t"),
        Readiness(15.0),
        host="127.0.0.1",
        port=0,
    )
    try:
        response = await _post(server, encode_write_request([(*TEMP, [(T0, 1.0)])]))
    finally:
        await server.close()
    assert 405 == response.status_code  # only GET and HEAD, as before


# -- the daemon ----------------------------------------------------------------------------
async def test_the_daemon_scores_remote_written_nodes_without_targets(tmp_path: Path) -> None:
    """With remote_write on and no targets, a tick's frame is what was remote-written: its
    node is scored and /metrics counts the samples."""
    config = Config.model_validate(
        {
            "remote_write": {"enabled": True},
            "kmsg": {"enabled": False},
            "scrape": {"interval_s": 15},
        }
    )
    now = T0 / 1000 + 15
    daemon = Daemon(config, clock=lambda: now)
    try:
        assert daemon.remote_write is not None
        series = [
            (
                "DCGM_FI_DEV_GPU_TEMP",
                (("Hostname", f"node-0{n}"), ("gpu", str(g))),
                [(T0, 40.0 + g)],
            )
            for n in (1, 2)
            for g in range(4)
        ]
        daemon.remote_write.receive(encode_write_request(series), LOWER)
        tick = await daemon.tick()
    finally:
        await daemon.aclose()
    assert ["node-01", "node-02"] == sorted(tick.node_names)
    page = parse_exposition(daemon.exporter.render()[0], "metrics")
    got = dict(zip(page.keys, page.values, strict=True))
    assert 8.0 == got['detector_remote_write_samples_total{result="accepted"}']


def test_a_tick_frame_merges_the_scrape_round_and_remote_write() -> None:
    """Scraped values fill what remote write did not bring; remote-written values win where
    both have one; a scrape frame shorter than the grown index is NaN-padded."""
    scraped = Frame(15.0, np.array([1.0, 2.0, np.nan]))
    written = Frame(15.0, np.array([np.nan, 20.0, np.nan, 40.0]))
    merged = merge_frames(scraped, written)
    assert 15.0 == merged.time
    assert [1.0, 20.0, None, 40.0] == [None if np.isnan(v) else v for v in merged.values]


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200), st.integers(0, 199), st.integers(0, 255))
def test_any_bytes_decode_or_are_refused_cleanly(junk: bytes, at: int, byte: int) -> None:
    """Random bytes, and a valid request with one byte changed, either decode or raise
    RemoteWriteError: the compiled walk never reads past the payload nor raises anything
    else."""
    valid = encode_write_request([(*TEMP, [(T0, 40.0)]), ("up", (("job", "dcgm"),), [(T0, 1.0)])])
    raw = bytearray(cramjam.snappy.decompress_raw(valid))
    raw[at % len(raw)] = byte
    for payload in (junk, bytes(raw)):
        try:
            batch = decode_write_request(_snappy(payload), LIMIT)
        except RemoteWriteError:
            continue
        assert len(batch.values) == len(batch.timestamps_ms) == len(batch.sample_series)
        assert all(0 <= i < len(batch.keys) for i in batch.sample_series.tolist())
