# ruff: noqa: E501  (the field table keeps dcgm-exporter's help strings verbatim)
"""What the simulated exporters expose: dcgm-exporter fields and the node-exporter subset.

DCGM fields come from dcgm-exporter's counter list (default-counters.csv; the DCP list is a
subset of it). ``DCGM_FIELDS`` is that list in file order: (field, Prometheus type, enabled in
the shipped file, help). ``parse_dcgm_csv`` reads the real CSV so a test can prove the embedded
table still matches it. Label-type rows (driver version, ...) become labels, not series.

Node-exporter families are a realistic ~170-series subset per node with the real names, types,
help and label shapes of node_exporter's e2e fixture.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from ..errors import ConfigError
from ..model import Labels

# dcgm-exporter default-counters.csv field rows, in file order ("# " = shipped disabled).
_DCGM_TABLE = """\
DCGM_FI_DEV_SM_CLOCK, gauge, SM clock frequency (in MHz).
DCGM_FI_DEV_MEM_CLOCK, gauge, Memory clock frequency (in MHz).
DCGM_FI_DEV_MEMORY_TEMP, gauge, Memory temperature (in C).
DCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature (in C).
DCGM_FI_DEV_POWER_USAGE, gauge, Power draw (in W).
DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION, counter, Total energy consumption since boot (in mJ).
DCGM_FI_DEV_PCIE_REPLAY_COUNTER, counter, Total number of PCIe retries.
DCGM_FI_DEV_GPU_UTIL, gauge, GPU utilization (in %).
DCGM_FI_DEV_MEM_COPY_UTIL, gauge, Memory utilization (in %).
DCGM_FI_DEV_ENC_UTIL, gauge, Encoder utilization (in %).
DCGM_FI_DEV_DEC_UTIL, gauge, Decoder utilization (in %).
DCGM_FI_DEV_XID_ERRORS, gauge, Value of the last XID error encountered.
# DCGM_FI_DEV_POWER_VIOLATION, counter, Throttling duration due to power constraints (in ns).
# DCGM_FI_DEV_THERMAL_VIOLATION, counter, Throttling duration due to thermal constraints (in ns).
# DCGM_FI_DEV_SYNC_BOOST_VIOLATION, counter, Throttling duration due to sync-boost constraints (in ns).
# DCGM_FI_DEV_BOARD_LIMIT_VIOLATION, counter, Throttling duration due to board limit constraints (in ns).
# DCGM_FI_DEV_LOW_UTIL_VIOLATION, counter, Throttling duration due to low utilization (in ns).
# DCGM_FI_DEV_RELIABILITY_VIOLATION, counter, Throttling duration due to reliability constraints (in ns).
# DCGM_EXP_CLOCK_EVENTS_COUNT, counter, reported clock events
# DCGM_EXP_XID_ERRORS_COUNT, counter, reported XIDs during last window
# DCGM_EXP_GPU_HEALTH_STATUS, counter, DCGM reported health status
# DCGM_EXP_P2P_STATUS, counter, P2P NvLink status
DCGM_FI_DEV_FB_FREE, gauge, Framebuffer memory free (in MiB).
DCGM_FI_DEV_FB_USED, gauge, Framebuffer memory used (in MiB).
DCGM_FI_DEV_FB_RESERVED, gauge, Framebuffer memory reserved (in MiB).
# DCGM_FI_DEV_ECC_SBE_VOL_TOTAL, counter, Total number of single-bit volatile ECC errors.
# DCGM_FI_DEV_ECC_DBE_VOL_TOTAL, counter, Total number of double-bit volatile ECC errors.
# DCGM_FI_DEV_ECC_SBE_AGG_TOTAL, counter, Total number of single-bit persistent ECC errors.
# DCGM_FI_DEV_ECC_DBE_AGG_TOTAL, counter, Total number of double-bit persistent ECC errors.
# DCGM_FI_DEV_RETIRED_SBE, counter, Total number of retired pages due to single-bit errors.
# DCGM_FI_DEV_RETIRED_DBE, counter, Total number of retired pages due to double-bit errors.
# DCGM_FI_DEV_RETIRED_PENDING, counter, Total number of pages pending retirement.
# DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL, counter, Total number of NVLink flow-control CRC errors.
# DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL, counter, Total number of NVLink data CRC errors.
# DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL, counter, Total number of NVLink retries.
# DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL, counter, Total number of NVLink recovery errors.
DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL, counter, Total number of NVLink bandwidth counters for all lanes.
# DCGM_FI_DEV_NVLINK_BANDWIDTH_L0, counter, The number of bytes of active NVLink rx or tx data including both header and payload.
DCGM_FI_DEV_VGPU_LICENSE_STATUS, gauge, vGPU License status
DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS, counter, Number of remapped rows for uncorrectable errors
DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS, counter, Number of remapped rows for correctable errors
DCGM_FI_DEV_ROW_REMAP_FAILURE, gauge, Whether remapping of rows has failed
DCGM_FI_PROF_GR_ENGINE_ACTIVE, gauge, Ratio of time the graphics engine is active.
# DCGM_FI_PROF_SM_ACTIVE, gauge, The ratio of cycles an SM has at least 1 warp assigned.
# DCGM_FI_PROF_SM_OCCUPANCY, gauge, The ratio of number of warps resident on an SM.
DCGM_FI_PROF_PIPE_TENSOR_ACTIVE, gauge, Ratio of cycles the tensor (HMMA) pipe is active.
DCGM_FI_PROF_DRAM_ACTIVE, gauge, Ratio of cycles the device memory interface is active sending or receiving data.
# DCGM_FI_PROF_PIPE_FP64_ACTIVE, gauge, Ratio of cycles the fp64 pipes are active.
# DCGM_FI_PROF_PIPE_FP32_ACTIVE, gauge, Ratio of cycles the fp32 pipes are active.
# DCGM_FI_PROF_PIPE_FP16_ACTIVE, gauge, Ratio of cycles the fp16 pipes are active.
DCGM_FI_PROF_PCIE_TX_BYTES, gauge, The rate of data transmitted over the PCIe bus - including both protocol headers and data payloads - in bytes per second.
DCGM_FI_PROF_PCIE_RX_BYTES, gauge, The rate of data received over the PCIe bus - including both protocol headers and data payloads - in bytes per second.
"""

# B200 reports "blank" for page retirement: row remapping replaced it from A100 on.
DCGM_BLANK_FIELDS = frozenset(
    {"DCGM_FI_DEV_RETIRED_SBE", "DCGM_FI_DEV_RETIRED_DBE", "DCGM_FI_DEV_RETIRED_PENDING"}
)
DCGM_BLANK_VALUE = 9223372036854775794  # what dcgm-exporter prints for a blank field
XID_COUNT_FIELD = "DCGM_EXP_XID_ERRORS_COUNT"  # one series per (GPU, XID) seen, windowed

_ROW = re.compile(r"^(DCGM_\w+)\s*,\s*(\w+)\s*,\s*(.*)$")


def parse_dcgm_csv(path: Path) -> tuple[tuple[str, str, bool, str], ...]:
    """Parse a dcgm-exporter counters CSV: (field, type, enabled, help) in file order.
    Commented field rows are kept with enabled=False; a field listed twice keeps its enabled
    row; label rows are dropped. Raises ConfigError naming file and line."""
    return parse_dcgm_text(path.read_text(), str(path))


def parse_dcgm_text(text: str, source: str) -> tuple[tuple[str, str, bool, str], ...]:
    """``parse_dcgm_csv`` on text; ``source`` names it in errors."""
    rows: dict[str, tuple[int, str, str, bool, str]] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        enabled = not stripped.startswith("#")
        body = stripped.lstrip("#").strip()
        if not body.startswith("DCGM_"):
            continue
        match = _ROW.match(body)
        if match is None:
            if enabled:
                raise ConfigError(f"{source}:{number}: expected 'FIELD, type, help': {line!r}")
            continue
        name, kind, help_text = match.groups()
        if kind not in ("gauge", "counter", "label"):
            raise ConfigError(f"{source}:{number}: field {name}: unknown type {kind!r}")
        if kind == "label" or (name in rows and not enabled):
            continue
        rows[name] = (number, name, kind, enabled, help_text.strip())
    return tuple((r[1], r[2], r[3], r[4]) for r in sorted(rows.values()))


DCGM_FIELDS = parse_dcgm_text(_DCGM_TABLE, "catalog._DCGM_TABLE")


def dcgm_fields(mode: str) -> tuple[tuple[str, str, str], ...]:
    """(field, type, help) of the per-GPU series for ``mode`` "default" or "all"; the windowed
    XID count (per GPU and XID) is handled apart."""
    return tuple(
        (name, kind, help_text)
        for name, kind, enabled, help_text in DCGM_FIELDS
        if (enabled or mode == "all") and name != XID_COUNT_FIELD
    )


@dataclass(frozen=True, slots=True)
class NodeFamily:
    """One node-exporter metric family and the label sets every node exposes for it."""

    name: str
    kind: str
    help: str
    label_sets: tuple[Labels, ...] = ((),)


IB_DEVICES = tuple(f"mlx5_{i}" for i in range(8))  # one 400G HCA per GPU
NFS_EXPORT = "nfs-ckpt:/checkpoints"
NFS_OPS = ("READ", "WRITE", "GETATTR")
NFS_METHODS = ("Read", "Write", "Getattr", "Access")
HWMON_SENSORS = tuple(
    (("chip", f"platform_coretemp_{c}"), ("sensor", f"temp{s}"))
    for c in (0, 1)
    for s in (1, 2, 3, 4, 5)
)
NET_DEVICES = ("eth0", "eth1")


def _ib() -> tuple[Labels, ...]:
    return tuple((("device", d), ("port", "1")) for d in IB_DEVICES)


def _mount(extra: Labels = ()) -> tuple[Labels, ...]:
    return ((("export", NFS_EXPORT), ("mountaddr", "10.0.0.2"), ("protocol", "tcp"), *extra),)


def _ops() -> tuple[Labels, ...]:
    return tuple(
        (("export", NFS_EXPORT), ("mountaddr", "10.0.0.2"), ("operation", op), ("protocol", "tcp"))
        for op in NFS_OPS
    )


_TRANSPORT: Labels = (("transport", "0"),)
_LABEL_SETS: dict[str, tuple[Labels, ...]] = {
    "-": ((),),
    "ib": _ib(),
    "mount": _mount(),
    "ops": _ops(),
    "transport": _mount(_TRANSPORT),
    "hwmon": HWMON_SENSORS,
    "net": tuple((("device", d),) for d in NET_DEVICES),
    "methods": tuple((("method", m), ("proto", "4")) for m in NFS_METHODS),
}
# name, type, label sets (key of _LABEL_SETS), help: as node_exporter's e2e fixture has them.
_NODE_TABLE = """\
node_infiniband_link_downed_total counter ib Number of times the link failed to recover from an error state and went down
node_infiniband_link_error_recovery_total counter ib Number of times the link successfully recovered from an error state
node_infiniband_physical_state_id gauge ib Physical state of the InfiniBand port (0: no change, 1: sleep, 2: polling, 3: disable, 4: shift, 5: link up, 6: link error recover, 7: phytest)
node_infiniband_port_data_received_bytes_total counter ib Number of data octets received on all links
node_infiniband_port_data_transmitted_bytes_total counter ib Number of data octets transmitted on all links
node_infiniband_port_discards_received_total counter ib Number of inbound packets discarded by the port because the port is down or congested
node_infiniband_port_errors_received_total counter ib Number of packets containing an error that were received on this port
node_infiniband_port_packets_received_total counter ib Number of packets received on all VLs by this port (including errors)
node_infiniband_port_packets_transmitted_total counter ib Number of packets transmitted on all VLs from this port (including errors)
node_infiniband_port_transmit_wait_total counter ib Number of ticks during which the port had data to transmit but no data was sent during the entire tick
node_infiniband_rate_bytes_per_second gauge ib Maximum signal transfer rate
node_infiniband_state_id gauge ib State of the InfiniBand port (0: no change, 1: down, 2: init, 3: armed, 4: active, 5: act defer)
node_load1 gauge - 1m load average.
node_load15 gauge - 15m load average.
node_load5 gauge - 5m load average.
node_hwmon_temp_celsius gauge hwmon Hardware monitor for temperature (input)
node_memory_MemAvailable_bytes gauge - Memory information field MemAvailable_bytes.
node_memory_MemFree_bytes gauge - Memory information field MemFree_bytes.
node_memory_MemTotal_bytes gauge - Memory information field MemTotal_bytes.
node_memory_Cached_bytes gauge - Memory information field Cached_bytes.
node_mountstats_nfs_age_seconds_total counter mount The age of the NFS mount in seconds.
node_mountstats_nfs_operations_major_timeouts_total counter ops Number of times a request has had a major timeout for a given operation.
node_mountstats_nfs_operations_queue_time_seconds_total counter ops Duration all requests spent queued for transmission for a given operation before they were sent, in seconds.
node_mountstats_nfs_operations_received_bytes_total counter ops Number of bytes received for a given operation, including RPC headers and payload.
node_mountstats_nfs_operations_request_time_seconds_total counter ops Duration all requests took from when a request was enqueued to when it was completely handled for a given operation, in seconds.
node_mountstats_nfs_operations_requests_total counter ops Number of requests performed for a given operation.
node_mountstats_nfs_operations_response_time_seconds_total counter ops Duration all requests took to get a reply back after a request for a given operation was transmitted, in seconds.
node_mountstats_nfs_operations_sent_bytes_total counter ops Number of bytes sent for a given operation, including RPC headers and payload.
node_mountstats_nfs_operations_transmissions_total counter ops Number of times an actual RPC request has been transmitted for a given operation.
node_mountstats_nfs_read_bytes_total counter mount Number of bytes read using the read() syscall.
node_mountstats_nfs_transport_backlog_queue_total counter transport Total number of items added to the RPC backlog queue.
node_mountstats_nfs_transport_bad_transaction_ids_total counter transport Number of times the NFS server sent a response with a transaction ID unknown to this client.
node_mountstats_nfs_transport_maximum_rpc_slots gauge transport Maximum number of simultaneously active RPC requests ever used.
node_mountstats_nfs_transport_pending_queue_total counter transport Total number of items added to the RPC transmission pending queue.
node_mountstats_nfs_transport_receives_total counter transport Number of RPC responses for this mount received from the NFS server.
node_mountstats_nfs_transport_sending_queue_total counter transport Total number of items added to the RPC transmission sending queue.
node_mountstats_nfs_transport_sends_total counter transport Number of RPC requests for this mount sent to the NFS server.
node_mountstats_nfs_write_bytes_total counter mount Number of bytes written using the write() syscall.
node_network_receive_bytes_total counter net Network device statistic receive_bytes.
node_network_receive_errs_total counter net Network device statistic receive_errs.
node_network_transmit_bytes_total counter net Network device statistic transmit_bytes.
node_nfs_requests_total counter methods Number of NFS procedures invoked.
node_nfs_rpc_authentication_refreshes_total counter - Number of RPC authentication refreshes performed.
node_nfs_rpc_retransmissions_total counter - Number of RPC transmissions performed.
node_nfs_rpcs_total counter - Total number of RPCs performed.
"""
NODE_FAMILIES: tuple[NodeFamily, ...] = tuple(
    NodeFamily(name, kind, help_text, _LABEL_SETS[sets])
    for name, kind, sets, help_text in (row.split(" ", 3) for row in _NODE_TABLE.splitlines())
)
