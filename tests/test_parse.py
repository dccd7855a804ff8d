"""Spec of ingest/parse.py: differential against prometheus_client, bad lines, edge syntax."""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as om_reference,
)
from prometheus_client.parser import text_string_to_metric_families as prom_reference

from detector.errors import ParseError
from detector.ingest.parse import PARSE_STATS, iter_samples, parse_exposition, split_series
from detector.model import Exposition

Row = tuple[str, tuple[tuple[str, str], ...], str, float | None]


def _value(value: float) -> str:
    """Comparable text of a value: NaN equals NaN, ints and floats alike."""
    return "nan" if math.isnan(value) else repr(float(value))


def _ours(exp: Exposition) -> Counter[Row]:
    return Counter((s.name, s.labels, _value(s.value), s.timestamp) for s in iter_samples(exp))


def _reference(families: object, counters_get_total: bool = False) -> Counter[Row]:
    rows: Counter[Row] = Counter()
    for family in families:  # type: ignore[attr-defined]
        for s in family.samples:
            ts = None if s.timestamp is None else float(s.timestamp)
            rows[(s.name, tuple(sorted(s.labels.items())), _value(s.value), ts)] += 1
    return rows


def _with_total(exp: Exposition, rows: Counter[Row]) -> Counter[Row]:
    """prometheus_client renames samples of a counter family without `_total` to `*_total`."""
    out: Counter[Row] = Counter()
    for (name, labels, value, ts), n in rows.items():
        if exp.types.get(name) == "counter" and not name.endswith("_total"):
            name += "_total"
        out[(name, labels, value, ts)] += n
    return out


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


# --- differential tests against the reference parser -----------------------------------


def test_node_exporter_payload_matches_prometheus_client(real_data: Path) -> None:
    """The real node_exporter payload gives exactly prometheus_client's samples."""
    text = (real_data / "exporters/node_exporter/e2e-output.txt").read_text()
    exp = parse_exposition(text, "node_exporter")
    assert [] == exp.errors
    assert 3027 == len(exp.keys)
    assert text.count("\n") == exp.lines
    assert _reference(prom_reference(text)) == _with_total(exp, _ours(exp))


def test_openmetrics_document_matches_prometheus_client() -> None:
    """Timestamps, exemplars, # UNIT, _created and # EOF read as the OpenMetrics reference."""
    doc = (
        "# TYPE req counter\n"
        "# HELP req Requests served.\n"
        'req_total{path="/a\\"b"} 10 1700000000.5 # {trace_id="abc"} 1.0 1700000000.1\n'
        'req_created{path="/a\\"b"} 1699990000 1700000000.5\n'
        "# TYPE temp_celsius gauge\n"
        "# UNIT temp_celsius celsius\n"
        'temp_celsius{gpu="0"} NaN\n'
        'temp_celsius{gpu="1"} +Inf 1700000001\n'
        "# TYPE lat_seconds histogram\n"
        "# UNIT lat_seconds seconds\n"
        'lat_seconds_bucket{le="0.1"} 1 # {trace_id="x"} 0.05\n'
        'lat_seconds_bucket{le="+Inf"} 3\n'
        "lat_seconds_count 3\n"
        "lat_seconds_sum 1.5\n"
        "# TYPE build info\n"
        'build_info{version="1.2",note="a\\nb c}"} 1\n'
        "# EOF\n"
    )
    exp = parse_exposition(doc, "om")
    assert [] == exp.errors
    assert _reference(om_reference(doc)) == _ours(exp)
    assert {
        "req": "counter",
        "temp_celsius": "gauge",
        "lat_seconds": "histogram",
        "build": "info",
    } == exp.types


def _dcgm_page(real_data: Path, gpus: int = 8) -> tuple[str, dict[str, str]]:
    """A dcgm-exporter page for the default counters: HELP/TYPE and `gpus` GPUs each."""
    fields: list[tuple[str, str, str]] = []
    for line in (real_data / "exporters/dcgm/default-counters.csv").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, kind, help_text = (part.strip() for part in line.split(",", 2))
            if kind != "label":  # 'label' fields become labels (DCGM_FI_DRIVER_VERSION)
                fields.append((name, kind, help_text))
    out: list[str] = []
    for f, (name, kind, help_text) in enumerate(fields):
        out += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
        for gpu in range(gpus):
            labels = (
                f'gpu="{gpu}",UUID="GPU-{gpu:08x}-1f2e-4c3b-9a8d-{f:012d}",'
                f'pci_bus_id="00000000:{0x18 + gpu:02X}:00.0",device="nvidia{gpu}",'
                'modelName="NVIDIA B200",Hostname="node-01",'
                'DCGM_FI_DRIVER_VERSION="570.124.06",container="",namespace="",pod=""'
            )
            value = "9223372036854775794" if (f, gpu) == (1, 3) else f"{f * 10 + gpu}.5"
            out.append(f"{name}{{{labels}}} {value}")
    return "\n".join(out) + "\n", {name: kind for name, kind, _ in fields}


def test_dcgm_page_matches_prometheus_client_except_blank_sentinel(real_data: Path) -> None:
    """A generated 8-GPU dcgm page reads as the reference; the blank sentinel becomes NaN."""
    page, types = _dcgm_page(real_data)
    before = PARSE_STATS.dcgm_blanks
    exp = parse_exposition(page, "dcgm")
    assert [] == exp.errors
    assert 8 * len(types) == len(exp.keys)
    assert types == exp.types
    ours = _ours(exp)
    reference = _reference(prom_reference(page))
    blank = [row for row in reference if row[2] == repr(9223372036854775794.0)]
    assert 1 == len(blank)
    name, labels, _, ts = blank[0]
    assert (name, labels, "nan", ts) in ours
    assert (name, labels, "nan", ts) not in reference
    del reference[blank[0]]
    del ours[(name, labels, "nan", ts)]
    assert reference == _with_total(exp, ours)
    assert before + 1 == PARSE_STATS.dcgm_blanks


def test_large_non_dcgm_values_are_kept() -> None:
    """Only dcgm metrics carry the blank sentinel: other huge values and +Inf stay as sent."""
    exp = parse_exposition(
        "node_bytes_total 1.8446744073709537e+19\nDCGM_FI_DEV_X +Inf\ndcgm_x 9.3e18\n", "t"
    )
    assert 1.8446744073709537e19 == exp.values[0]
    assert math.inf == exp.values[1]
    assert math.isnan(exp.values[2])


# --- tolerance: bad lines are reported, good lines kept -----------------------------------


def test_bad_lines_are_reported_with_line_number_and_good_lines_kept() -> None:
    """Each bad line is one ParseError naming source, line and content; the rest parses."""
    text = (
        "# TYPE up gauge\n"
        'up{job="a"} 1\n'
        "9bad_name 1\n"
        'up{job="b} 1\n'
        'up{job="c"} one\n'
        'up{job="d"} 1 12.5\n'
        "# TYPE up gaugy\n"
        'up{job="e"} 0\n'
        "up\n"
        'up{job="f"} 1 2 3\n'
        'up{job="g",} 1\n'
    )
    exp = parse_exposition(text, "node-07:9100")
    assert ['up{job="a"}', 'up{job="e"}', 'up{job="g",}'] == exp.keys
    assert [1.0, 0.0, 1.0] == exp.values
    got = [(e.source, e.line, e.content) for e in exp.errors if isinstance(e, ParseError)]
    assert [
        ("node-07:9100", 3, "9bad_name 1"),
        ("node-07:9100", 4, 'up{job="b} 1'),
        ("node-07:9100", 5, 'up{job="c"} one'),
        ("node-07:9100", 6, 'up{job="d"} 1 12.5'),
        ("node-07:9100", 7, "# TYPE up gaugy"),
        ("node-07:9100", 9, "up"),
        ("node-07:9100", 10, 'up{job="f"} 1 2 3'),
    ] == got
    reasons = [e.reason for e in exp.errors if isinstance(e, ParseError)]
    assert "invalid metric name" == reasons[0]
    assert reasons[1].startswith("invalid label set")
    assert "invalid value 'one'" == reasons[2]
    assert "invalid timestamp '12.5': expected integer milliseconds" == reasons[3]
    assert reasons[4].startswith("malformed TYPE line")
    assert "node-07:9100:3: invalid metric name: '9bad_name 1'" == str(exp.errors[0])


def test_huge_lines_are_handled() -> None:
    """A 1 MB label value parses; a 1 MB garbage line is one error and nothing else is lost."""
    big = "x" * 1_000_000
    text = f'a{{v="{big}"}} 1\n{big}{{ 2\nb 3\n'
    exp = parse_exposition(text, "t")
    assert [1.0, 3.0] == exp.values
    assert (("v", big),) == split_series(exp.keys[0])[1]
    assert [2] == [e.line for e in exp.errors if isinstance(e, ParseError)]


def test_invalid_utf8_line_is_an_error_and_other_lines_kept() -> None:
    """Bytes that are not UTF-8 reject their line only."""
    exp = parse_exposition(b'a 1\nb{x="\xff"} 2\nc 3\n', "t")
    assert ["a", "c"] == exp.keys
    assert [(2, "invalid UTF-8")] == [
        (e.line, e.reason.split(" (")[0]) for e in exp.errors if isinstance(e, ParseError)
    ]


def test_tolerated_syntax_parses() -> None:
    """CRLF, blanks, unknown comments, missing HELP/TYPE, `}` and blanks in quoted values."""
    text = (
        "# NOTE scraped by hand\r\n"
        "\r\n"
        '  a{path="/x} y",  b = "2" } 1   \r\n'
        "#just a comment\r\n"
        "b_total 2\t\r\n"
        "c{} 3"
    )
    exp = parse_exposition(text, "t")
    assert [] == exp.errors
    assert ['a{path="/x} y",  b = "2" }', "b_total", "c{}"] == exp.keys
    assert [1.0, 2.0, 3.0] == exp.values
    assert ("a", (("b", "2"), ("path", "/x} y"))) == split_series(exp.keys[0])
    assert ("c", ()) == split_series("c{}")
    assert 6 == exp.lines


def test_nan_and_infinity_spellings() -> None:
    """Every spelling Prometheus accepts for NaN and infinities parses."""
    spellings = ["NaN", "nan", "Nan", "+Inf", "-Inf", "Inf", "inf", "+inf", "-Infinity"]
    text = "".join(f'm{{i="{i}"}} {v}\n' for i, v in enumerate(spellings))
    values = parse_exposition(text, "t").values
    assert [True, True, True] == [math.isnan(v) for v in values[:3]]
    assert [math.inf, -math.inf, math.inf, math.inf, math.inf, -math.inf] == values[3:]


def test_label_escaping_round_trips() -> None:
    """Escaped backslash, quote and newline come back unescaped; `\\\\n` is not a newline."""
    raw = 'back\\slash "quoted"\nnew \\n literal'
    exp = parse_exposition(f'm{{v="{_escape(raw)}"}} 1\n', "t")
    assert ("m", (("v", raw),)) == split_series(exp.keys[0])


def test_timestamps_are_seconds_in_both_formats() -> None:
    """Prometheus text timestamps are ms (divided by 1000); OpenMetrics ones are seconds."""
    prom = parse_exposition("a 1 1700000000123\nb 2\n", "t")
    assert [1700000000.123, None] == prom.timestamps
    om = parse_exposition("a 1 1700000000.123\nb 2\n# EOF\n", "t")
    assert [1700000000.123, None] == om.timestamps
    forced = parse_exposition("a 1 1700000000\n", "t", openmetrics=True)
    assert [1700000000.0] == forced.timestamps


def test_openmetrics_is_detected_from_its_syntax() -> None:
    """# UNIT, exemplars and _created switch timestamps to seconds even without # EOF."""
    for marker in (
        "# UNIT a_seconds seconds\n",
        'x_total 1 # {t="1"} 1\n',
        "x_created 1\n",
    ):
        exp = parse_exposition(marker + "a_seconds 1 1700000000\n", "t")
        assert 1700000000.0 == exp.timestamps[-1], marker


def test_openmetrics_eof_rules() -> None:
    """Lines after # EOF are errors; a missing # EOF is an error; samples are kept."""
    after = parse_exposition("a 1\n# EOF\nb 2\n", "t")
    assert ["a"] == after.keys
    assert [(3, "content after '# EOF'")] == [
        (e.line, e.reason) for e in after.errors if isinstance(e, ParseError)
    ]
    missing = parse_exposition("a 1\n", "t", openmetrics=True)
    assert ["a"] == missing.keys
    assert ["missing '# EOF' line (truncated?)"] == [
        e.reason for e in missing.errors if isinstance(e, ParseError)
    ]


def test_keys_repeat_verbatim_across_scrapes() -> None:
    """Two scrapes of the same series give identical keys whatever the values."""
    first = parse_exposition('m{a="1",b="2"} 1\n', "t").keys
    second = parse_exposition('m{a="1",b="2"} 7 1700000000000\n', "t").keys
    assert first == second == ['m{a="1",b="2"}']


def test_split_series_rejects_malformed_keys() -> None:
    """A malformed key or a duplicated label raises ParseError with source 'series'."""
    for key in ("1m", 'm{a="1"', 'm{a="1"}x', "m{a=1}", 'm{a="1",a="2"}'):
        with pytest.raises(ParseError) as info:
            split_series(key)
        assert ("series", key) == (info.value.source, info.value.content)


# --- property: what a writer renders parses back ----------------------------------------

_names = st.from_regex(r"[a-zA-Z_:][a-zA-Z0-9_:]{0,20}", fullmatch=True)
_label_names = st.from_regex(r"[a-zA-Z_][a-zA-Z0-9_]{0,12}", fullmatch=True)
_label_values = st.text(st.characters(blacklist_categories=("Cs",)), max_size=20)
_values = st.floats(allow_nan=True, allow_infinity=True, width=64).filter(
    lambda v: not v >= 9.2e18 or math.isinf(v)
)
_series = st.tuples(_names, st.dictionaries(_label_names, _label_values, max_size=4), _values)


@settings(max_examples=200, deadline=None)
@given(st.lists(_series, max_size=20), st.booleans())
def test_rendered_samples_parse_back(
    series: list[tuple[str, dict[str, str], float]], crlf: bool
) -> None:
    """Any valid (name, labels, value) list written as text parses back to the same samples."""
    lines = []
    for name, labels, value in series:
        body = ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items())
        lines.append(f"{name}{{{body}}} {value!r}" if labels else f"{name} {value!r}")
    text = ("\r\n" if crlf else "\n").join(lines)
    exp = parse_exposition(text, "t", openmetrics=False)
    assert [] == exp.errors
    expected = [(n, tuple(sorted(lab.items())), _value(v)) for n, lab, v in series]
    assert expected == [(s.name, s.labels, _value(s.value)) for s in iter_samples(exp)]


# --- every valid line other parsers accept ------------------------------------------------


def test_every_metric_type_of_both_formats_is_a_valid_type_line() -> None:
    """All nine TYPE words parse, gaugehistogram too (gauge is a prefix of it)."""
    kinds = ["counter", "gauge", "gaugehistogram", "histogram", "summary"]
    kinds += ["untyped", "unknown", "info", "stateset"]
    text = "".join(f"# TYPE m{i} {kind}\nm{i} 1\n" for i, kind in enumerate(kinds))
    exp = parse_exposition(text, "t")
    assert [] == exp.errors
    assert {f"m{i}": kind for i, kind in enumerate(kinds)} == exp.types


def test_a_backslash_before_any_other_character_is_kept_as_written() -> None:
    """`\\t`, `\\d`, `\\\\` then `t`: Prometheus and prometheus_client keep `\\x` as written."""
    text = 'm{path="C:\\dir\\tmp",re="\\d+",both="\\\\t"} 1\n'
    exp = parse_exposition(text, "t")
    assert [] == exp.errors
    labels = (("both", "\\t"), ("path", "C:\\dir\\tmp"), ("re", "\\d+"))
    assert ("m", labels) == split_series(exp.keys[0])
    assert _reference(prom_reference(text)) == _ours(exp)


def test_openmetrics_timestamps_with_exponents_are_seconds() -> None:
    """`1.7e9` is a valid OpenMetrics timestamp (Prometheus reads it so; prometheus_client
    misreads it, so the generated differential tests leave exponents out)."""
    exp = parse_exposition("# TYPE a gauge\na 1 1.7e9\na 2 17E8\n# EOF\n", "t")
    assert [] == exp.errors
    assert [1.7e9, 1.7e9] == exp.timestamps


def test_prometheus_text_is_not_taken_for_openmetrics_by_look_alikes() -> None:
    """Timestamps stay milliseconds when ` # {` is inside a label value (no exemplar) and
    when a `*_created` series is a declared gauge (kube-state-metrics' kube_pod_created)."""
    for text in (
        'a{x="p # {q"} 1 1700000000000\nb 2 1700000000000\n',
        '# TYPE kube_pod_created gauge\nkube_pod_created{pod="p"} 1.7e9 1700000000000\n',
    ):
        exp = parse_exposition(text, "t")
        assert [] == exp.errors
        assert {1700000000.0} == set(exp.timestamps), text
        assert _reference(prom_reference(text)) == _with_total(exp, _ours(exp))
    exemplar = parse_exposition('x_total{a="}"} 1 1700000000 # {t="1"} 1\n', "t")
    assert [1700000000.0] == exemplar.timestamps
