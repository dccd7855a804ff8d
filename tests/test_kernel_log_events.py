"""Kernel log exports as `--events`: every accepted shape, the refusals, and a replay whose
failures from a kernel log equal those from the events JSONL (kernel_log.py)."""

from __future__ import annotations

import gzip
import json
import re
from datetime import UTC, datetime
from pathlib import Path

import pytest

from detector.cli.main import main
from detector.errors import EventsError
from detector.ingest.events import load_events, place_events
from detector.model import SeriesInfo, XidEvent

MOMENT = datetime(2026, 11, 30, 13, 37, 13, tzinfo=UTC).timestamp()
XID = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus."


def _write(path: Path, *lines: str) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _one(path: Path) -> XidEvent:
    events = load_events(path)
    assert len(events) == 1, events
    return events[0]


@pytest.mark.parametrize(
    ("name", "line", "node", "fraction"),
    [
        ("short-iso", f"2026-11-30T13:37:13+0000 gpu-05 kernel: {XID}", "gpu-05", 0.0),
        (
            "short-iso-precise, another zone",
            f"2026-11-30T14:37:13.250000+0100 gpu-05 kernel: {XID}",
            "gpu-05",
            0.25,
        ),
        (
            "rsyslog RFC 3339 with the kernel's own stamp",
            f"2026-11-30T13:37:13.5+00:00 gpu-05 kernel: [ 8123.456789] {XID}",
            "gpu-05",
            0.5,
        ),
        ("dmesg --time-format iso", f"2026-11-30T13:37:13,000000+00:00 {XID}", "host-7", 0.0),
        (
            "logcli",
            f'2026-11-30T13:37:13Z {{host="gpu-05", job="kernel"}} {XID}',
            "gpu-05",
            0.0,
        ),
        (
            "logcli, instance",
            f'2026-11-30T13:37:13Z {{instance="gpu-05:9100"}} {XID}',
            "gpu-05",
            0.0,
        ),
        ("short-unix", f"1796045833.750000 gpu-05 kernel: {XID}", "gpu-05", 0.75),
        (
            "logcli -o jsonl",
            json.dumps(
                {"labels": {"host": "gpu-05"}, "line": XID, "timestamp": "2026-11-30T13:37:13Z"}
            ),
            "gpu-05",
            0.0,
        ),
    ],
)
def test_timestamped_text_exports(
    tmp_path: Path, name: str, line: str, node: str, fraction: float
) -> None:
    """Each export's Xid line: time (offset honoured), node (the line's host, else the file
    name), code and PCI id; the log's other lines are skipped."""
    path = _write(
        tmp_path / "host-7.log",
        "-- Logs begin at Mon 2026-11-30 00:00:00 UTC. --",
        "2026-11-30T13:00:00+0000 gpu-05 kernel: e1000e: eth0 NIC Link is Up",
        line,
    )
    event = _one(path)
    assert (event.time, event.node, event.gpu, event.xid) == (MOMENT + fraction, node, None, 79)
    assert (event.pci, event.source) == ("0000:3b:00", "kernel-log")


def test_journal_json_and_export(tmp_path: Path) -> None:
    """journalctl -o json (one object a line) and -o export (KEY=value records), and Loki's
    logcli -o jsonl: JSON lines that are log entries, not events."""
    usec = str(int(MOMENT * 1e6))
    record = {"__REALTIME_TIMESTAMP": usec, "_HOSTNAME": "gpu-05", "MESSAGE": XID}
    other = {"__REALTIME_TIMESTAMP": usec, "_HOSTNAME": "gpu-05", "MESSAGE": "usb 1-1: new"}
    as_json = _write(tmp_path / "j.json", json.dumps(other), json.dumps(record))
    export = _write(
        tmp_path / "j.export",
        f"__REALTIME_TIMESTAMP={usec}",
        "_HOSTNAME=gpu-04",
        "MESSAGE=usb 1-1: new device",
        "",
        f"__REALTIME_TIMESTAMP={usec}",
        "_HOSTNAME=gpu-05",
        "SYSLOG_RAW=<4>" + XID,
        f"MESSAGE={XID}",
    )
    entry = {"labels": {"host": "gpu-05"}, "line": XID, "timestamp": "2026-11-30T13:37:13Z"}
    loki = _write(tmp_path / "loki.jsonl", json.dumps(entry))
    for path in (as_json, export, loki):
        event = _one(path)
        assert (event.time, event.node, event.xid, event.pci) == (
            MOMENT,
            "gpu-05",
            79,
            "0000:3b:00",
        )


def test_sxid_has_no_gpu(tmp_path: Path) -> None:
    """An NVSwitch SXid keeps its code; its PCI id is the switch's, so it maps to no GPU."""
    sxid = "nvidia-nvswitch0: SXid (PCI:0000:07:00.0): 12028, Non-fatal, Link 45 egress"
    event = _one(_write(tmp_path / "k.log", f"2026-11-30T13:37:13+0000 gpu-05 kernel: {sxid}"))
    assert (event.xid, event.pci, event.source) == (12028, None, "kernel-log-sxid")


@pytest.mark.parametrize(
    ("line", "said"),
    [
        (f"Nov 30 13:37:13 gpu-05 kernel: {XID}", "syslog without year or zone"),
        (f"[Mon Nov 30 13:37:13 2026] {XID}", "dmesg -T"),
        (f"[ 8123.456789] {XID}", "seconds since boot"),
        (f"6,1234,8123456789,-;{XID}", "/dev/kmsg"),
        (f"2026-11-30T13:37:13 gpu-05 kernel: {XID}", "no UTC offset"),
    ],
)
def test_an_xid_line_without_a_usable_time_is_refused(tmp_path: Path, line: str, said: str) -> None:
    """Refused with file, line, the shape found and the exports that work; never guessed."""
    path = _write(tmp_path / "k.log", "2026-11-30T13:00:00+0000 gpu-05 kernel: hello", line)
    with pytest.raises(EventsError, match=rf"k\.log:2: .*{re.escape(said)}.*short-iso"):
        load_events(path)


def test_neither_events_nor_a_log_is_refused(tmp_path: Path) -> None:
    """A CSV given as --events is an error, not zero failures; a log without Xids is fine."""
    csv = _write(tmp_path / "events.csv", "time,node,gpu,xid", "1735700000,node-17,3,79")
    with pytest.raises(EventsError, match="neither events JSONL nor a kernel log"):
        load_events(csv)
    quiet = _write(tmp_path / "quiet.log", "2026-11-30T13:00:00+0000 gpu-05 kernel: hello")
    assert load_events(quiet) == []


def test_jsonl_stays_jsonl(tmp_path: Path) -> None:
    """Events JSONL (after comments) is read by the contract; a broken first line is still
    reported as bad JSON, not taken for a log."""
    good = _write(tmp_path / "e.jsonl", "# failures", '{"time": 1, "node": "n", "xid": 79}')
    assert [e.source for e in load_events(good)] == ["events-file"]
    broken = _write(tmp_path / "b.jsonl", '{"time": 1, "node": "n", "xid": 79')
    with pytest.raises(EventsError, match=r"b\.jsonl:1: not valid JSON"):
        load_events(broken)


def _info(column: int, node: str, gpu: str, bus: str) -> SeriesInfo:
    labels = (("gpu", gpu), ("node", node))
    context = (("pci_bus_id", bus), ("uuid", f"GPU-{column:08d}-AB"))
    return SeriesInfo(column, "DCGM_FI_DEV_GPU_TEMP", labels, node, gpu, context)


def test_place_events_maps_pci_ids_uuids_and_short_host_names() -> None:
    """A log's short host name takes the data's full name when only one node has it; its PCI
    id takes the GPU with that pci_bus_id on that node (another node's same bus: not); an
    event naming its GPU by UUID or PCI bus id takes the GPU's label."""
    infos = [
        _info(0, "gpu-05.cluster.local", "2", "00000000:3B:00.0"),
        _info(1, "gpu-06.cluster.local", "4", "00000000:3B:00.0"),
        _info(2, "a.one", "0", "00000000:18:00.0"),
        _info(3, "a.two", "0", "00000000:18:00.0"),
    ]
    events = [
        XidEvent(1.0, "gpu-05", None, 79, pci="0000:3b:00"),
        XidEvent(2.0, "gpu-06.cluster.local", None, 48, pci="0000:5d:00"),  # unknown bus
        XidEvent(3.0, "a", None, 79, pci="0000:18:00"),  # two nodes named a.*: kept
        XidEvent(4.0, "gpu-05", "7", 13),  # no PCI id: its GPU kept
        XidEvent(5.0, "gpu-05", "gpu-00000000-ab", 79),  # the UUID, in another case
        XidEvent(6.0, "gpu-06.cluster.local", "0000:3B:00.0", 79),  # the bus id
        XidEvent(7.0, "gpu-06.cluster.local", "GPU-00000000-AB", 79),  # node-05's UUID
        XidEvent(8.0, "GPU-06", None, 79),  # another case
    ]
    placed = place_events(events, infos)
    assert [(e.node, e.gpu) for e in placed] == [
        ("gpu-05.cluster.local", "2"),
        ("gpu-06.cluster.local", None),
        ("a", None),
        ("gpu-05.cluster.local", "7"),
        ("gpu-05.cluster.local", "2"),
        ("gpu-06.cluster.local", "4"),
        ("gpu-06.cluster.local", "GPU-00000000-AB"),
        ("gpu-06.cluster.local", None),
    ]


@pytest.fixture(scope="module")
def simulated(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """A simulated dump with failures, its events JSONL and the same failures written as a
    `journalctl -k -o short-iso` log (PCI ids read from the dump's own pci_bus_id labels)."""
    folder = tmp_path_factory.mktemp("kernel-log")
    dump, events = folder / "sim.om.gz", folder / "sim.jsonl"
    argv = ["simulate", "--nodes", "4", "--gpus", "8", "--days", "0.5", "--seed", "7"]
    assert 0 == main([*argv, "--failures", "3", "--out", str(dump), "--events", str(events)])
    bus: dict[tuple[str, str], str] = {}
    with gzip.open(dump, "rt") as fh:
        for line in fh:
            if line.startswith("DCGM_FI_DEV_GPU_TEMP{"):
                labels = dict(re.findall(r'(\w+)="([^"]*)"', line))
                bus[(labels["Hostname"], labels["gpu"])] = labels["pci_bus_id"]
    log = folder / "kern.log"
    with log.open("w") as out:
        for record in map(json.loads, events.read_text().splitlines()):
            pci = bus[(record["node"], record["gpu"])].split(":", 1)[1][:5].lower()
            stamp = datetime.fromtimestamp(record["time"], UTC).strftime("%Y-%m-%dT%H:%M:%S.%f%z")
            host = f"{record['node']} kernel:"
            out.write(f"{stamp} {host} NVRM: GPU at PCI:0000:{pci}: GPU-0000\n")
            out.write(f"{stamp} {host} NVRM: Xid (PCI:0000:{pci}): {record['xid']}, pid=9, x\n")
    return dump, events, log


def test_a_kernel_log_replays_like_its_events_file(
    simulated: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    """The same failures, GPUs, detections and lead times from the log as from the JSONL:
    without the PCI mapping each failure would also be a second, GPU-less one beside the
    dump's own DCGM XID gauge."""
    dump, events, log = simulated
    reports = []
    for source in (events, log):
        out = tmp_path / f"{source.name}.json"
        assert 0 == main(
            ["replay", str(dump), "--events", str(source), "--report-json", str(out), "--quiet"]
        )
        reports.append(json.loads(out.read_text()))
    from_events, from_log = reports
    assert len(from_log["failures"]) == len(from_events["failures"])
    for got, want in zip(from_log["failures"], from_events["failures"], strict=True):
        for key in ("time", "lead_time_s"):  # the log's times are whole microseconds
            assert got.pop(key) == pytest.approx(want.pop(key), abs=1e-5)
        assert got == want
    leads = [s.pop("lead_time_s") for s in (from_log["summary"], from_events["summary"])]
    assert leads[0] == pytest.approx(leads[1], abs=1e-5)
    assert from_log["summary"] == from_events["summary"]
    assert from_log["summary"]["failures"] >= 2
    assert all(row["gpu"] is not None for row in from_log["failures"])


def test_an_xid_zero_line_is_no_event(tmp_path: Path) -> None:
    """No driver writes XID 0: such a line (a garbled one) is skipped, here and live."""
    zero = XID.replace("): 79,", "): 0,")
    path = _write(
        tmp_path / "k.log",
        f"2026-11-30T13:37:13+0000 gpu-05 kernel: {zero}",
        f"2026-11-30T13:37:14+0000 gpu-05 kernel: {XID}",
    )
    assert [e.xid for e in load_events(path)] == [79]
