"""Kernel-log XIDs: follow /dev/kmsg (or a log file) and turn NVRM Xid / NVSwitch SXid lines
into ``XidEvent``s on the right node and GPU.

Sources (``KmsgFollower``), chosen by what ``path`` is:
- a character device (``/dev/kmsg``): non-blocking reads, one record per read, each
  ``prio,seq,usec,flags;message`` (continuation lines `` KEY=value`` are ignored). A record
  overwritten before we read it (EPIPE) is skipped, not fatal.
- a regular file (``dmesg`` output, syslog, ``journalctl -k -o short-iso`` or ``-o export``):
  ``tail -f`` semantics: appended lines are read, a partial last line waits for its newline, a
  rotated file (new inode) is finished and the new one read from its start, a truncated file
  is re-read from its start. A missing file is retried at every poll.
By default following starts at the end (history before the daemon started is not news: the
DCGM sticky gauge already carries it as a baseline); ``from_start=True`` reads it all.

Lines (``parse_xid_line``), matched anywhere in the line so every prefix above works::

    NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus.
    NVRM: Xid (PCI:0000:3b:00): 48, pid='<unknown>', name=<unknown>, An uncorrectable ...
    NVRM: Xid (0000:3b:00): 13, Graphics SM Warp Exception on (GPC 0, TPC 1, SM 0): ...
    nvidia-nvswitch0: SXid (PCI:0000:07:00.0): 12028, Non-fatal, Link 45 egress ...

In a journal export only the ``MESSAGE=`` field is read (``SYSLOG_RAW=`` repeats the text).
SXids keep their code and are marked with ``source="kmsg-sxid"`` (their PCI id is an NVSwitch,
not a GPU, so they carry no GPU); Xids get ``source="kmsg"``.

GPU mapping (``KernelXids``): the PCI bus id in the line is matched against the
``pci_bus_id`` context label dcgm-exporter puts on each GPU's series (``00000000:3B:00.0``),
both normalized to ``dddd:bb:dd`` (lower case, 4-digit domain, function dropped). An unknown
bus id leaves ``gpu`` None (a node-level XID). Events are stamped with the caller's clock (the
tick they are merged into); episodes are de-duplicated downstream (``xids.dedupe_episodes``).
"""

from __future__ import annotations

import errno
import os
import re
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..logs import get_logger
from ..model import SeriesInfo, XidEvent
from ..series import SeriesIndex

_log = get_logger(component="kmsg")

_XID = re.compile(
    r"\b(?P<kind>S?Xid)\s*\((?:PCI:)?(?P<pci>[0-9a-fA-F]{1,8}:[0-9a-fA-F]{1,2}:[0-9a-fA-F]{1,2}"
    r"(?:\.[0-7])?)\)\s*:\s*(?P<code>\d{1,9})\b\s*,?\s*(?P<rest>.*)$"
)
_PID = re.compile(r"^pid\s*=\s*'?(?P<pid><unknown>|\d+)'?\s*(?:,\s*|$)")
_NAME = re.compile(r"^name\s*=\s*(?P<name>[^,]*?)\s*(?:,\s*|$)")
# a journal export record's line (``journalctl -o export``): KEY=value, the kernel's text in MESSAGE
EXPORT_FIELD = re.compile(r"^(?P<key>[A-Z_][A-Z0-9_]*)=(?P<value>.*)$")
READ_LIMIT = 1 << 20  # bytes per poll, so a flood of log lines cannot stall a tick


@dataclass(frozen=True, slots=True)
class KernelXid:
    """One parsed Xid/SXid line."""

    xid: int
    pci: str  # normalized "dddd:bb:dd"
    sxid: bool
    pid: int | None  # None when absent or '<unknown>'
    process: str | None
    message: str  # the driver's text after code, pid and name


def normalize_pci(text: str) -> str | None:
    """``00000000:3B:00.0``, ``0000:3b:00``, ``3b:00.0`` -> ``0000:3b:00``; None if not one."""
    parts = text.strip().removeprefix("PCI:").split(":")
    if len(parts) not in (2, 3):
        return None
    try:
        domain = int(parts[0], 16) if len(parts) == 3 else 0
        bus = int(parts[-2], 16)
        device = int(parts[-1].split(".", 1)[0], 16)
    except ValueError:
        return None
    if domain > 0xFFFFFFFF or bus > 0xFF or device > 0x1F:
        return None
    return f"{domain:04x}:{bus:02x}:{device:02x}"


def parse_xid_line(line: str) -> KernelXid | None:
    """The Xid/SXid in one log line (any prefix), or None for every other line."""
    field = EXPORT_FIELD.match(line)
    if field is not None and field["key"] != "MESSAGE":
        return None  # journal export: only MESSAGE= is the kernel's text
    match = _XID.search(line)
    if match is None:
        return None
    pci = normalize_pci(match["pci"])
    if pci is None or int(match["code"]) == 0:  # no driver writes XID 0: a garbled line
        return None
    rest = match["rest"].strip()
    pid: int | None = None
    process: str | None = None
    found = _PID.match(rest)
    if found is not None:
        pid = int(found["pid"]) if found["pid"].isdigit() else None
        rest = rest[found.end() :]
        named = _NAME.match(rest)
        if named is not None:
            name = named["name"].strip("'\"")
            process = None if name in ("", "<unknown>") else name
            rest = rest[named.end() :]
    return KernelXid(int(match["code"]), pci, match["kind"] == "SXid", pid, process, rest.strip())


def gpu_names(infos: Sequence[SeriesInfo]) -> dict[tuple[str, str], str]:
    """(node, a name of one of its GPUs) -> that GPU's label. dcgm-exporter's series name a GPU
    by its label (``gpu="3"``), its UUID (lower case) and its PCI bus id (normalized); the
    first GPU seen with a name keeps it. A kernel log's Xid names its PCI bus id."""
    names: dict[tuple[str, str], str] = {}
    for info in infos:
        if not info.gpu:
            continue
        labels = dict(info.labels + info.context)
        names.setdefault((info.node, info.gpu), info.gpu)
        uuid = labels.get("uuid") or labels.get("UUID")
        if uuid:
            names.setdefault((info.node, uuid.lower()), info.gpu)
        pci = normalize_pci(labels.get("pci_bus_id", ""))
        if pci is not None:
            names.setdefault((info.node, pci), info.gpu)
    return names


class KmsgFollower:
    """Follows a kernel log source; ``poll()`` returns the complete lines that arrived since
    the last call, never blocking. See the module docstring for the sources."""

    def __init__(self, path: Path, *, from_start: bool = False) -> None:
        self.path = Path(path)
        self.from_start = from_start
        self._fd: int | None = None
        self._device = False
        self._inode: tuple[int, int] | None = None
        self._pos = 0
        self._partial = b""
        self._missing_logged = False
        self._first_open = True
        self._open()  # following starts now: what is written from here on is news

    def _open(self) -> bool:
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as exc:
            if not self._missing_logged:
                _log.warning(
                    "kernel log unavailable, will retry", path=str(self.path), error=str(exc)
                )
                self._missing_logged = True
            # A file that appears later was created after we started: all of it is news.
            self._first_open = False
            return False
        info = os.fstat(fd)
        self._fd, self._device = fd, stat.S_ISCHR(info.st_mode)
        self._inode, self._partial = (info.st_dev, info.st_ino), b""
        skip_history = self._first_open and not self.from_start
        self._pos = 0
        if skip_history:
            # /dev/kmsg supports SEEK_END: "only records written from now on".
            self._pos = os.lseek(fd, 0, os.SEEK_END)
        self._first_open, self._missing_logged = False, False
        _log.info("following kernel log", path=str(self.path), device=self._device)
        return True

    def poll(self) -> list[str]:
        """New complete lines (device records: one message each)."""
        if self._fd is None and not self._open():
            return []
        if self._device:
            return self._read_device()
        lines = self._read_file()
        if self._rotated():
            if self._partial:  # the old file's last line had no newline: it is complete now
                lines.append(self._partial.decode("utf-8", "replace").rstrip("\r"))
            self.close()
            if self._open():
                lines += self._read_file()
        return lines

    def _read_device(self) -> list[str]:
        assert self._fd is not None
        out: list[str] = []
        total = 0
        while total < READ_LIMIT:
            try:
                record = os.read(self._fd, 8192)
            except BlockingIOError:
                break
            except OSError as exc:
                if exc.errno == errno.EPIPE:  # overwritten in the ring buffer before we read it
                    continue
                raise
            if not record:
                break
            total += len(record)
            text = record.decode("utf-8", "replace")
            header, sep, body = text.partition(";")
            # continuation lines (" SUBSYSTEM=pci") follow the message after a newline
            out.append((body if sep else header).split("\n", 1)[0])
        return out

    def _read_file(self) -> list[str]:
        assert self._fd is not None
        size = os.fstat(self._fd).st_size
        if size < self._pos:  # truncated in place (copytruncate): start over
            self._pos, self._partial = 0, b""
        data = os.pread(self._fd, min(READ_LIMIT, max(size - self._pos, 0)), self._pos)
        self._pos += len(data)
        data = self._partial + data
        *complete, self._partial = data.split(b"\n")
        return [line.decode("utf-8", "replace").rstrip("\r") for line in complete]

    def _rotated(self) -> bool:
        """True when the path now names another file and ours is fully read."""
        try:
            info = os.stat(self.path)
        except OSError:
            return False  # between rename and re-create: keep reading the old one
        if (info.st_dev, info.st_ino) == self._inode:
            return False
        assert self._fd is not None
        return self._pos >= os.fstat(self._fd).st_size

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class KernelXids:
    """Maps parsed kernel XIDs onto the series index's GPUs; one per daemon.

    ``node`` is this machine's node name. When the index knows exactly one node and it is not
    ``node`` (the exporter names the host differently), that node is used instead."""

    def __init__(self, index: SeriesIndex, node: str) -> None:
        self.index = index
        self.node = node
        self._synced = 0
        self._gpus: dict[tuple[str, str], str] = {}  # (node, pci or other name) -> gpu label
        self._nodes: set[str] = set()

    def _sync(self) -> None:
        new = self.index.infos[self._synced :]
        self._nodes.update(info.node for info in new if info.node)
        for key, gpu in gpu_names(new).items():
            self._gpus.setdefault(key, gpu)
        self._synced = len(self.index.infos)

    def resolve(self, pci: str) -> tuple[str, str | None]:
        """(node, gpu label or None) for a normalized PCI bus id on this machine."""
        if self._synced < len(self.index.infos):
            self._sync()
        node = self.node
        if node not in self._nodes and len(self._nodes) == 1:
            node = next(iter(self._nodes))
        return node, self._gpus.get((node, pci))

    def events(self, lines: list[str], t: float) -> list[XidEvent]:
        """XidEvents of the Xid/SXid lines among ``lines``, stamped ``t``."""
        out: list[XidEvent] = []
        for line in lines:
            parsed = parse_xid_line(line)
            if parsed is None:
                continue
            node, gpu = self.resolve(parsed.pci)
            if parsed.sxid:
                gpu = None  # the PCI id is the NVSwitch's
            source = "kmsg-sxid" if parsed.sxid else "kmsg"
            out.append(XidEvent(t, node, gpu, parsed.xid, source=source, message=parsed.message))
            _log.warning(
                "kernel XID",
                node=node,
                gpu=gpu,
                xid=parsed.xid,
                sxid=parsed.sxid,
                pci=parsed.pci,
                pid=parsed.pid,
                process=parsed.process,
                message=parsed.message,
            )
        return out
