"""Property tests: every reader of outside data survives hostile input with the project's errors.

Targets: the exposition parser, the three dump formats (plain, gzip, truncated gzip), the events
JSONL loader, the config loader (YAML file + DETECTOR_* environment) and both rules loaders.
Inputs are real payloads (node_exporter e2e output, generated dcgm pages), the shipped config and
rules, mutated. Contract checked: no exception but the target's own DetectorError, whose message
names the file (and line or field); nothing hangs (a per-example deadline); the parser keeps
the good lines of a payload exactly as prometheus_client reads them alone.
bench/fuzz_bench.py runs the same targets for 100,000+ seeded cases outside pytest (it imports
the differential reference, ``reference_rows`` and ``parsed_rows``, from here).
"""

from __future__ import annotations

import contextlib
import gzip
import json
import math
import re
import tempfile
from collections import Counter
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from detector.config.load import load_config
from detector.config.rules import load_signal_rules, load_xid_catalog
from detector.errors import ConfigError, DumpError, EventsError, ParseError
from detector.ingest.dumps.read import DumpStats, read_dump
from detector.ingest.events import load_events, parse_events
from detector.ingest.kernel_log import parse_kernel_log
from detector.ingest.parse import parse_exposition, split_series
from detector.model import Exposition
from detector.series.index import SeriesIndex

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "tests" / "data" / "exporters"  # the real_data fixture's exporters/
T0 = 1_700_000_000


def fuzz(examples: int = 100) -> settings:
    """Hypothesis settings of these properties: ``examples`` cases, each under a deadline of
    ~1000x its typical runtime (ms): a hang or a quadratic blow-up fails, a busy machine not."""
    return settings(
        max_examples=examples,
        deadline=timedelta(seconds=30),
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


def _dcgm_page(csv: Path, gpus: int) -> list[str]:
    out: list[str] = []
    for f, line in enumerate(csv.read_text().split("\n")):
        if not line.strip() or line.startswith("#"):
            continue
        name, kind, help_text = (part.strip() for part in line.split(",", 2))
        if kind != "label":
            out += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
            out += [
                f'{name}{{gpu="{g}",UUID="GPU-{g:04d}-{f:04d}",Hostname="n1"}} {f * 10 + g}.5'
                for g in range(gpus)
            ]
    return out


# Real lines, split on "\n" only: the e2e payload carries U+0085 inside label values.
NODE = (DATA / "node_exporter" / "e2e-output.txt").read_text().split("\n")
DCGM = _dcgm_page(DATA / "dcgm" / "default-counters.csv", 8) + _dcgm_page(
    DATA / "dcgm" / "dcp-metrics-included.csv", 2
)
CORPORA = {"node_exporter": NODE, "dcgm": DCGM}

NUMBERS = [
    "NaN", "nan", "+Inf", "-Inf", "inf", "Infinity", "-infinity", "iNf", "nan(1)", "1e309",
    "1e-400", "0x10", "1_000", "∞", "", "1.", ".5", "-0", "1e", "9223372036854775794", "1" * 400,
    "٣", "²", "+-1", "1.2.3",
]  # fmt: skip
TOKEN_LINES = [
    "# EOF", "#EOF", "# TYPE x gaugy", "# TYPE", "# HELP", "# UNIT x", "#", "{", "}",
    'x{a="b"} 1 2 3', 'x{a="b"', "x{a=b} 1", 'x{a="\\q"} 1', "x{,} 1", 'x 1 # {a="b"} 1',
    'x{a="1",a="2"} 1', "x_created 1", "x 1 1.5", "x 1 " + "9" * 400, "x \x0c", "9x 1",
]  # fmt: skip
_odd_chars = st.sampled_from(list('\\"{}=,# \t\r\x00\x0b\x0c\u2028\u0085\ufeff\udcffé😀a0_:'))


@st.composite
def mutated_lines(draw: st.DrawFn, lines: list[str], most: int = 80) -> list[str]:
    """A window of ``lines`` with 1-6 mutations: deletions, duplications, swaps, character
    flips, truncated lines, huge lines, NaN/Inf spellings, bad escapes, unbalanced braces,
    stray keyword lines, random lines."""
    size = draw(st.integers(1, most))
    start = draw(st.integers(0, max(0, len(lines) - size)))
    out = list(lines[start : start + size]) or [""]
    for _ in range(draw(st.integers(1, 6))):
        i = draw(st.integers(0, len(out) - 1))
        line = out[i]
        op = draw(st.sampled_from(["del", "dup", "swap", "flip", "cut", "huge", "num", "escape",
                                   "brace", "token", "random"]))  # fmt: skip
        at = draw(st.integers(0, len(line)))
        if op == "del" and len(out) > 1:
            del out[i]
        elif op == "dup":
            out.insert(i, line)
        elif op == "swap":
            j = draw(st.integers(0, len(out) - 1))
            out[i], out[j] = out[j], out[i]
        elif op == "flip":
            out[i] = line[:at] + draw(_odd_chars) + line[at + draw(st.integers(0, 1)) :]
        elif op == "cut":
            out[i] = line[:at]
        elif op == "huge":
            quote = line.find('"') + 1
            out[i] = line[:quote] + "x" * draw(st.sampled_from([10_000, 1_000_000])) + line[quote:]
        elif op == "num":
            out[i] = f"{line.rpartition(' ')[0] or line} {draw(st.sampled_from(NUMBERS))}"
        elif op == "escape":
            quote = line.find('"') + 1
            out[i] = line[:quote] + "\\" + draw(st.sampled_from("qxu0\\\"n'")) + line[quote:]
        elif op == "brace":
            brace = draw(st.sampled_from("{}"))
            out[i] = line.replace(brace, "", 1) if brace in line else line + brace
        elif op == "token":
            out.insert(i, draw(st.sampled_from(TOKEN_LINES)))
        else:
            out.insert(i, draw(st.text(max_size=60)))
    return out


def _to_bytes(text: str) -> bytes:
    return text.encode("utf-8", errors="surrogatepass")


def check_exposition(exp: Exposition) -> None:
    """Invariants of any parse result: aligned columns, only ParseErrors, named lines."""
    assert len(exp.keys) == len(exp.values) == len(exp.timestamps)
    assert all(isinstance(e, ParseError) for e in exp.errors)
    lines = [e.line for e in exp.errors if isinstance(e, ParseError)]
    assert sorted(lines) == lines
    assert all(1 <= n <= exp.lines + 1 for n in lines)
    assert all(t is None or math.isfinite(t) for t in exp.timestamps)
    for key in exp.keys:
        # a label given twice passes the line grammar; the series index refuses it by this error
        with contextlib.suppress(ParseError):
            split_series(key)


# --- the exposition parser -----------------------------------------------------------------


@fuzz()
@given(
    st.one_of(st.text(max_size=2000), st.binary(max_size=2000)),
    st.sampled_from([None, True, False]),
)
def test_parser_never_raises_on_arbitrary_input(
    data: str | bytes, openmetrics: bool | None
) -> None:
    """Any text or bytes parse without an exception; problems are ParseErrors with a line."""
    check_exposition(parse_exposition(data, "fuzz", openmetrics=openmetrics))


@fuzz(300)
@given(
    st.sampled_from(sorted(CORPORA)).flatmap(lambda name: mutated_lines(CORPORA[name])),
    st.sampled_from(["\n", "\r\n"]),
    st.booleans(),
    st.sampled_from([None, True, False]),
)
def test_parser_survives_mutated_real_payloads(
    lines: list[str], newline: str, as_bytes: bool, openmetrics: bool | None
) -> None:
    """Mutated node_exporter and dcgm pages parse without an exception, as text or bytes."""
    text = newline.join(lines)
    data: str | bytes = _to_bytes(text) if as_bytes else text
    check_exposition(parse_exposition(data, "fuzz", openmetrics=openmetrics))


@fuzz()
@given(st.sampled_from(sorted(CORPORA)).flatmap(lambda n: mutated_lines(CORPORA[n])), st.data())
def test_truncated_and_byte_flipped_payloads_parse(lines: list[str], data: st.DataObject) -> None:
    """A payload cut anywhere, with raw bytes flipped (invalid UTF-8), still parses."""
    raw = bytearray(_to_bytes("\n".join(lines)))
    del raw[data.draw(st.integers(0, len(raw))) :]
    for _ in range(data.draw(st.integers(0, 3))):
        if raw:
            raw[data.draw(st.integers(0, len(raw) - 1))] = data.draw(st.integers(0, 255))
    check_exposition(parse_exposition(bytes(raw), "fuzz"))


_name = st.from_regex(r"[a-zA-Z_:][a-zA-Z0-9_:]{0,15}", fullmatch=True)
_bad_lines = st.one_of(
    st.sampled_from(
        [
            "9bad 1",
            'x{a="b} 1',
            "x one",
            "x",
            "x 1 2 3",
            "# TYPE x gaugy",
            "x{a=b} 1",
            "{} 1",
            'x{a="b"}} 1',
            "x 1 12.5",
        ]
    ),
    st.builds(lambda n, t: f"{n}{{{t} 1", _name, st.text("ab=, ", max_size=10)),  # no brace
    st.builds(lambda n: f"1{n} 1", _name),  # a name starting with a digit
    st.builds(lambda n, w: f"{n} {w}", _name, st.sampled_from(["one", "NaNa", "0x1", "1e"])),
)


def reference_rows(text: str) -> Counter[tuple[Any, ...]]:
    """Sample rows of ``text`` as prometheus_client parses it (the differential reference)."""
    rows: Counter[tuple[Any, ...]] = Counter()
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            value = "nan" if math.isnan(s.value) else repr(float(s.value))
            ts = None if s.timestamp is None else float(s.timestamp)
            rows[(s.name, tuple(sorted(s.labels.items())), value, ts)] += 1
    return rows


def parsed_rows(exp: Exposition) -> Counter[tuple[Any, ...]]:
    """The same rows from our parse, named as prometheus_client names them."""
    rows: Counter[tuple[Any, ...]] = Counter()
    for key, value, ts in zip(exp.keys, exp.values, exp.timestamps, strict=True):
        name, labels = split_series(key)
        if exp.types.get(name) == "counter" and not name.endswith("_total"):
            name += "_total"  # prometheus_client names counter samples *_total
        rows[(name, labels, "nan" if math.isnan(value) else repr(value), ts)] += 1
    return rows


@fuzz(200)
@given(
    st.sampled_from(sorted(CORPORA)),
    st.integers(0, 10_000),
    st.integers(1, 120),
    st.lists(st.tuples(st.integers(0, 200), _bad_lines), min_size=1, max_size=6),
)
def test_good_lines_are_kept_as_the_reference_reads_them_alone(
    corpus: str, start: int, size: int, bad: list[tuple[int, str]]
) -> None:
    """Bad lines among good ones are each one ParseError; the samples of the good lines equal
    prometheus_client's parse of the good lines alone."""
    lines = CORPORA[corpus]
    start %= max(1, len(lines) - size)
    good = [line for line in lines[start : start + size] if line.strip()]
    mixed = list(good)
    for at, line in bad:
        mixed.insert(at % (len(mixed) + 1), line)
    exp = parse_exposition("\n".join(mixed) + "\n", "fuzz")
    assert len(bad) == len(exp.errors)
    assert {line for _, line in bad} == {e.content for e in exp.errors if isinstance(e, ParseError)}
    assert reference_rows("\n".join(good) + "\n") == parsed_rows(exp)


@fuzz()
@given(st.text(max_size=300))
def test_split_series_raises_only_parse_error(key: str) -> None:
    """Any key either splits into a name and sorted labels or raises ParseError naming it."""
    try:
        name, labels = split_series(key)
    except ParseError as exc:
        name, labels, content = "", (), exc.content
    else:
        content = key
    assert key == content
    assert key.startswith(name)
    assert sorted(labels) == list(labels)


# --- dumps ---------------------------------------------------------------------------------


def _samples(lines: list[str]) -> list[tuple[str, dict[str, str], str]]:
    exp = parse_exposition("\n".join(lines) + "\n", "base")
    return [(*split_series(k)[:1], dict(split_series(k)[1]), repr(v)) for k, v in
            zip(exp.keys, exp.values, strict=True)] or [("up", {"job": "x"}, "1.0")]  # fmt: skip


def _dump_text(fmt: str, samples: list[tuple[str, dict[str, str], str]], ticks: int) -> str:
    lines = []
    for tick in range(ticks):
        for name, labels, value in samples:
            if fmt == "openmetrics":
                body = ",".join(f"{k}={json.dumps(v)}" for k, v in labels.items())
                lines.append(f"{name}{{{body}}} {value} {T0 + 30 * tick}")
            elif fmt == "tsdb-dump":
                pairs = {"__name__": name, **labels}
                body = ", ".join(f"{k}={json.dumps(v)}" for k, v in pairs.items())
                lines.append(f"{{{body}}} {value} {(T0 + 30 * tick) * 1000}")
    if fmt != "prometheus-json":
        return "\n".join(lines) + "\n"
    result = [
        {"metric": {"__name__": n, **lab}, "values": [[T0 + 30 * t, v] for t in range(ticks)]}
        for n, lab, v in samples
    ]
    doc = {"status": "success", "data": {"resultType": "matrix", "result": result}}
    return json.dumps(doc).replace("}, {", "},\n{")  # one series a line, for line mutations


@st.composite
def dump_files(draw: st.DrawFn) -> tuple[str, bytes]:
    """(format, file bytes): a real-payload dump, mutated, maybe gzipped (maybe truncated)."""
    fmt = draw(st.sampled_from(["openmetrics", "prometheus-json", "tsdb-dump"]))
    corpus = CORPORA[draw(st.sampled_from(sorted(CORPORA)))]
    start = draw(st.integers(0, len(corpus) - 40))
    text = _dump_text(fmt, _samples(corpus[start : start + 40]), draw(st.integers(1, 3)))
    text = "\n".join(draw(mutated_lines(text.split("\n"), most=400)))
    data = _to_bytes(text)
    packing = draw(st.sampled_from(["plain", "gzip", "truncated-gzip", "corrupt-gzip"]))
    if packing != "plain":
        data = gzip.compress(data, mtime=0)
        at = draw(st.integers(12, len(data) - 1))
        if packing == "truncated-gzip":
            data = data[:at]
        elif packing == "corrupt-gzip":
            data = data[:at] + bytes([data[at] ^ 0x55]) + data[at + 1 :]
    return fmt, data


@fuzz(200)
@given(dump_files(), st.booleans())
def test_dump_readers_raise_only_dump_error_naming_the_file(
    dump: tuple[str, bytes], cache: bool
) -> None:
    """A mutated dump in any format reads into sorted, finite batches or raises DumpError
    naming the file; a truncated or corrupt gzip is a DumpError too."""
    _, data = dump
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "dump"
        path.write_bytes(data)
        index, last = SeriesIndex(), -math.inf
        try:
            for batch in read_dump(path, index, cache=cache, stats=DumpStats()):
                assert len(batch.times) == len(batch.columns) == len(batch.values)
                if len(batch):
                    assert bool((batch.times[1:] >= batch.times[:-1]).all())
                    assert float(batch.times[0]) >= last
                    assert bool((batch.columns < len(index)).all())
                    last = float(batch.times[-1])
        except DumpError as exc:
            message = str(exc)
        else:
            message = str(path)
        assert str(path) in message
        assert last == -math.inf or math.isfinite(last)


# --- events, config, rules -----------------------------------------------------------------

HOSTILE_JSON: list[Any] = [
    None, True, 0, -1, 10**400, 1e308, float("nan"), float("inf"), "", "NaN", "1e400",
    "x" * 5000, "²", "٣", "2023-02-30T00:00:00Z", "2023-01-01T00:00:00", "1700000000000",
    [], {}, [1, 2], {"a": 1}, "1" * 5000, [[[[[[1]]]]]],
]  # fmt: skip


@st.composite
def json_mutation(draw: st.DrawFn, tree: Any, pool: list[Any]) -> Any:
    """``tree`` with one node (at a random depth) replaced by a hostile value."""
    if not isinstance(tree, dict | list) or not tree or draw(st.integers(0, 6)) == 0:
        return draw(st.sampled_from(pool))
    if isinstance(tree, dict):
        key = draw(st.sampled_from(sorted(tree, key=str)))
        return {**tree, key: draw(json_mutation(tree[key], pool))}
    i = draw(st.integers(0, len(tree) - 1))
    return [*tree[:i], draw(json_mutation(tree[i], pool)), *tree[i + 1 :]]


_event = st.fixed_dictionaries(
    {"time": st.sampled_from([T0, "2023-11-14T22:13:20Z"]), "node": st.just("n1"),
     "xid": st.just(79)},
    optional={"gpu": st.sampled_from(["0", 3, None]), "end": st.just(T0 + 60)},
)  # fmt: skip


@fuzz()
@given(st.lists(_event, min_size=1, max_size=4).flatmap(lambda r: json_mutation(r, HOSTILE_JSON)),
       st.data())  # fmt: skip
def test_events_loader_raises_only_events_error_naming_the_line(
    records: Any, data: st.DataObject
) -> None:
    """Hostile event values and lines give EventsError naming the file and line, or events."""
    rows = records if isinstance(records, list) else [records]
    lines = data.draw(mutated_lines([json.dumps(r) for r in rows]))
    try:
        events = parse_events(lines, "events.jsonl")
    except EventsError as exc:
        events, message = [], str(exc)
    else:
        message = "events.jsonl:1: "
    assert re.match(r"events\.jsonl:\d+: ", message), message
    assert all(math.isfinite(e.time) and e.time >= 0 for e in events)


_XID_TEXT = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=python, GPU has fallen off the bus."
KERNEL_LOG_LINES = [
    f"2026-11-30T13:37:13+0000 gpu-05 kernel: {_XID_TEXT}",
    f"2026-11-30T13:37:13.250000+01:00 gpu-05 kernel: [ 81.5] {_XID_TEXT}",
    f"2026-11-30T13:37:13,000000+00:00 {_XID_TEXT}",
    f'2026-11-30T13:37:13Z {{host="gpu-05"}} {_XID_TEXT}',
    json.dumps(
        {"__REALTIME_TIMESTAMP": "1796045833000000", "_HOSTNAME": "g", "MESSAGE": _XID_TEXT}
    ),
    "__REALTIME_TIMESTAMP=1796045833000000",
    f"MESSAGE={_XID_TEXT}",
    "",
    "2026-11-30T13:00:00+0000 gpu-05 kernel: e1000e: eth0 NIC Link is Up",
    "1796045833.250000 gpu-05 kernel: " + _XID_TEXT,
    json.dumps(
        {"labels": {"host": "gpu-05"}, "line": _XID_TEXT, "timestamp": "2026-11-30T13:37:13Z"}
    ),
]


@fuzz()
@given(st.data())
def test_kernel_log_events_raise_only_events_error(data: st.DataObject) -> None:
    """Mutated kernel log exports (every accepted shape) give events or an EventsError naming
    the file; never another exception, never a time that is not a plausible unix time."""
    lines = data.draw(mutated_lines(KERNEL_LOG_LINES))
    try:
        events = parse_kernel_log(lines, "kern.log", "gpu-05")
    except EventsError as exc:
        events, message = [], str(exc)
    else:
        message = "kern.log"
    assert message.startswith("kern.log"), message
    assert all(0 <= e.time <= 1e11 and e.node and e.xid > 0 for e in events)


def _load_message(
    data: bytes, name: str, load: Callable[[Path], object], error: type[Exception]
) -> tuple[str, str]:
    """Write ``data`` to a temporary file ``name`` and ``load`` it: (the file's path, the
    ``error`` it raised as text, or the path itself when it loaded). Other errors propagate."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / name
        path.write_bytes(data)
        try:
            load(path)
        except error as exc:
            return str(path), str(exc)
        return str(path), str(path)


@fuzz(50)
@given(st.binary(max_size=300), st.sampled_from(["plain", "gzip", "truncated-gzip"]))
def test_events_file_bytes_raise_only_events_error(raw: bytes, packing: str) -> None:
    """Arbitrary bytes in a .gz events file (plain, gzip, truncated gzip) raise EventsError."""
    data = raw if packing == "plain" else gzip.compress(raw, mtime=0)
    if packing == "truncated-gzip":
        data = data[: len(data) // 2]
    path, message = _load_message(data, "events.jsonl.gz", load_events, EventsError)
    assert message.startswith(path)


HOSTILE_YAML = [
    "2023-02-30", "2023-13-01", ".inf", "-.nan", "~", "[", "{", "!!binary xx",
    "!!python/object:os.system x", "&a [*a]", "*undefined", "0x1F", "1_000", "yes", "'",
    '"\\q"', "- - -", "? ", "1e400", "-1", "{a: 1, a: 2}", "[" * 500 + "]" * 500, "\x00",
    "\ufeff", "@", "| \n",
]  # fmt: skip


@st.composite
def yaml_files(draw: st.DrawFn, tree: Any) -> bytes:
    """A YAML document of ``tree``: values swapped for hostile ones, lines mutated, bytes cut."""
    for _ in range(draw(st.integers(0, 2))):
        tree = draw(json_mutation(tree, [None, 0, -1, "x", [1, {"a": "b"}], 1e400]))
    lines = yaml.safe_dump(tree, sort_keys=False, allow_unicode=True).split("\n")
    for _ in range(draw(st.integers(0, 3))):
        i = draw(st.integers(0, len(lines) - 1))
        key, sep, _ = lines[i].partition(": ")
        if sep:
            lines[i] = f"{key}: {draw(st.sampled_from(HOSTILE_YAML))}"
    if draw(st.booleans()):
        lines = draw(mutated_lines(lines, most=200))
    data = _to_bytes("\n".join(lines))
    if draw(st.integers(0, 4)) == 0:
        data = data[: draw(st.integers(0, len(data)))] + b"\xff\xfe"
    return data


CONFIG = yaml.safe_load((REPO / "deploy" / "config.example.yaml").read_text())
SIGNALS = yaml.safe_load((REPO / "rules" / "signals.yaml").read_text())
XIDS = yaml.safe_load((REPO / "rules" / "xid.yaml").read_text())
_env = st.dictionaries(
    st.sampled_from(["DETECTOR_SCRAPE__TIMEOUT_S", "DETECTOR_ALERTS__THRESHOLD", "DETECTOR_MODE",
                     "DETECTOR_SCRAPE", "DETECTOR_SCRAPE__", "DETECTOR_ALERTS__STORM__FRACTION",
                     "DETECTOR_TARGETS__STATIC", "DETECTOR_SCRAPE__TIMEOUT_S__X"]),
    st.sampled_from(HOSTILE_YAML),
    max_size=3,
)  # fmt: skip


def _load_or_config_error(data: bytes, load: Callable[[Path], object], allowed: set[str]) -> None:
    path, message = _load_message(data, "file.yaml", load, ConfigError)
    for line in message.split("\n"):
        assert line.startswith((path, *allowed)), line


@fuzz(150)
@given(yaml_files(CONFIG), _env)
def test_config_loader_raises_only_config_error_naming_the_source(
    data: bytes, env: dict[str, str]
) -> None:
    """A mutated config file with hostile DETECTOR_* variables loads or raises ConfigError
    whose every line names the file or the variable."""
    _load_or_config_error(data, lambda path: load_config(path, env), set(env))


@fuzz(100)
@given(
    st.integers(1, 8).flatmap(lambda n: yaml_files({**SIGNALS, "signals": SIGNALS["signals"][:n]}))
)
def test_signal_rules_loader_raises_only_config_error_naming_the_file(data: bytes) -> None:
    """A mutated rules/signals.yaml loads or raises ConfigError naming the file."""
    _load_or_config_error(data, load_signal_rules, set())


@fuzz(100)
@given(st.integers(1, 8).flatmap(lambda n: yaml_files({**XIDS, "xids": XIDS["xids"][:n]})))
def test_xid_rules_loader_raises_only_config_error_naming_the_file(data: bytes) -> None:
    """A mutated rules/xid.yaml loads or raises ConfigError naming the file."""
    _load_or_config_error(data, load_xid_catalog, set())


# --- the inputs fuzzing found, pinned ---------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "eof", "reason"),
    [
        ("x 1 " + "1" * 400, "", "timestamp out of range"),  # was OverflowError
        ("x 1 1e400", "# EOF\n", "timestamp out of range"),  # was an infinite time
        ("x \x0c", "", "missing value"),  # was IndexError
    ],
)
def test_found_parser_inputs_are_bad_lines(line: str, eof: str, reason: str) -> None:
    """Inputs that crashed the parser (or gave an infinite time) are now named bad lines."""
    exp = parse_exposition(f"{line}\ny 2\n{eof}", "found")
    assert ["y"] == exp.keys
    assert [("found", 1, reason)] == [
        (e.source, e.line, e.reason) for e in exp.errors if isinstance(e, ParseError)
    ]


@pytest.mark.parametrize(
    ("fmt", "text", "bad"),
    [
        ("tsdb-dump", '{__name__="x"} 1 ' + "9" * 400 + '\n{__name__="y"} 2 1700000000000\n', 1),
        (
            "json",
            '{"data": {"resultType": "matrix", "result": [{"metric": {"__name__": "x"}, '
            '"values": [[1' + "0" * 400 + ', "1"], [NaN, "1"], "12", [1700000000, "2"]]}]}}',
            3,
        ),
    ],
)
def test_found_dump_inputs_are_bad_points(fmt: str, text: str, bad: int, tmp_path: Path) -> None:
    """Timestamps past int64/float range, NaN times and non-pair points are skipped bad points
    (they raised OverflowError, or sorted NaN times among real ones)."""
    path = tmp_path / f"dump.{fmt}"
    path.write_text(text)
    stats = DumpStats()
    batches = list(read_dump(path, SeriesIndex(), cache=False, stats=stats))
    assert [1_700_000_000.0] == [t for b in batches for t in b.times.tolist()]
    assert bad == stats.bad_lines


@pytest.mark.parametrize(
    "line",
    [
        '{"time": 1' + "0" * 400 + ', "node": "a", "xid": 79}',  # OverflowError
        '{"time": 1, "node": "a", "xid": "²"}',  # ValueError from int()
        '{"time": 1, "node": "a", "xid": 1' + "0" * 5000 + "}",  # ValueError: 4300 digits
        "[" * 100_000,  # RecursionError
    ],
)
def test_found_event_lines_raise_events_error(line: str) -> None:
    """Event lines that escaped as raw exceptions are EventsErrors naming file and line."""
    with pytest.raises(EventsError, match=r"^ev\.jsonl:2: "):
        parse_events(['{"time": 1, "node": "a", "xid": 79}', line], "ev.jsonl")


@pytest.mark.parametrize(
    ("loader", "text", "where"),
    [
        (load_signal_rules, b"version: 1\nsignals: \xff\n", "not UTF-8"),
        (
            load_signal_rules,
            b"version: 2023-02-30\nsignals: []\n",
            ":1:10: invalid YAML: invalid date",
        ),
        (load_xid_catalog, b"xids: " + b"[" * 600, "nested too deeply"),
        (
            lambda p: load_config(p, {}),
            b"scrape:\n  timeout_s: 2023-02-30\n",
            ":2:14: invalid YAML",
        ),
        (lambda p: load_config(p, {}), b"a: " + b"[" * 600, "nested too deeply"),
    ],
)
def test_found_yaml_inputs_raise_config_error(
    loader: Callable[[Path], object], text: bytes, where: str, tmp_path: Path
) -> None:
    """Bad UTF-8, impossible dates and deep nesting in config/rules files are ConfigErrors."""
    path = tmp_path / "file.yaml"
    path.write_bytes(text)
    with pytest.raises(ConfigError) as caught:
        loader(path)
    assert str(caught.value).startswith(str(path))
    assert where in str(caught.value)


def test_impossible_date_in_environment_is_named_by_its_variable() -> None:
    """DETECTOR_X=2023-02-30 is kept as text, so validation names the variable."""
    with pytest.raises(ConfigError, match=r"^DETECTOR_SCRAPE__TIMEOUT_S: scrape\.timeout_s: "):
        load_config(None, {"DETECTOR_SCRAPE__TIMEOUT_S": "2023-02-30"})
