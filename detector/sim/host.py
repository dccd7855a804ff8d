"""Per-node physics of one tick for the node-exporter subset: InfiniBand, NFS client and
mountstats, network, load, memory, CPU temperatures. Returns family -> (nodes, label sets).

The NFS server is shared: its load is the share of the cluster writing a checkpoint (plus half
the share loading data). Every node's RPCs see the server's queueing, so RTT, backlog and
retransmissions rise on *all* nodes during any job's checkpoint: a common-mode movement.
InfiniBand traffic follows the job's synchronous steps. Flapping noisy nodes get link error
recoveries, brief physical-state flaps, port errors and extra load noise, and never fail.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import NDArray

from ..model import FloatArray
from .catalog import HWMON_SENSORS, IB_DEVICES, NET_DEVICES, NFS_METHODS, NFS_OPS
from .scenario import HostFault, Scenario

_IB_RATE = np.array([1e6, 2e9, 3.8e10, 5e9, 0.0])  # bytes/s per port by phase
_LOAD = np.array([1.5, 60.0, 38.0, 85.0, 30.0])  # checkpoint writers sit in D state
_RPC = np.array([150.0, 15_000.0, 400.0, 20_000.0, 150.0])  # NFS RPCs/s by phase
_MEM_USED = np.array([0.1, 0.45, 0.55, 0.7, 0.55])  # share of RAM
MEM_TOTAL = 2.0 * 1024**4


class HostModel:
    """Node-level counters and state; ``step`` returns family -> (nodes, label sets)."""

    def __init__(self, sc: Scenario, rng: np.random.Generator, noisy: NDArray[np.int64]) -> None:
        n = sc.nodes
        self.sc = sc
        self.noisy = np.zeros((n, 1), bool)
        self.noisy[noisy] = True
        ports, ops = len(IB_DEVICES), len(NFS_OPS)
        self.c: dict[str, FloatArray] = {
            "ib_rx": rng.uniform(1e15, 5e15, (n, ports)),
            "ib_tx": rng.uniform(1e15, 5e15, (n, ports)),
            "ib_err": rng.poisson(2.0, (n, ports)).astype(float),
            "ib_disc": rng.poisson(5.0, (n, ports)).astype(float),
            "ib_wait": rng.uniform(1e9, 1e10, (n, ports)),
            "ib_recov": np.zeros((n, ports)),
            "ib_down": np.zeros((n, ports)),
            "net_rx": rng.uniform(1e11, 1e12, (n, len(NET_DEVICES))),
            "net_tx": rng.uniform(1e11, 1e12, (n, len(NET_DEVICES))),
            "net_err": np.zeros((n, len(NET_DEVICES))),
            "rpcs": rng.uniform(1e8, 1e9, (n, 1)),
            "retrans": rng.uniform(1e3, 1e4, (n, 1)),
            "methods": rng.uniform(1e6, 1e8, (n, len(NFS_METHODS))),
            "age": rng.uniform(86400.0, 30 * 86400.0, (n, 1)),
            "read_bytes": rng.uniform(1e12, 1e13, (n, 1)),
            "write_bytes": rng.uniform(1e12, 1e13, (n, 1)),
            "backlog": rng.uniform(1e4, 1e5, (n, 1)),
            "sending": rng.uniform(1e6, 1e7, (n, 1)),
            "pending": rng.uniform(1e4, 1e5, (n, 1)),
            "sends": rng.uniform(1e8, 1e9, (n, 1)),
            "op_req": rng.uniform(1e6, 1e8, (n, ops)),
            "op_timeouts": np.zeros((n, ops)),
            "op_queue": rng.uniform(1e2, 1e3, (n, ops)),
            "op_resp": rng.uniform(1e3, 1e4, (n, ops)),
            "op_sent": rng.uniform(1e10, 1e12, (n, ops)),
            "op_recv": rng.uniform(1e10, 1e12, (n, ops)),
        }
        self.load = np.full((n, 3), 2.0)
        self.slots = np.full((n, 1), 4.0)
        self.decay = np.exp(-sc.step_s / np.array([60.0, 300.0, 900.0]))

    def step(
        self,
        t_abs: float,
        phase: NDArray[np.int8],
        wobble: FloatArray,
        nfs_write: float,
        nfs_read: float,
        rng: np.random.Generator,
    ) -> dict[str, FloatArray]:
        sc, dt, c = self.sc, self.sc.step_s, self.c
        n = sc.nodes
        p = phase[:, None]
        slow, leak = _host_faults(sc.host_faults, t_abs - sc.start, n)
        noise = rng.standard_normal((n, 8)) * np.where(self.noisy, 4.0, 1.0) * sc.noise_scale
        server = nfs_write + 0.5 * nfs_read  # NFS server load in cluster shares
        rtt = 0.0006 * (1.0 + 60.0 * server * server)  # seconds per RPC
        queue = 0.0001 * (1.0 + 150.0 * server * server)
        rpcs = _RPC[p] * (1.0 + 0.05 * np.abs(noise[:, :1]))  # (n, 1)
        writing, reading = (p == 3).astype(float), (p == 1).astype(float)
        ib = _IB_RATE[p] * (1.0 + 3.0 * wobble[:, None] * (p == 2)) * (1.0 + 0.01 * noise[:, 1:2])
        c["ib_rx"] += ib * dt
        c["ib_tx"] += ib * dt * 0.98
        c["ib_wait"] += ib * dt * 1e-3 * (1.0 + 0.1 * np.abs(noise[:, 2:3]))
        flap = self.noisy & (rng.random((n, len(IB_DEVICES))) < 0.01)
        c["ib_recov"] += flap
        c["ib_err"] += flap * rng.poisson(20.0, flap.shape) + (rng.random(flap.shape) < 1e-4)
        c["ib_disc"] += (rng.random(flap.shape) < 2e-4) + flap * 3
        c["net_rx"] += dt * (2e6 + 1.2e9 * reading)
        c["net_tx"] += dt * (2e6 + 2.5e9 * writing) * np.ones((1, len(NET_DEVICES)))
        c["net_err"] += self.noisy & (rng.random((n, len(NET_DEVICES))) < 0.005)
        retrans = rpcs * dt * 2e-4 * server * server * (1.0 + 0.2 * np.abs(noise[:, 3:4]))
        c["rpcs"] += rpcs * dt
        c["retrans"] += retrans
        mix = np.hstack([reading * 0.9 + 0.05, writing * 0.9 + 0.05, np.full((n, 2), 0.3)])
        c["methods"] += rpcs * dt * mix
        c["age"] += dt
        c["read_bytes"] += dt * 1.2e9 * reading
        c["write_bytes"] += dt * 2.5e9 * writing
        c["sends"] += rpcs * dt + retrans
        c["backlog"] += rpcs * dt * min(1.0, 0.002 + 1.5 * server * server)
        c["sending"] += rpcs * dt * (1.0 + 2.0 * server)
        c["pending"] += rpcs * dt * min(1.0, 0.01 + server)
        self.slots = np.maximum(self.slots, np.round(2.0 + 62.0 * min(1.0, server) * writing))
        op_rate = rpcs * np.hstack(
            [reading * 0.9 + 0.05, writing * 0.9 + 0.05, np.full((n, 1), 0.1)]
        )
        c["op_req"] += op_rate * dt
        c["op_timeouts"] += (server > 0.5) * (rng.random(op_rate.shape) < 0.02 * server)
        c["op_queue"] += op_rate * dt * queue
        c["op_resp"] += op_rate * dt * rtt * slow * (1.0 + 0.05 * np.abs(noise[:, 4:5]))
        c["op_sent"] += op_rate * dt * np.array([200.0, 1_048_700.0, 180.0])
        c["op_recv"] += op_rate * dt * np.array([1_048_700.0, 200.0, 260.0])
        target = _LOAD[p] + noise[:, 5:6] * 1.5
        self.load = target + (self.load - target) * self.decay
        hour = (t_abs % 86400.0) / 3600.0
        ambient = sc.diurnal_amplitude_c * math.sin(2.0 * math.pi * (hour - 9.0) / 24.0)
        cpu_temp = 48.0 + 0.25 * self.load[:, :1] + ambient + np.arange(len(HWMON_SENSORS)) % 5
        used = _MEM_USED[p] * MEM_TOTAL * (1.0 + 0.01 * noise[:, 6:7])
        used = used + leak * (0.95 * MEM_TOTAL - used).clip(0.0)
        ports = np.ones((1, len(IB_DEVICES)))
        physical = np.where(flap, 6.0, 5.0)
        return {
            "node_infiniband_link_downed_total": c["ib_down"],
            "node_infiniband_link_error_recovery_total": c["ib_recov"],
            "node_infiniband_physical_state_id": physical,
            "node_infiniband_port_data_received_bytes_total": np.floor(c["ib_rx"]),
            "node_infiniband_port_data_transmitted_bytes_total": np.floor(c["ib_tx"]),
            "node_infiniband_port_discards_received_total": c["ib_disc"],
            "node_infiniband_port_errors_received_total": c["ib_err"],
            "node_infiniband_port_packets_received_total": np.floor(c["ib_rx"] / 4096.0),
            "node_infiniband_port_packets_transmitted_total": np.floor(c["ib_tx"] / 4096.0),
            "node_infiniband_port_transmit_wait_total": np.floor(c["ib_wait"]),
            "node_infiniband_rate_bytes_per_second": 5e10 * ports + np.zeros((n, 1)),
            "node_infiniband_state_id": 4.0 * ports + np.zeros((n, 1)),
            "node_load1": np.round(self.load[:, :1], 2),
            "node_load15": np.round(self.load[:, 2:3], 2),
            "node_load5": np.round(self.load[:, 1:2], 2),
            "node_hwmon_temp_celsius": np.round(cpu_temp + noise[:, 7:8]),
            "node_memory_MemAvailable_bytes": np.floor(MEM_TOTAL - used),
            "node_memory_MemFree_bytes": np.floor((MEM_TOTAL - used) * 0.4),
            "node_memory_MemTotal_bytes": np.full((n, 1), MEM_TOTAL),
            "node_memory_Cached_bytes": np.floor((MEM_TOTAL - used) * 0.55),
            "node_mountstats_nfs_age_seconds_total": c["age"],
            "node_mountstats_nfs_operations_major_timeouts_total": c["op_timeouts"],
            "node_mountstats_nfs_operations_queue_time_seconds_total": c["op_queue"],
            "node_mountstats_nfs_operations_received_bytes_total": np.floor(c["op_recv"]),
            "node_mountstats_nfs_operations_request_time_seconds_total": c["op_queue"]
            + c["op_resp"],
            "node_mountstats_nfs_operations_requests_total": np.floor(c["op_req"]),
            "node_mountstats_nfs_operations_response_time_seconds_total": c["op_resp"],
            "node_mountstats_nfs_operations_sent_bytes_total": np.floor(c["op_sent"]),
            "node_mountstats_nfs_operations_transmissions_total": np.floor(c["op_req"]),
            "node_mountstats_nfs_read_bytes_total": np.floor(c["read_bytes"]),
            "node_mountstats_nfs_transport_backlog_queue_total": np.floor(c["backlog"]),
            "node_mountstats_nfs_transport_bad_transaction_ids_total": np.zeros((n, 1)),
            "node_mountstats_nfs_transport_maximum_rpc_slots": self.slots,
            "node_mountstats_nfs_transport_pending_queue_total": np.floor(c["pending"]),
            "node_mountstats_nfs_transport_receives_total": np.floor(c["sends"] - c["retrans"]),
            "node_mountstats_nfs_transport_sending_queue_total": np.floor(c["sending"]),
            "node_mountstats_nfs_transport_sends_total": np.floor(c["sends"]),
            "node_mountstats_nfs_write_bytes_total": np.floor(c["write_bytes"]),
            "node_network_receive_bytes_total": np.floor(c["net_rx"]),
            "node_network_receive_errs_total": c["net_err"],
            "node_network_transmit_bytes_total": np.floor(c["net_tx"]),
            "node_nfs_requests_total": np.floor(c["methods"]),
            "node_nfs_rpc_authentication_refreshes_total": np.floor(c["rpcs"]),
            "node_nfs_rpc_retransmissions_total": np.floor(c["retrans"]),
            "node_nfs_rpcs_total": np.floor(c["rpcs"]),
        }


def _host_faults(
    faults: tuple[HostFault, ...], t_rel: float, n: int
) -> tuple[FloatArray, FloatArray]:
    """Per node (n, 1): the factor on its NFS round trip (``nfs`` faults) and the share of
    its free memory leaked (``memory`` faults, rising over their ramp)."""
    slow, leak = np.ones((n, 1)), np.zeros((n, 1))
    for fault in faults:
        if t_rel < fault.at_s:
            continue
        if fault.kind == "nfs":
            slow[fault.node] = 20.0
        else:
            leak[fault.node] = min(1.0, (t_rel - fault.at_s) / fault.ramp_s)
    return slow, leak
