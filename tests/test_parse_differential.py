"""ingest/parse.py against prometheus_client's two parsers on GENERATED exposition.

The strategies below write valid exposition of every metric type of both formats (Prometheus
text: counter, gauge, histogram, summary, untyped; OpenMetrics: counter, gauge, histogram,
gaugehistogram, summary, info, stateset, unknown) with the syntax real writers vary: HELP with
escapes, UNIT, label values with every escape (a backslash before any character), empty label
sets ``{}``, trailing commas, blanks and tabs, CRLF, NaN/Inf in every spelling, integer and
exponent values, timestamps (integer ms in text, seconds in OpenMetrics), exemplars. The
reference parser must accept each document (the strategies are a spec of valid input), and
then ours must accept it too, with exactly the reference's samples.
"""

from __future__ import annotations

import math
from collections import Counter
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as om_reference,
)
from prometheus_client.parser import text_string_to_metric_families as prom_reference
from prometheus_client.samples import Timestamp

from detector.ingest.parse import iter_samples, parse_exposition

Row = tuple[str, tuple[tuple[str, str], ...], str, str | None]

TEXT_TYPES = ("counter", "gauge", "histogram", "summary", "untyped")
OM_TYPES = ("counter", "gauge", "histogram", "gaugehistogram", "summary", "info", "stateset")
OM_TYPES += ("unknown",)
NAN_SPELLINGS = ("NaN", "nan", "NAN", "Nan")
INF_SPELLINGS = ("+Inf", "Inf", "inf", "+inf", "INF", "Infinity", "+Infinity", "infinity")


def _value_key(value: float) -> str:
    """Comparable text of a value: NaN equals NaN, ints and floats alike."""
    return "nan" if math.isnan(value) else repr(float(value))


def _time_key(stamp: object) -> str | None:
    """Exact decimal text of a timestamp (prometheus_client's OpenMetrics Timestamp keeps
    seconds and nanoseconds apart; its float() rounds twice)."""
    if stamp is None:
        return None
    if isinstance(stamp, Timestamp):
        exact = Decimal(stamp.sec) + Decimal(stamp.nsec).scaleb(-9)
        return repr(float(exact))
    assert isinstance(stamp, int | float)
    return repr(float(stamp))


def _theirs(families: object) -> Counter[Row]:
    rows: Counter[Row] = Counter()
    for family in families:  # type: ignore[attr-defined]
        for s in family.samples:
            labels = tuple(sorted(s.labels.items()))
            rows[(s.name, labels, _value_key(s.value), _time_key(s.timestamp))] += 1
    return rows


def _ours(text: str, *, counters_total: bool) -> Counter[Row]:
    """Our samples; with ``counters_total``, samples of a text-format counter family renamed
    ``*_total`` as prometheus_client's text parser renames them."""
    exp = parse_exposition(text, "generated")
    assert [] == [str(e) for e in exp.errors]
    rows: Counter[Row] = Counter()
    for s in iter_samples(exp):
        name = s.name
        if counters_total and exp.types.get(name) == "counter" and not name.endswith("_total"):
            name += "_total"
        stamp = None if s.timestamp is None else repr(s.timestamp)
        rows[(name, s.labels, _value_key(s.value), stamp)] += 1
    return rows


# --- pieces ------------------------------------------------------------------------------

_plain = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters='"\\\n'), max_size=6
)
# a backslash before any character: \\ \" \n unescaped, every other pair kept as written
_escape = st.sampled_from(["\\\\", '\\"', "\\n"]) | st.characters(
    blacklist_categories=("Cs",), blacklist_characters="\n"
).map(lambda c: "\\" + c)
_label_value = st.lists(st.one_of(_plain, _escape), max_size=4).map("".join)
# never le, quantile or a family name (those end in _f<n>)
_label_name = st.from_regex(r"k[a-zA-Z0-9]{0,6}", fullmatch=True)
_help = st.lists(
    st.one_of(st.text(st.characters(blacklist_categories=("Cs", "Cc")), max_size=8), _escape),
    min_size=1,
    max_size=3,
).map("".join)
_finite = st.floats(allow_nan=False, allow_infinity=False, width=64).filter(
    lambda v: abs(v) < 9.2e18  # above: dcgm's blank sentinel range (not for these names)
)
_count = st.integers(min_value=0, max_value=10**6)


@st.composite
def _number(draw: st.DrawFn, value: float) -> str:
    """``value`` as any valid spelling of it."""
    if math.isnan(value):
        return draw(st.sampled_from(NAN_SPELLINGS))
    if math.isinf(value):
        spelled = draw(st.sampled_from(INF_SPELLINGS))
        return spelled if value > 0 else "-" + spelled.lstrip("+")
    styles = [repr(value), f"{value:e}".replace("e+0", "e+").replace("e-0", "e-")]
    styles.append(repr(value).upper())
    if value.is_integer():
        styles += [str(int(value)), f"{int(value)}.", f"{int(value)}.0"]
    spelled = draw(st.sampled_from(styles))
    return spelled if float(spelled) == value else repr(value)


_gauge_value = st.one_of(_finite, st.sampled_from([math.nan, math.inf, -math.inf]))


class _Layout:
    """How one document is spelled: format, blanks, timestamps."""

    def __init__(self, draw: st.DrawFn, openmetrics: bool) -> None:
        self.openmetrics = openmetrics
        self.draw = draw
        self.tolerant = not openmetrics and draw(st.booleans())  # odd blanks, text only
        self.trailing_comma = not openmetrics and draw(st.booleans())
        self.crlf = not openmetrics and draw(st.booleans())
        self.stamped = draw(st.booleans())

    def blank(self) -> str:
        if not self.tolerant:
            return " "
        return self.draw(st.sampled_from([" ", "\t", "  ", " \t"]))

    def pad(self) -> str:
        return self.draw(st.sampled_from(["", " ", "\t"])) if self.tolerant else ""

    def timestamp(self) -> str:
        """One family's timestamp (every sample of it gets the same: OpenMetrics wants the
        samples of a group in time order)."""
        if self.openmetrics:
            seconds = self.draw(st.integers(min_value=0, max_value=4 * 10**9))
            fraction = self.draw(st.sampled_from(["", ".5", ".123", ".000000001", "."]))
            # prometheus_client misreads exponents (1.7e9 is read as 1 s): test_parse.py
            # covers them against Prometheus' reading
            return f"{seconds}{fraction}"
        ms = self.draw(st.integers(min_value=-(10**13), max_value=10**13))
        return self.draw(st.sampled_from([str(ms), f"+{ms}" if ms >= 0 else str(ms)]))

    def series(self, name: str, labels: list[tuple[str, str]]) -> str:
        if not labels:
            return name + self.draw(st.sampled_from(["", "{}"]))
        pad = self.pad
        body = ",".join(f'{pad()}{k}{pad()}={pad()}"{v}"{pad()}' for k, v in labels)
        if self.trailing_comma and self.draw(st.booleans()):
            body += ","
        return f"{name}{{{body}}}"

    def sample(self, name: str, labels: list[tuple[str, str]], value: str, stamp: str) -> str:
        line = f"{self.pad()}{self.series(name, labels)}{self.blank()}{value}"
        if stamp:
            line += f"{self.blank()}{stamp}"
        return line + self.pad()


@st.composite
def _family(draw: st.DrawFn, layout: _Layout, kind: str, number: int) -> list[str]:
    """The lines of one family of ``kind`` (metadata, then its samples)."""
    om = layout.openmetrics
    unit = ""
    if om and kind not in ("info", "stateset") and draw(st.booleans()):
        unit = draw(st.sampled_from(["seconds", "bytes", "celsius"]))
    colons = "" if kind == "stateset" else ":"  # a stateset's name is a label name too
    base = draw(st.from_regex(rf"[a-z][a-z0-9_{colons}]{{0,8}}", fullmatch=True))
    name = f"{base}_f{number}" + (f"_{unit}" if unit else "")
    if kind == "counter" and not om and draw(st.booleans()):
        name += "_total"  # node-exporter's way; dcgm-exporter's: no suffix
    meta: list[str] = []
    if draw(st.booleans()):
        meta.append(f"# HELP {name} {draw(_help)}")
    if kind != "untyped" or draw(st.booleans()):
        meta.append(f"# TYPE {name} {kind}")
    if unit:
        meta.append(f"# UNIT {name} {unit}")
    meta = draw(st.permutations(meta)) if om else meta
    stamp = layout.timestamp() if layout.stamped else ""
    groups = draw(
        st.lists(
            st.lists(st.tuples(_label_name, _label_value), max_size=3, unique_by=lambda kv: kv[0]),
            min_size=1,
            max_size=3,
            unique_by=lambda labels: tuple(sorted(k for k, _ in labels)),
        )
    )
    lines = list(meta)
    for labels in groups:
        lines += draw(_group(layout, kind, name, labels, stamp))
    return lines


@st.composite
def _group(
    draw: st.DrawFn,
    layout: _Layout,
    kind: str,
    name: str,
    labels: list[tuple[str, str]],
    stamp: str,
) -> list[str]:
    """The samples of one label set of a family."""
    om = layout.openmetrics

    def line(suffix: str, value: str, extra: list[tuple[str, str]] | None = None) -> str:
        return layout.sample(name + suffix, labels + (extra or []), value, stamp)

    def number(value: float) -> str:
        return draw(_number(value))

    if kind == "counter":
        total = float(draw(_count)) if om else draw(_gauge_value)
        out = line("_total" if om else "", number(total))
        if om and draw(st.booleans()):  # an exemplar
            exemplar = draw(st.lists(st.tuples(_label_name, _plain), max_size=2, unique=True))
            body = ",".join(f'{k}="{v}"' for k, v in dict(exemplar).items())
            out += f" # {{{body}}} {number(draw(_finite))}"
            if draw(st.booleans()):
                out += f" {draw(st.integers(min_value=0, max_value=4 * 10**9))}.25"
        lines = [out]
        if om and draw(st.booleans()):
            lines.append(line("_created", number(float(draw(_count)))))
        return lines
    if kind in ("gauge", "untyped", "unknown"):
        return [line("", number(draw(_gauge_value)))]
    if kind == "info":
        return [line("_info", number(1.0))]
    if kind == "stateset":
        states = draw(st.lists(_plain.filter(lambda s: s.strip() == s), min_size=1, max_size=3))
        return [
            line("", number(float(draw(st.integers(0, 1)))), [(name, state)])
            for state in dict.fromkeys(states)
        ]
    if kind == "summary":
        quantiles = sorted(set(draw(st.lists(st.sampled_from([0.0, 0.5, 0.9, 0.99, 1.0])))))
        out = [line("", number(abs(draw(_finite))), [("quantile", repr(q))]) for q in quantiles]
        return [*out, line("_sum", number(abs(draw(_finite)))), line("_count", str(draw(_count)))]
    # histogram, gaugehistogram: cumulative integer buckets ending at +Inf
    bounds = sorted(set(draw(st.lists(st.sampled_from([0.005, 0.1, 1.0, 2.5, 10.0])))))
    counts = sorted(draw(st.lists(_count, min_size=len(bounds) + 1, max_size=len(bounds) + 1)))
    les = [repr(b) for b in bounds] + ["+Inf"]
    out = [line("_bucket", str(c), [("le", le)]) for le, c in zip(les, counts, strict=True)]
    g = "g" if kind == "gaugehistogram" else ""
    return [*out, line(f"_{g}count", str(counts[-1])), line(f"_{g}sum", number(1.5))]


@st.composite
def _document(draw: st.DrawFn, openmetrics: bool) -> str:
    layout = _Layout(draw, openmetrics)
    kinds = draw(st.lists(st.sampled_from(OM_TYPES if openmetrics else TEXT_TYPES), max_size=4))
    lines: list[str] = []
    for number, kind in enumerate(kinds):
        lines += draw(_family(layout, kind, number))
    if openmetrics:
        return "\n".join([*lines, "# EOF"]) + "\n"
    return ("\r\n" if layout.crlf else "\n").join(lines) + draw(st.sampled_from(["", "\n"]))


# --- the differential properties ---------------------------------------------------------


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(_document(openmetrics=False))
def test_text_format_reads_as_prometheus_client(doc: str) -> None:
    """Generated Prometheus text of every type: prometheus_client's samples, exactly."""
    theirs = _theirs(prom_reference(doc))
    assert theirs == _ours(doc, counters_total=True)


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(_document(openmetrics=True))
def test_openmetrics_reads_as_prometheus_client(doc: str) -> None:
    """Generated OpenMetrics of every type: prometheus_client's samples, exactly."""
    theirs = _theirs(om_reference(doc))
    assert theirs == _ours(doc, counters_total=False)
