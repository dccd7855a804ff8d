"""Kernel logs as the failure events of a replay or calibration (``--events``).

The kernel log is where XIDs are first written (``NVRM: Xid (PCI:0000:3b:00): 79, ...``), so an
operator's history of failures usually is a log export, not our events JSONL. ``load_events``
(events.py) hands a file here when it is not JSONL; every Xid/SXid line becomes an XidEvent
(``source="kernel-log"``, or ``"kernel-log-sxid"``) carrying the line's PCI bus id, which
``run_replay`` maps to the GPU through the dump's ``pci_bus_id`` labels (``events.place_events``,
as the live daemon does), so the same failure in the dump's DCGM XID gauge is one episode.

Accepted exports (the node is the line's host name; a format without one takes it from the
file name up to its first ``.``, e.g. ``gpu-05.log``):

- ``journalctl -k -o short-iso`` (or ``short-iso-precise``) and RFC 3339 syslog files
  (rsyslog's file format):
  ``2026-11-30T13:37:13+0000 gpu-05 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=...``
- ``journalctl -k -o json``: one JSON object a line (``__REALTIME_TIMESTAMP``, ``_HOSTNAME``,
  ``MESSAGE``);
- ``journalctl -k -o export``: ``KEY=value`` records separated by blank lines;
- ``dmesg --time-format iso`` (no host name): ``2026-11-30T13:37:13,123456+00:00 NVRM: ...``;
- ``journalctl -k -o short-unix``: ``1796045833.250000 gpu-05 kernel: NVRM: ...``;
- Loki's ``logcli query`` output: ``2026-11-30T13:37:13Z {host="gpu-05", ...} NVRM: ...``,
  or with ``-o jsonl`` (``line``, ``timestamp``, ``labels``); the node from the ``node``,
  ``host``, ``hostname`` or ``instance`` label.

A time must say its UTC offset (as in the events file: local time would shift every failure by
hours). An Xid line whose time cannot be read, e.g. traditional syslog (``Nov 30 13:37:13``,
no year or zone), ``dmesg -T`` or seconds since boot, raises EventsError naming the file and
line and the exports that work. Lines without an Xid are skipped, whatever they are; a file
in which no line has one of the shapes above is refused (it is neither events nor a log).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path

from ..errors import EventsError
from ..model import XidEvent
from .dumps.formats import MS_THRESHOLD
from .kmsg import EXPORT_FIELD, KernelXid, parse_xid_line

SOURCE = "kernel-log"
_UNIX = re.compile(r"^(?P<ts>\d{9,11}(?:\.\d+)?)\s+(?P<rest>.*)$")  # journalctl -o short-unix
_ISO = re.compile(
    r"^(?P<ts>\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?P<zone>Z|[+-]\d{2}:?\d{2})?)"
    r"\s+(?P<rest>.*)$"
)
_HOST = re.compile(r"^(?P<host>\S+)\s+kernel(?:\[\d+\])?:\s")  # "gpu-05 kernel: ..."
_LOKI = re.compile(r"^\{(?P<labels>[^}]*)\}\s")
_LOKI_LABEL = re.compile(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"')
_LOKI_NODE = ("node", "host", "hostname", "instance")
_UNTIMED = (  # shapes of logs whose lines do not carry a usable time
    (re.compile(r"^[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d "), "syslog without year or zone"),
    (re.compile(r"^\[[A-Z][a-z]{2} [A-Z][a-z]{2} "), "dmesg -T (local time, no zone)"),
    (re.compile(r"^\[\s*\d+\.\d+\]"), "dmesg (seconds since boot)"),
    (re.compile(r"^\d+,\d+,\d+,[^;]*;"), "/dev/kmsg records (microseconds since boot)"),
)
_EXPORTS = (
    "export it with `journalctl -k -o short-iso` (or -o json), `dmesg --time-format iso`, or "
    "write events JSONL"
)


def _iso_seconds(text: str, where: str) -> float:
    try:
        parsed = datetime.fromisoformat(text)  # 3.11: ',' decimals, 'Z', +0100 and +01:00
        seconds = parsed.timestamp()
    except (ValueError, OverflowError):
        raise EventsError(f"{where}: unreadable time {text!r}; {_EXPORTS}") from None
    if parsed.tzinfo is None:
        raise EventsError(f"{where}: the time {text!r} has no UTC offset; {_EXPORTS}")
    return _checked(seconds, text, where)


def _checked(seconds: float, text: str, where: str) -> float:
    if not 0.0 <= seconds <= MS_THRESHOLD:  # beyond it a time is milliseconds, not seconds
        raise EventsError(f"{where}: the time {text!r} is not a plausible unix time")
    return seconds


def _event(xid: KernelXid, seconds: float, node: str, where: str) -> XidEvent:
    if not node:
        raise EventsError(f"{where}: an Xid line names no host and the file name none")
    return XidEvent(
        seconds,
        node,
        None,
        xid.xid,
        source=f"{SOURCE}-sxid" if xid.sxid else SOURCE,
        pci=None if xid.sxid else xid.pci,
        message=xid.message,
    )


def _xid_in(text: str) -> KernelXid | None:
    """The Xid/SXid of a line; most of a log's lines have none, found without a regex."""
    return parse_xid_line(text) if "Xid" in text else None


def _text_line(line: str, file_node: str, where: str) -> tuple[bool, XidEvent | None]:
    """(whether the line has a known timestamped shape, its event or None)."""
    unix = _UNIX.match(line)
    if unix is not None:  # seconds since the epoch: UTC by definition
        xid = _xid_in(unix["rest"])
        if xid is None:
            return True, None
        host = _HOST.match(unix["rest"])
        node = host["host"] if host is not None else file_node
        return True, _event(xid, _checked(float(unix["ts"]), unix["ts"], where), node, where)
    match = _ISO.match(line)
    if match is None:
        if _xid_in(line) is not None:
            shape = next((name for pattern, name in _UNTIMED if pattern.match(line)), "")
            said = f" ({shape})" if shape else ""
            raise EventsError(f"{where}: an Xid line without a readable time{said}; {_EXPORTS}")
        return False, None
    rest, node = match["rest"], file_node
    xid = _xid_in(rest)
    if xid is None:
        return True, None
    host = _HOST.match(rest)
    loki = _LOKI.match(rest)
    if host is not None:
        node = host["host"]
    elif loki is not None:
        node = _loki_node(dict(_LOKI_LABEL.findall(loki["labels"])), file_node)
    if match["zone"] is None:
        raise EventsError(f"{where}: the time {match['ts']!r} has no UTC offset; {_EXPORTS}")
    return True, _event(xid, _iso_seconds(match["ts"], where), node, where)


def is_log_record(record: dict[str, object]) -> bool:
    """Whether a JSON object is a log entry: journalctl's (``MESSAGE``) or Loki's
    (``logcli -o jsonl``: ``line``, ``timestamp``, ``labels``)."""
    return "MESSAGE" in record or ("line" in record and "timestamp" in record)


def _loki_record(record: dict[str, object], file_node: str, where: str) -> XidEvent | None:
    line, stamp = record.get("line"), record.get("timestamp")
    xid = _xid_in(line) if isinstance(line, str) else None
    if xid is None:
        return None
    labels = record.get("labels")
    node = _loki_node(labels if isinstance(labels, dict) else {}, file_node)
    return _event(xid, _iso_seconds(str(stamp), where), node, where)


def _loki_node(labels: dict[str, object], file_node: str) -> str:
    """A Loki stream's node: its first of ``_LOKI_NODE`` labels (``instance`` without its
    port), else the file's."""
    named = next((str(labels[k]) for k in _LOKI_NODE if labels.get(k)), "")
    return named.rsplit(":", 1)[0] if named.count(":") == 1 else named or file_node


def _journal_record(fields: dict[str, str], file_node: str, where: str) -> XidEvent | None:
    message = fields.get("MESSAGE")
    xid = _xid_in(message) if isinstance(message, str) else None
    if xid is None:
        return None
    usec = str(fields.get("__REALTIME_TIMESTAMP", ""))
    if not (usec.isascii() and usec.isdigit() and len(usec) <= 18):
        raise EventsError(f"{where}: an Xid record without __REALTIME_TIMESTAMP; {_EXPORTS}")
    node = str(fields.get("_HOSTNAME") or file_node)
    return _event(xid, _checked(int(usec) / 1e6, usec, where), node, where)


def parse_kernel_log(lines: Iterable[str], source: str, file_node: str = "") -> list[XidEvent]:
    """The Xid events of a kernel log export (module docstring); ``source`` names it in
    errors, ``file_node`` is the node of lines that name no host."""
    events: list[XidEvent] = []
    shaped = False  # a line of a known shape seen (else the file is no log)
    record: dict[str, str] = {}  # the journal export record being read, from record_line
    record_line = 0

    def journal(fields: dict[str, str], where: str) -> None:
        nonlocal shaped
        shaped = shaped or "MESSAGE" in fields
        found = _journal_record(fields, file_node, where)
        events.extend([found] if found else [])

    for number, raw in enumerate(lines, start=1):
        line = raw.rstrip("\r\n")
        where = f"{source}:{number}"
        if line.startswith("{"):  # journalctl -o json
            try:
                fields = json.loads(line)
            except (ValueError, RecursionError):
                continue
            if isinstance(fields, dict) and "MESSAGE" in fields:
                journal(fields, where)
            elif isinstance(fields, dict) and is_log_record(fields):  # logcli -o jsonl
                shaped = True
                found = _loki_record(fields, file_node, where)
                events.extend([found] if found else [])
            continue
        field = EXPORT_FIELD.match(line)
        if field is not None:  # journalctl -o export: a record's KEY=value lines
            record.setdefault(field["key"], field["value"])
            record_line = record_line or number
            continue
        text = line.strip()
        if not text:  # the end of an export record
            if record:
                journal(record, f"{source}:{record_line}")
            record, record_line = {}, 0
            continue
        known, found = _text_line(text, file_node, where)
        shaped = shaped or known
        events.extend([found] if found else [])
    if record:
        journal(record, f"{source}:{record_line}")
    if not shaped:
        raise EventsError(
            f"{source}: neither events JSONL nor a kernel log with timestamps; {_EXPORTS}"
        )
    events.sort(key=lambda event: event.time)
    return events


def node_of_file(path: Path) -> str:
    """The node a log file without host names is about: its name up to the first '.'."""
    return path.name.split(".", 1)[0]
