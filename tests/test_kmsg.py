"""Kernel-log XIDs: line parsing (fixtures), PCI -> GPU mapping, following files and devices."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from detector.ingest.kmsg import KernelXid, KernelXids, KmsgFollower, normalize_pci, parse_xid_line
from detector.ingest.parse import split_series
from detector.model import XidEvent
from detector.series.index import SeriesIndex

FIXTURES = Path(__file__).parent / "fixtures" / "kmsg"


def parsed(name: str) -> list[KernelXid]:
    lines = (FIXTURES / name).read_text().splitlines()
    return [x for x in map(parse_xid_line, lines) if x is not None]


def dcgm_index(*nodes: str) -> SeriesIndex:
    """A series index with dcgm-exporter GPU series (pci_bus_id as dcgm writes it)."""
    index = SeriesIndex()
    buses = {"0": "00000000:18:00.0", "1": "00000000:3B:00.0", "2": "00000000:AB:00.0"}
    keys = [
        f'DCGM_FI_DEV_GPU_TEMP{{gpu="{gpu}",pci_bus_id="{bus}",Hostname="{node}"}}'
        for node in nodes
        for gpu, bus in buses.items()
    ]
    index.columns(keys, split_series)
    index.columns([f'node_load1{{instance="{n}:9100"}}' for n in nodes], split_series)
    return index


def test_dev_kmsg_records_yield_xid_code_bus_pid_and_text() -> None:
    """/dev/kmsg records: code, bus id, pid/name (or None for '<unknown>') and driver text."""
    assert [
        KernelXid(79, "0000:3b:00", False, 1234, "python", "GPU has fallen off the bus."),
        KernelXid(
            48,
            "0000:18:00",
            False,
            None,
            None,
            "An uncorrectable double bit error (DBE) has been detected on GPU in the "
            "framebuffer at partition 6, subpartition 0.",
        ),
        KernelXid(
            13,
            "0000:2a:00",
            False,
            20481,
            "python3",
            "Graphics SM Warp Exception on (GPC 2, TPC 0, SM 1): Out Of Range Address",
        ),
        KernelXid(
            13,
            "0000:2a:00",
            False,
            20481,
            "python3",
            "Graphics Exception: ESR 0x515e48=0x102000e 0x515e50=0x0 0x515e44=0xd3eff2 "
            "0x515e4c=0x17f",
        ),
    ] == parsed("dev_kmsg.txt")


def test_dmesg_lines_cover_old_format_sxid_and_reject_garbage() -> None:
    """Old (no PCI:, no pid) and new formats, SXids marked, malformed lines ignored."""
    got = parsed("dmesg.txt")
    assert [
        (13, "0000:3b:00", False),
        (13, "0000:3b:00", False),
        (31, "0000:ab:00", False),
        (94, "0000:5d:00", False),
        (63, "0000:5d:00", False),
        (154, "0000:9a:00", False),
        (12028, "0000:07:00", True),
        (12028, "0000:07:00", True),
        (12028, "0000:07:00", True),
        (20034, "0000:0a:00", True),
    ] == [(x.xid, x.pci, x.sxid) for x in got]
    assert "Graphics SM Warp Exception on (GPC 0, TPC 1, SM 0): Out Of Range Address" == (
        got[0].message
    )
    assert (None, None) == (got[0].pid, got[0].process)
    assert "GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)" == (
        got[5].message
    )
    assert "Non-fatal, Link 45 egress non-posted PRIV error (First)" == got[6].message


def test_journal_formats_parse_and_export_reads_only_message_fields() -> None:
    """short-iso lines parse; in an export only MESSAGE= counts (SYSLOG_RAW= repeats it)."""
    assert [(79, "0000:18:00"), (119, "0000:2a:00")] == [
        (x.xid, x.pci) for x in parsed("journal_short_iso.txt")
    ]
    assert [(79, "0000:3b:00", 1234)] == [
        (x.xid, x.pci, x.pid) for x in parsed("journal_export.txt")
    ]
    raw = "SYSLOG_RAW=<4>NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=x, GPU has fallen off the bus."
    assert parse_xid_line(raw) is None


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("00000000:3B:00.0", "0000:3b:00"),
        ("0000:3b:00", "0000:3b:00"),
        ("PCI:0000:3B:00.0", "0000:3b:00"),
        ("3b:00.0", "0000:3b:00"),
        ("00000001:AB:00.0", "0001:ab:00"),
        ("0000:3g:00", None),
        ("3b", None),
        ("0000:3b:40", None),
    ],
)
def test_pci_bus_ids_normalize_across_case_and_domain_width(
    text: str, expected: str | None
) -> None:
    """DCGM's 8-digit upper-case ids and the driver's 4-digit ones meet in one form."""
    assert expected == normalize_pci(text)


def test_kernel_xid_lands_on_the_gpu_named_by_dcgm_pci_bus_id() -> None:
    """The Xid's bus id picks this node's GPU; unknown bus -> node-level; SXid -> no GPU."""
    mapper = KernelXids(dcgm_index("node-01", "node-02"), "node-02")
    lines = [
        "4,1,2,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=p, GPU has fallen off the bus.",
        "[ 1.0] NVRM: Xid (PCI:0000:5d:00): 48, pid='<unknown>', name=<unknown>, DBE",
        "[ 2.0] nvidia-nvswitch0: SXid (PCI:0000:18:00.0): 12028, Non-fatal, Link 45",
        "just noise",
    ]
    events = mapper.events(lines, 100.0)
    assert [
        XidEvent(100.0, "node-02", "1", 79, source="kmsg"),
        XidEvent(100.0, "node-02", None, 48, source="kmsg"),
        XidEvent(100.0, "node-02", None, 12028, source="kmsg-sxid"),
    ] == events
    assert "GPU has fallen off the bus." == events[0].message


def test_single_node_index_is_used_when_host_name_differs() -> None:
    """Agent mode: the exporter names the host differently; the only node there is used."""
    mapper = KernelXids(dcgm_index("gpu-node-7.cluster"), "gpu-node-7")
    assert ("gpu-node-7.cluster", "2") == mapper.resolve("0000:ab:00")


def test_mapping_follows_series_added_after_construction() -> None:
    """GPUs that appear in the index later are mapped too."""
    index = SeriesIndex()
    mapper = KernelXids(index, "n1")
    assert ("n1", None) == mapper.resolve("0000:3b:00")
    index.columns(
        ['DCGM_FI_DEV_GPU_TEMP{gpu="5",pci_bus_id="00000000:3B:00.0"}'],
        split_series,
        (("node", "n1"),),
    )
    assert ("n1", "5") == mapper.resolve("0000:3b:00")


def append(path: Path, text: str) -> None:
    with path.open("a") as fh:
        fh.write(text)


def test_file_follow_reads_appends_and_waits_for_complete_lines(tmp_path: Path) -> None:
    """tail -f: history skipped, appended lines read once, a partial line waits."""
    log = tmp_path / "kern.log"
    log.write_text("old line\n")
    follower = KmsgFollower(log)
    try:
        assert [] == follower.poll()
        append(log, "first\nsecond, no newline yet")
        assert ["first"] == follower.poll()
        append(log, " - done\n")
        assert ["second, no newline yet - done"] == follower.poll()
        assert [] == follower.poll()
    finally:
        follower.close()


def test_file_follow_survives_rotation_and_truncation(tmp_path: Path) -> None:
    """A rotated file is finished then the new one read from its start; truncation rewinds."""
    log = tmp_path / "kern.log"
    log.write_text("")
    follower = KmsgFollower(log)
    try:
        append(log, "a\n")
        assert ["a"] == follower.poll()
        append(log, "b\n")
        os.rename(log, tmp_path / "kern.log.1")
        log.write_text("c\nd\n")
        assert ["b", "c", "d"] == follower.poll()
        log.write_text("")  # copytruncate
        assert [] == follower.poll()
        append(log, "e\n")
        assert ["e"] == follower.poll()
    finally:
        follower.close()


def test_missing_file_is_retried_and_read_whole_once_it_appears(tmp_path: Path) -> None:
    """A log that does not exist yet is no error; when created, all of it is new."""
    log = tmp_path / "later.log"
    follower = KmsgFollower(log)
    try:
        assert [] == follower.poll()
        log.write_text("NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.\n")
        assert 79 == parse_xid_line(follower.poll()[0]).xid  # type: ignore[union-attr]
    finally:
        follower.close()


def test_from_start_reads_the_fixture_history(tmp_path: Path) -> None:
    """from_start=True reads what the file held before following began."""
    follower = KmsgFollower(FIXTURES / "journal_short_iso.txt", from_start=True)
    try:
        assert 5 == len(follower.poll())
    finally:
        follower.close()


def test_character_device_follows_new_records_one_message_each() -> None:
    """/dev/kmsg: history skipped, a record written now comes back as its message alone."""
    kmsg = Path("/dev/kmsg")
    if not (os.access(kmsg, os.R_OK) and os.access(kmsg, os.W_OK)):
        pytest.skip("needs a readable and writable /dev/kmsg (root)")
    follower = KmsgFollower(kmsg)
    try:
        assert [] == follower.poll()
        probe = f"detector-test: kmsg follow probe {os.getpid()}"
        with kmsg.open("w") as fh:
            fh.write(f"<6>{probe}\n")
        assert [probe] == [line for line in follower.poll() if "kmsg follow probe" in line]
    finally:
        follower.close()
