"""bench/scale_bench.py builds its pages and requests from the real exporters' output."""

from __future__ import annotations

import sys
from pathlib import Path

import cramjam
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # bench/ is scripts, not installed

from bench import scale_bench
from detector.ingest.parse import parse_exposition
from detector.ingest.remote_write import encode_write_request
from detector.ingest.remote_write import prompb_pb2 as pb


def test_node_page_template_renders_the_real_page_back() -> None:
    """At its own values the template renders the node-exporter fixture's 3,027 series,
    values and types (only number spellings differ: 3 becomes 3.0)."""
    template = scale_bench.node_template()
    original = parse_exposition(scale_bench.NODE_PAGE.read_bytes(), "fixture")
    rendered = parse_exposition(template.render(template.base), "rendered")
    assert 3027 == template.samples
    assert original.keys == rendered.keys
    assert original.values == rendered.values
    assert original.types == rendered.types
    assert [] == rendered.errors


def test_node_page_counters_grow_and_gauges_move_tick_by_tick() -> None:
    """Counters never go down from one tick to the next; gauges are not frozen."""
    template = scale_bench.node_template()
    before, after = template.values(3, 5), template.values(3, 6)
    assert bool(np.all(after[template.grows] >= before[template.grows]))
    moving = ~template.grows & (template.base != 0)
    assert bool(np.any(after[moving] != before[moving]))


def test_dcgm_page_has_every_metric_field_of_eight_gpus_and_quiet_xids() -> None:
    """8 GPUs x the 25 metric fields of dcp-metrics-included.csv (the driver version is a
    label), parsed without error, Hostname the node, and no XID (a failure) on the page."""
    template = scale_bench.dcgm_template("gpu-node-0007", 7)
    exp = parse_exposition(template.render(template.values(7, 2)), "dcgm")
    assert 25 == len(scale_bench.dcgm_fields())
    assert 8 * 25 == len(exp.keys)
    assert [] == exp.errors
    assert all('Hostname="gpu-node-0007"' in key for key in exp.keys)
    xids = [v for k, v in zip(exp.keys, exp.values, strict=True) if "XID_ERRORS" in k]
    assert [0.0] * 8 == xids


def test_request_encoder_writes_what_encode_write_request_writes() -> None:
    """The bench's fast encoder decodes to the same WriteRequest as the project's encoder,
    the target labels added as Prometheus adds them (a page's own node label kept apart)."""
    page = b'# TYPE m gauge\nm{node="local",zone="a"} 1\nm{zone="b"} 2\n'
    target = {"instance": "10.1.0.1:9100", "job": "node-exporter", "node": "gpu-node-0001"}
    series = scale_bench.remote_write_series(page, target)
    assert ("exported_node", "local") in series[0][1]
    values = np.array([1.5, -2.0])
    fast = scale_bench.RequestEncoder(series).requests(values, 1_700_000_000_000, 2000)
    reference = encode_write_request(
        (m, labels, [(1_700_000_000_000, float(v))])
        for (m, labels), v in zip(series, values, strict=True)
    )

    def decoded(body: bytes) -> pb.WriteRequest:
        request = pb.WriteRequest()
        request.ParseFromString(bytes(cramjam.snappy.decompress_raw(body)))
        return request

    assert 1 == len(fast)
    assert decoded(reference) == decoded(fast[0])


def test_summary_pages_are_the_agents_summary_under_each_nodes_name() -> None:
    """Each node's summary page is the agent's, its node label that node's, on that node's
    agent URL; the same series every tick, values moving."""
    agent = scale_bench.AGENT_NODE
    text = (
        "# TYPE detector_summary_signal gauge\n"
        f'detector_summary_signal{{node="{agent}",signal="mem_available",series="m"}} 5e11\n'
        f'detector_summary_gpu_score{{node="{agent}",gpu="0"}} 0.25\n'
    )
    fleet = scale_bench.Fleet.__new__(scale_bench.Fleet)
    fleet.nodes, fleet.seed = 2, 0
    fleet.set_summary(text)
    first, second = fleet.summary_pages(0), fleet.summary_pages(1)
    assert [scale_bench.summary_url(0), scale_bench.summary_url(1)] == list(first)
    page = parse_exposition(first[scale_bench.summary_url(1)], "summary")
    node = scale_bench.node_name(1)
    assert [
        f'detector_summary_signal{{node="{node}",signal="mem_available",series="m"}}',
        f'detector_summary_gpu_score{{node="{node}",gpu="0"}}',
    ] == page.keys
    later = parse_exposition(second[scale_bench.summary_url(1)], "summary")
    assert page.keys == later.keys
    assert page.values != later.values
