"""The bottleneck of a checkpoint storm: a cluster incident in which the NFS signals moved on
many nodes at once. The study behind this project found a "bandwidth paradox": checkpoints
used 1.4-10.4% of 200 Gbps RoCE while the client's 128-slot NFS RPC layer saturated. Which
layer holds a storm back is read from node-exporter's mountstats, per node, during the storm
against the same nodes before it:

- ``network_bandwidth``: the NFS bytes per second fill the node's links (median node at or
  above ``LINK_FULL`` of its link rate): the wire is the limit.
- ``nfs_rpc_slots``: requests wait on the client for an RPC slot (a share of requests of at
  least ``BACKLOG_SATURATED`` went through the transport's backlog queue, ``GREW`` times the
  share before) and the time they queue grew, more than their round trip did: the server
  answers promptly, the client cannot send more at once. The paradox of the study.
- ``nfs_server``: the round trip (RTT) grew at least ``GREW`` times and more than the queueing
  did: the server (or its disks) answers slowly; the clients' queues are its echo.
- ``unknown``: no NFS signal among the storm's common-mode signals, no mountstats figures
  during it, or none of the above.

Figures are medians over the incident's nodes, so one odd node does not name the bottleneck.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

Bottleneck = Literal["nfs_rpc_slots", "nfs_server", "network_bandwidth", "unknown"]

LINK_FULL = 0.7  # share of the link rate the NFS traffic must reach to call the wire full
BACKLOG_SATURATED = 0.05  # share of RPCs through the backlog queue: slots ran out
GREW = 1.5  # growth over the time before the storm that counts (backlog share, RTT)
NFS_SIGNAL_PREFIX = "nfs_"  # the rules' NFS signals (rules/signals.yaml)


@dataclass(frozen=True, slots=True)
class NfsFigures:
    """One node's NFS client over a window (per second, or per RPC / operation), from
    node-exporter's mountstats: backlog queue additions per RPC sent, seconds queued, seconds
    of round trip and seconds in all ("execute": queued + in flight + replies) per operation,
    NFS bytes read and written per second, and the node's link rate in bytes per second (0 or
    NaN: unknown)."""

    backlog_per_rpc: float
    queue_s_per_op: float
    rtt_s_per_op: float
    execute_s_per_op: float
    bytes_per_s: float
    link_bytes_per_s: float = math.nan


@dataclass(frozen=True, slots=True)
class StormDiagnosis:
    """The bottleneck, its figures (medians over the nodes; names in the module doc) and one
    sentence saying why."""

    bottleneck: Bottleneck
    figures: dict[str, float]
    reason: str


def _median(values: Sequence[float]) -> float:
    finite = [v for v in values if math.isfinite(v)]
    return float(np.median(finite)) if finite else math.nan


def storm_bottleneck(
    signals: Sequence[str], during: Sequence[NfsFigures], before: Sequence[NfsFigures]
) -> StormDiagnosis:
    """The bottleneck of a storm whose common-mode ``signals`` are given, from its nodes'
    figures ``during`` the storm and ``before`` it (module docstring)."""
    nfs = sorted(s for s in signals if s.startswith(NFS_SIGNAL_PREFIX))
    link_share = _median(
        [f.bytes_per_s / f.link_bytes_per_s if f.link_bytes_per_s > 0 else math.nan for f in during]
    )
    figures = {
        "nodes": float(len(during)),
        "backlog_per_rpc": _median([f.backlog_per_rpc for f in during]),
        "queue_ms_per_op": 1e3 * _median([f.queue_s_per_op for f in during]),
        "rtt_ms_per_op": 1e3 * _median([f.rtt_s_per_op for f in during]),
        "execute_ms_per_op": 1e3 * _median([f.execute_s_per_op for f in during]),
        "backlog_per_rpc_before": _median([f.backlog_per_rpc for f in before]),
        "queue_ms_per_op_before": 1e3 * _median([f.queue_s_per_op for f in before]),
        "rtt_ms_per_op_before": 1e3 * _median([f.rtt_s_per_op for f in before]),
        "nfs_bytes_per_s": _median([f.bytes_per_s for f in during]),
        "link_share": link_share,
    }
    if not nfs:
        return StormDiagnosis("unknown", figures, "no NFS signal moved cluster-wide")
    if not during:
        return StormDiagnosis("unknown", figures, "no NFS mountstats figures during it")
    queue_growth = figures["queue_ms_per_op"] - figures["queue_ms_per_op_before"]
    rtt_growth = figures["rtt_ms_per_op"] - figures["rtt_ms_per_op_before"]
    rtt_ratio = figures["rtt_ms_per_op"] / figures["rtt_ms_per_op_before"]
    if link_share >= LINK_FULL:
        return StormDiagnosis(
            "network_bandwidth",
            figures,
            f"NFS traffic used {link_share:.0%} of the links' rate",
        )
    backlog = figures["backlog_per_rpc"]
    saturated = backlog >= BACKLOG_SATURATED and backlog >= GREW * figures["backlog_per_rpc_before"]
    used = "" if math.isnan(link_share) else f"; links {link_share:.1%} used"
    if saturated and queue_growth > max(rtt_growth, 0.0):
        return StormDiagnosis(
            "nfs_rpc_slots",
            figures,
            f"{backlog:.0%} of RPCs waited for a slot; queueing grew {queue_growth:.1f} ms per "
            f"operation, the round trip {rtt_growth:.1f} ms{used}",
        )
    if rtt_ratio >= GREW and rtt_growth >= queue_growth:
        return StormDiagnosis(
            "nfs_server",
            figures,
            f"the round trip grew {rtt_ratio:.1f}x to {figures['rtt_ms_per_op']:.1f} ms per "
            f"operation, more than queueing ({queue_growth:+.1f} ms){used}",
        )
    return StormDiagnosis(
        "unknown", figures, "NFS moved, but no layer stands out against the time before" + used
    )
