"""The events file loader: the `--events` JSONL contract of ARCHITECTURE.md."""

from __future__ import annotations

import gzip
import json
import re
from datetime import UTC, datetime
from pathlib import Path

import pytest

from detector.errors import EventsError
from detector.ingest.events import load_events, write_events
from detector.model import XidEvent


def _write(path: Path, *lines: str) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_unix_seconds_and_rfc3339_give_the_same_time(tmp_path: Path) -> None:
    """A unix number, a numeric string and RFC 3339 (Z or offset) all read as unix seconds."""
    moment = datetime(2024, 5, 1, 12, 30, tzinfo=UTC).timestamp()
    path = _write(
        tmp_path / "events.jsonl",
        json.dumps({"time": moment, "node": "n1", "gpu": "3", "xid": 79}),
        json.dumps({"time": str(int(moment)), "node": "n2", "gpu": "3", "xid": 79}),
        json.dumps({"time": "2024-05-01T12:30:00Z", "node": "n3", "gpu": "3", "xid": 79}),
        json.dumps({"time": "2024-05-01T14:30:00+02:00", "node": "n4", "gpu": "3", "xid": 79}),
    )
    events = load_events(path)
    assert [moment] * 4 == [event.time for event in events]
    assert [event.node for event in events] == ["n1", "n2", "n3", "n4"]


def test_gpu_int_str_null_and_missing(tmp_path: Path) -> None:
    """gpu may be an int (stored as str), a string, null or absent (None)."""
    path = _write(
        tmp_path / "events.jsonl",
        '{"time": 10, "node": "a", "gpu": 3, "xid": 79}',
        '{"time": 11, "node": "a", "gpu": "5", "xid": 48}',
        '{"time": 12, "node": "a", "gpu": null, "xid": 79}',
        '{"time": 13, "node": "a", "xid": "94"}',
    )
    assert [event.gpu for event in load_events(path)] == ["3", "5", None, None]
    assert [event.xid for event in load_events(path)] == [79, 48, 79, 94]


def test_blank_lines_and_comments_are_skipped(tmp_path: Path) -> None:
    """Blank lines and '#' comment lines carry no event."""
    path = _write(
        tmp_path / "events.jsonl",
        "# failures from the incident tracker",
        "",
        '{"time": 100, "node": "a", "gpu": null, "xid": 79, "end": 160}',
        "   ",
        "  # trailing note",
    )
    expected = [XidEvent(100.0, "a", None, 79, end=160.0, source="events-file")]
    assert expected == load_events(path)


def test_events_come_back_sorted_by_time(tmp_path: Path) -> None:
    """Lines may be in any order; the loader returns events in time order."""
    path = _write(
        tmp_path / "events.jsonl",
        '{"time": 300, "node": "c", "xid": 79}',
        '{"time": 100, "node": "a", "xid": 79}',
        '{"time": 200, "node": "b", "xid": 79}',
    )
    assert [event.node for event in load_events(path)] == ["a", "b", "c"]


@pytest.mark.parametrize(
    ("line", "field"),
    [
        ('{"node": "a", "xid": 79}', "'time'"),
        ('{"time": "yesterday", "node": "a", "xid": 79}', "'time'"),
        ('{"time": "2024-05-01T12:30:00", "node": "a", "xid": 79}', "'time'"),
        ('{"time": 1714566600000, "node": "a", "xid": 79}', "'time'"),
        ('{"time": true, "node": "a", "xid": 79}', "'time'"),
        ('{"time": 10, "node": "", "xid": 79}', "'node'"),
        ('{"time": 10, "node": 7, "xid": 79}', "'node'"),
        ('{"time": 10, "node": "a", "gpu": [3], "xid": 79}', "'gpu'"),
        ('{"time": 10, "node": "a", "gpu": -1, "xid": 79}', "'gpu'"),
        ('{"time": 10, "node": "a", "xid": "seventy-nine"}', "'xid'"),
        ('{"time": 10, "node": "a", "xid": 0}', "'xid'"),
        ('{"time": 10, "node": "a", "xid": 79, "end": 5}', "'end'"),
        ('{"time": 10, "node": "a", "xid": 79, "end": "soon"}', "'end'"),
    ],
)
def test_bad_line_names_file_line_and_field(tmp_path: Path, line: str, field: str) -> None:
    """A bad line raises EventsError with the file, the line number and the field."""
    path = _write(
        tmp_path / "events.jsonl", "# header", '{"time": 1, "node": "ok", "xid": 79}', line
    )
    with pytest.raises(EventsError) as caught:
        load_events(path)
    message = str(caught.value)
    assert message.startswith(f"{path}:3: ")
    assert field in message


def test_invalid_json_and_non_object_lines_are_named(tmp_path: Path) -> None:
    """Broken JSON and a JSON value that is not an object are reported with their line."""
    broken = _write(tmp_path / "broken.jsonl", '{"time": 1, "node": "a", "xid": 79')
    with pytest.raises(EventsError, match=rf"^{re.escape(str(broken))}:1: not valid JSON"):
        load_events(broken)
    array = _write(tmp_path / "array.jsonl", "", "[1, 2]")
    with pytest.raises(EventsError, match=rf"^{re.escape(str(array))}:2: .*JSON object"):
        load_events(array)


def test_missing_file_is_an_events_error(tmp_path: Path) -> None:
    """An unreadable path raises EventsError naming it, not a bare OSError."""
    missing = tmp_path / "nope.jsonl"
    with pytest.raises(EventsError, match=r"nope\.jsonl"):
        load_events(missing)


def test_gzip_round_trip(tmp_path: Path) -> None:
    """write_events then load_events returns the same events, gzip chosen by suffix."""
    events = [
        XidEvent(1714566600.25, "node-07", "3", 79, end=1714566700.5, source="events-file"),
        XidEvent(1714570000.0, "node-11", None, 48, source="events-file"),
    ]
    path = tmp_path / "events.jsonl.gz"
    write_events(path, events)
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        first = json.loads(handle.readline())
    assert {"time", "node", "gpu", "xid", "end"} == set(first)
    assert events == load_events(path)


def test_written_lines_without_end_omit_the_field(tmp_path: Path) -> None:
    """An event with no end is written without an 'end' key (it is optional in the contract)."""
    path = tmp_path / "events.jsonl"
    write_events(path, [XidEvent(5.0, "a", "0", 79, source="kmsg")])
    assert json.loads(path.read_text()) == {"time": 5.0, "node": "a", "gpu": "0", "xid": 79}
