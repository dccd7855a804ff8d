"""dumps_fast: blocks of plain sample lines read without the parser, sample for sample as the
parser reads them; anything else left to the parser."""

from __future__ import annotations

import contextlib
import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from detector.ingest.dumps import formats as dumps_formats
from detector.ingest.dumps.fast import _decimal, sample_fields
from detector.ingest.dumps.formats import FileReport, SeriesTable, read_openmetrics, read_tsdb_dump
from detector.ingest.dumps.read import open_dump
from detector.ingest.parse import NUMBER_PATTERN, SECONDS_PATTERN
from detector.sim import Scenario, write_dump

T0 = 1_700_000_000


@contextlib.contextmanager
def readers_as_before() -> Iterator[None]:
    """The dump readers as they were before dumps_fast: every block whole, by the format's
    own reader (bench/dump_bench.py measures against it too)."""
    with (
        mock.patch.object(dumps_formats, "sample_fields", return_value=None),
        mock.patch.object(dumps_formats, "_segments", lambda block, first: iter([(block, first)])),
    ):
        yield


def _read(block: bytes, *, fast: bool, tsdb: bool = False) -> dict[str, Any]:
    """What read_openmetrics (or read_tsdb_dump) yields for ``block`` (ids resolved to
    series), with the fast path or with the format's own reader alone, and what it reported."""
    with readers_as_before() if not fast else contextlib.nullcontext():
        report, table = FileReport(Path("dump.om"), "openmetrics"), SeriesTable()
        reader = read_tsdb_dump if tsdb else read_openmetrics
        chunks = list(reader(io.BytesIO(block), report, table))
    ids = np.concatenate([c.ids for c in chunks]) if chunks else np.zeros(0, dtype=np.int32)
    return {
        "series": [table.series[i] for i in ids.tolist()],
        "times": np.concatenate([c.times for c in chunks]).tolist() if chunks else [],
        "values": np.concatenate([c.values for c in chunks]).tobytes() if chunks else b"",
        "samples": report.samples,
        "bad": report.bad,
        "errors": report.errors,
    }


def _same_either_way(block: bytes, *, tsdb: bool = False) -> dict[str, Any]:
    fast = _read(block, fast=True, tsdb=tsdb)
    assert fast == _read(block, fast=False, tsdb=tsdb)
    return fast


def tsdb_line(key: str, value: str, stamp: str) -> str:
    """``name{a="b"}`` as promtool tsdb dump writes it: ``{__name__="name", a="b"}``."""
    brace = key.find("{")
    name, labels = (key, "") if brace < 0 else (key[:brace], key[brace + 1 : -1])
    inner = f'__name__="{name}"' + (", " + labels.replace('",', '", ') if labels else "")
    return f"{{{inner}}} {value} {stamp}\n"


def _real_sample_lines(real_data: Path) -> list[str]:
    """node_exporter's end-to-end fixture, its comments and its 3 lines with UTF-8 label
    values left out (a block with those goes to the parser), a timestamp on each line."""
    text = (real_data / "exporters/node_exporter/e2e-output.txt").read_text()
    lines = [line for line in text.split("\n") if line and not line.startswith("#")]
    return [f"{line} {T0 + 15 * (i % 7)}" for i, line in enumerate(lines) if line.isascii()]


def test_real_node_exporter_lines_read_as_the_parser_reads_them(
    real_data: Path,
) -> None:
    """Every label shape of the real fixture (escapes, le="+Inf", empty values, NaN): the
    fast path takes the block and yields the parser's samples, value for value."""
    block = ("\n".join(_real_sample_lines(real_data)) + "\n").encode()
    assert sample_fields(block) is not None
    out = _same_either_way(block)
    assert out["samples"] == len(_real_sample_lines(real_data)) > 1000
    assert out["bad"] == 0


def test_a_block_with_comments_or_a_bad_line_goes_to_the_parser(
    real_data: Path,
) -> None:
    """A TYPE line, an exemplar, CRLF, a blank line, a line without timestamp, a tsdb-style key,
    a bad value or a time past float range: the parser reads the block and names the line."""
    lines = _real_sample_lines(real_data)[:50]
    good = "\n".join(lines) + "\n"
    cases = {
        "# TYPE node_load1 gauge\n": 0,
        'node_load1 1 1700000000 # {trace_id="a"} 1\n': 0,
        "node_load1 1 1700000000\r\n": 0,
        "\n": 0,
        "node_load1 1\n": 1,
        '{__name__="node_load1"} 1 1700000000\n': 1,
        "node_load1 1.2.3 1700000000\n": 1,
        "node_load1 1 1e999\n": 1,
        "node_load1  1 1700000000\n": 0,
        'node_load1{a="\u00e9"} 1 1700000000\n': 0,
    }
    for extra, bad in cases.items():
        block = (good + extra + good).encode()
        out = _same_either_way(block)
        assert out["bad"] == bad, extra


_NUMBERS = st.one_of(
    st.from_regex(r"\A[-+]?(\d{1,6}(\.\d{0,4})?([eE][-+]?\d{1,3})?|\.\d{1,4})\Z"),
    st.sampled_from(
        ["NaN", "nan", "+Inf", "-Inf", "Inf", "inf", "Infinity", "9223372036854775794"]
    ),
    st.text(alphabet="0123456789.eE+-_xNaIf", min_size=1, max_size=6),  # mostly invalid
)
_KEYS = st.sampled_from(
    [
        "up",
        "node_load1",
        'm{gpu="0"}',
        'm{gpu="1"}',  # the same length as the one before: told apart byte for byte
        'DCGM_FI_DEV_GPU_TEMP{gpu="0",Hostname="n1"}',
        'DCGM_FI_DEV_ECC_SBE_VOL_TOTAL{gpu="1"}',
        'node_filesystem_avail_bytes{mountpoint="/a b",fstype="nfs"}',
        'm{note="say \\"hi\\"\\nbye",x=""}',
        'm{a = "b"}',
        "bad-name",
        'm{a="b",a="c"}',
    ]
)
_LINES = st.lists(st.tuples(_KEYS, _NUMBERS, _NUMBERS), min_size=1, max_size=40)


@settings(max_examples=300, deadline=None)
@given(lines=_LINES)
def test_generated_lines_read_the_same_with_and_without_the_fast_path(
    lines: list[tuple[str, str, str]],
) -> None:
    """Keys of every shape, numbers valid and not: the output and the report agree."""
    block = "".join(f"{key} {value} {stamp}\n" for key, value, stamp in lines).encode()
    _same_either_way(block)


def test_the_fast_path_takes_plain_simulated_dump_blocks(tmp_path: Path) -> None:
    """A block of a simulated dump without its TYPE lines is the fast path's: the bulk of a
    real dump is read by it."""
    dump, events = tmp_path / "sim.om.gz", tmp_path / "sim.jsonl"
    write_dump(Scenario(nodes=2, gpus=2, days=0.01, seed=3, failure_count=0), dump, events)
    with open_dump(dump) as fh:
        text = fh.read().decode()
    plain = "".join(line + "\n" for line in text.splitlines() if not line.startswith("#"))
    fields = sample_fields(plain.encode())
    assert fields is not None
    lines = plain.count("\n")
    assert len(fields.run) == len(fields.values) == len(fields.times) == lines > 100
    assert 2 <= len(fields.keys) < lines / 10  # the dump's layout: runs of one series
    assert np.isnan(fields.values).sum() < len(fields.values)


def test_every_number_form_is_read_as_the_parser_reads_it() -> None:
    """Values and timestamps in every form the grammar takes, the DCGM blank sentinel and
    millisecond timestamps included: the fast path takes the block, with the parser's result."""
    values = ["1.", ".5", "+3", "-0", "1e5", "1E-3", "NaN", "+Inf", "-Inf", "00012", "2.5e+2"]
    stamps = ["1700000000", "1700000000.5", "1.7e9", "1700000000000", "+1700000001"]
    keys = ['DCGM_FI_DEV_GPU_TEMP{gpu="0"}', "node_load1", "m:sub_total"]
    lines = [f"{key} {value} {stamp}\n" for key in keys for value in values for stamp in stamps]
    lines += ['DCGM_FI_DEV_GPU_TEMP{gpu="1"} 9223372036854775794 1700000000\n']
    block = "".join(lines).encode()
    assert sample_fields(block) is not None
    out = _same_either_way(block)
    assert (out["samples"], out["bad"]) == (len(lines), 0)
    read = np.frombuffer(out["values"])
    assert np.isnan(read[-1])  # the sentinel of a DCGM series: no data
    assert 1_700_000_000.0 in out["times"]
    assert max(out["times"]) < 2e9  # milliseconds read as milliseconds


@settings(max_examples=2000, deadline=None)
@given(
    text=st.one_of(
        st.from_regex(r"\A[-+]?(\d{1,17}(\.\d{0,17})?|\.\d{1,17})([eE][-+]?\d{1,3})?\Z"),
        st.floats(allow_nan=False, allow_infinity=False).map(repr),
        st.text(alphabet="0123456789.eE+-", min_size=1, max_size=8),
    )
)
def test_a_number_the_numba_pass_reads_is_valid_and_exactly_floats(text: str) -> None:
    """Whatever the numba pass reads itself is a number both grammars take, with float's
    value to the bit (the rest goes to the grammar and float)."""
    data = np.frombuffer(text.encode(), dtype=np.uint8)
    plain, value, whole = _decimal(data, 0, len(data))
    if plain:
        assert NUMBER_PATTERN.fullmatch(text)
        assert SECONDS_PATTERN.fullmatch(text)
        assert np.float64(value).tobytes() == np.float64(float(text)).tobytes()
    assert whole == (plain and text.lstrip("-").isdigit())


def test_real_lines_as_promtool_tsdb_dump_writes_them_read_the_same_either_way(
    real_data: Path,
) -> None:
    """The real fixture's series as tsdb-dump lines (ms timestamps): the fast path takes the
    block, with the tsdb reader's samples; a non-integer or a '+' timestamp, a bad key or a
    bad value send the block back to it."""
    lines = [line.rsplit(" ", 2) for line in _real_sample_lines(real_data)]
    good = "".join(tsdb_line(key, value, f"{stamp}000") for key, value, stamp in lines)
    assert sample_fields(good.encode(), tsdb=True) is not None
    out = _same_either_way(good.encode(), tsdb=True)
    assert (out["samples"], out["bad"]) == (len(lines), 0)
    for extra in (
        '{__name__="m"} 1 1700000000000.5\n',
        '{__name__="m"} 1 +1700000000000\n',
        '{__name__="m"} 1 1.7e12\n',
        '{__name__="m", a="b} 1 1700000000000\n',
        '{__name__="m"} 1x 1700000000000\n',
        'm{a="b"} 1 1700000000000\n',
    ):
        block = (good + extra + good).encode()
        assert sample_fields(block, tsdb=True) is None or extra.startswith('{__name__="m", a')
        _same_either_way(block, tsdb=True)


@settings(max_examples=200, deadline=None)
@given(lines=_LINES)
def test_generated_tsdb_lines_read_the_same_with_and_without_the_fast_path(
    lines: list[tuple[str, str, str]],
) -> None:
    """The generated lines as tsdb-dump lines, timestamps as generated (mostly not whole ms)
    and as whole ms: the output and the report agree."""
    for ms in (False, True):
        block = "".join(
            tsdb_line(key, value, str(T0 * 1000 + i) if ms else stamp)
            for i, (key, value, stamp) in enumerate(lines)
            if key[0].isalpha()
        )
        _same_either_way(block.encode(), tsdb=True)


def test_type_lines_and_bad_lines_amid_samples_keep_their_line_numbers(
    real_data: Path,
) -> None:
    """Runs of samples between a family's HELP/TYPE lines go the fast way, the comments and a
    run holding a bad line to the parser: the same samples, and each bad line named by its
    own line number, as when the parser read the whole block."""
    good = _real_sample_lines(real_data)[:40]
    lines = [
        "# HELP node_load1 1m load average.",
        "# TYPE node_load1 gauge",
        *good[:20],
        "# TYPE node_bogus nonsense",
        *good[20:30],
        "node_load1 1.2.3 1700000000",
        *good[30:],
        "# EOF",
        *good[:5],
    ]
    out = _same_either_way(("\n".join(lines) + "\n").encode())
    assert out["samples"] == 45
    assert out["bad"] == 2
    assert [e.split(":")[1] for e in out["errors"]] == ["23", "34"]
