"""The events file (`--events`): known failures as JSONL, one a line.

Contract (ARCHITECTURE.md)::

    {"time": <unix seconds or RFC3339>, "node": "...", "gpu": "3" | null, "xid": 79,
     "end": <optional>}

Reading is strict about what a line means and tolerant about how it is written:

- blank lines and lines starting with ``#`` are skipped;
- ``time``/``end``: a JSON number (unix seconds), a numeric string, or an RFC 3339 string with
  ``Z`` or an explicit UTC offset. A time without an offset is refused (local time would shift
  every failure by hours and silently ruin the matching); so is a number that looks like
  milliseconds (> 1e11);
- ``gpu``: a string, a non-negative integer (stored as its decimal string), null, or absent;
- ``xid``: a positive integer or a string of digits;
- fields outside the contract (``msg``, ``source``, ...) are ignored, so richer exports load.

The first bad line raises :class:`~detector.errors.EventsError` naming file, line and field.
Events come back sorted by time (stable), with ``source="events-file"``. ``.gz`` files are read
and written transparently. A file that is not JSONL is read as a kernel log export
(kernel_log.py: the Xid lines of ``journalctl -k``, rsyslog, ``dmesg --time-format iso``, Loki).
"""

from __future__ import annotations

import gzip
import io
import itertools
import json
import math
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import IO, Any

from ..errors import EventsError
from ..model import SeriesInfo, XidEvent
from .dumps.formats import MS_THRESHOLD
from .kernel_log import is_log_record, node_of_file, parse_kernel_log
from .kmsg import gpu_names, normalize_pci

SOURCE = "events-file"


class FieldError(ValueError):
    """A field of one line is invalid; turned into EventsError with file and line."""

    def __init__(self, field: str, reason: str) -> None:
        self.field = field
        super().__init__(f"field {field!r}: {reason}" if field else reason)


def open_text(path: Path, *, write: bool) -> IO[str]:
    """Open for text reading or writing; gzip when the name ends in .gz. Caller closes.
    Reading skips a UTF-8 byte-order mark (Windows editors write one)."""
    encoding = "utf-8" if write else "utf-8-sig"
    if path.suffix == ".gz":
        return io.TextIOWrapper(gzip.GzipFile(path, "wb" if write else "rb"), encoding=encoding)
    return open(path, "w" if write else "r", encoding=encoding)


def parse_time(field: str, value: Any) -> float:
    if isinstance(value, bool):  # bool is an int subclass; true is not a time
        raise FieldError(field, f"expected unix seconds or RFC 3339, got {value!r}")
    if isinstance(value, int | float):
        try:
            seconds = float(value)
        except OverflowError:  # a JSON integer with hundreds of digits
            raise FieldError(field, "not a valid unix time: a number past float range") from None
    elif isinstance(value, str):
        text = value.strip()
        try:
            seconds = float(text)
        except ValueError:
            seconds = _parse_rfc3339(field, text)
    else:
        raise FieldError(field, f"expected unix seconds or RFC 3339, got {value!r}")
    if not math.isfinite(seconds) or seconds < 0:
        raise FieldError(field, f"not a valid unix time: {value!r}")
    if seconds > MS_THRESHOLD:  # unix seconds stay below it until the year 5138
        raise FieldError(field, f"{value!r} looks like milliseconds; write unix seconds")
    return seconds


def _parse_rfc3339(field: str, text: str) -> float:
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        raise FieldError(field, f"not unix seconds nor RFC 3339: {text!r}") from None
    if parsed.tzinfo is None:
        raise FieldError(field, f"{text!r} has no UTC offset; add 'Z' or e.g. '+02:00'")
    return parsed.timestamp()


def _parse_gpu(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        raise FieldError("gpu", f"expected a GPU index or null, got {value!r}")
    if isinstance(value, int):
        if value < 0:
            raise FieldError("gpu", f"negative GPU index {value}")
        return str(value)
    if isinstance(value, str):
        return value.strip() or None
    raise FieldError("gpu", f"expected a GPU index or null, got {value!r}")


def _parse_xid(value: Any) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    text = value.strip() if isinstance(value, str) else ""
    # isdigit() alone accepts '²' and other digits int() refuses; 9 digits is plenty for a code
    if text.isascii() and text.isdigit() and len(text) <= 9 and int(text) > 0:
        return int(text)
    raise FieldError("xid", f"expected a positive integer XID code, got {value!r}")


def json_record(record: Any, required: tuple[str, ...]) -> dict[str, Any]:
    """One JSONL line's value as an object holding every ``required`` key; FieldError naming
    the key (or the line's kind) otherwise. The events and the job-attempts files share it."""
    if not isinstance(record, dict):
        kind = type(record).__name__
        raise FieldError("", f"expected one JSON object per line, got a JSON {kind}")
    for key in required:
        if key not in record:
            raise FieldError(key, "missing")
    return record


def _parse_record(record: Any) -> XidEvent:
    record = json_record(record, ("time", "node", "xid"))
    node = record["node"]
    if not isinstance(node, str) or not node.strip():
        raise FieldError("node", f"expected a non-empty string, got {node!r}")
    time = parse_time("time", record["time"])
    end_raw = record.get("end")
    end = None if end_raw is None else parse_time("end", end_raw)
    if end is not None and end < time:
        raise FieldError("end", f"end {end_raw!r} is before time {record['time']!r}")
    return XidEvent(
        time=time,
        node=node.strip(),
        gpu=_parse_gpu(record.get("gpu")),
        xid=_parse_xid(record["xid"]),
        end=end,
        source=SOURCE,
    )


def parse_events(lines: Iterable[str], source: str) -> list[XidEvent]:
    """Parse JSONL lines (see module docstring); ``source`` names the input in errors."""
    events: list[XidEvent] = []
    for number, line in enumerate(lines, start=1):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        try:
            record = json.loads(text)
        except json.JSONDecodeError as exc:
            raise EventsError(f"{source}:{number}: not valid JSON: {exc.msg}") from None
        except (ValueError, RecursionError) as exc:  # an integer of 4300+ digits; deep nesting
            reason = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
            raise EventsError(f"{source}:{number}: not valid JSON: {reason}") from None
        try:
            events.append(_parse_record(record))
        except FieldError as exc:
            raise EventsError(f"{source}:{number}: {exc}") from None
    events.sort(key=lambda event: event.time)
    return events


def load_events(path: Path) -> list[XidEvent]:
    """Read an events file (``.gz`` allowed); raise EventsError naming file, line and field.
    A file that is not JSONL (its first line that is not blank or a comment is not a JSON
    object, or is a journal entry) is read as a kernel log export (kernel_log.py)."""
    try:
        with open_text(path, write=False) as handle:
            head: list[str] = []
            for line in handle:
                head.append(line)
                text = line.strip()
                if text and not text.startswith("#"):
                    break
            lines = itertools.chain(head, handle)
            meaningful = [x for x in head if x.strip() and not x.strip().startswith("#")]
            if not meaningful or _is_jsonl(meaningful[0]):
                return parse_events(lines, str(path))
            return parse_kernel_log(lines, str(path), node_of_file(path))
    except (OSError, EOFError, UnicodeDecodeError, zlib.error) as exc:  # zlib: corrupt .gz
        reason = getattr(exc, "strerror", None) or exc
        raise EventsError(f"{path}: cannot read events file: {reason}") from None


def _is_jsonl(first: str) -> bool:
    """Whether a file whose first meaningful line is ``first`` is events JSONL: a line that
    starts like JSON and is not a log entry (``journalctl -o json``, ``logcli -o jsonl``)."""
    if not first.lstrip().startswith(("{", "[")):
        return False
    try:
        record = json.loads(first)
    except (ValueError, RecursionError):
        return True  # broken JSONL: parse_events says where
    return not (isinstance(record, dict) and is_log_record(record) and "xid" not in record)


def _event_record(event: XidEvent) -> dict[str, Any]:
    record: dict[str, Any] = {
        "time": event.time,
        "node": event.node,
        "gpu": event.gpu,
        "xid": event.xid,
    }
    if event.end is not None:
        record["end"] = event.end
    return record


def write_events(path: Path, events: Iterable[XidEvent]) -> None:
    """Write events as JSONL in the contract shape (unix seconds); ``.gz`` by suffix.

    ``load_events(path)`` gives the same events back (with ``source="events-file"``).
    """
    with open_text(path, write=True) as handle:
        for event in events:
            handle.write(json.dumps(_event_record(event), separators=(", ", ": ")) + "\n")


def place_events(events: Sequence[XidEvent], infos: Sequence[SeriesInfo]) -> list[XidEvent]:
    """``events`` named as the data names them. A node known only by its short name or in
    another case (a log's ``GPU-05`` for the data's ``gpu-05.cluster.local``, when no other
    node shares it) takes the data's name; a GPU named by its UUID or PCI bus id, or a kernel
    log's PCI bus id, takes the GPU's label, so the failure is one episode with the same XID in
    the dump's DCGM gauge. Names the data does not know are kept."""
    nodes = {info.node for info in infos if info.node}
    short: dict[str, list[str]] = {}  # a host's first DNS label, in lower case (DNS is not
    for known in nodes:  # case-sensitive) -> the data's nodes of that name
        short.setdefault(known.split(".", 1)[0].lower(), []).append(known)
    gpus = gpu_names(infos) if any(ev.pci or ev.gpu for ev in events) else {}
    placed: list[XidEvent] = []
    for ev in events:
        node = ev.node
        if node not in nodes and len(same := short.get(node.split(".", 1)[0].lower(), [])) == 1:
            node = same[0]
        gpu = ev.gpu
        name = ev.pci or ev.gpu
        if name:
            pci = normalize_pci(name) if ":" in name else None
            gpu = (
                gpus.get((node, name))
                or gpus.get((node, name.lower()))
                or (gpus.get((node, pci)) if pci else None)
                or ev.gpu
            )
        placed.append(ev if (node, gpu) == (ev.node, ev.gpu) else replace(ev, node=node, gpu=gpu))
    return placed
