"""Each node's NFS client figures over a window (``storm.NfsFigures``), from the raw mountstats
counters a replay or the daemon reads: the numbers a checkpoint storm's bottleneck is named
from (storm.py).

``NfsMeter.observe(time, values, infos)`` takes each tick's raw frame (values aligned to the
series index, NaN where not observed) and keeps, per node, the running sums of the counters it
needs over all of a node's mounts and operations (the last observed value of each series, so
a tick without a node-exporter scrape changes nothing). ``snapshot()`` is those sums now;
``figures(older, newer)`` the per-node figures between two snapshots. Counters that went
backwards between them (an exporter restart) give NaN for that node, never a negative rate.
Series are found by metric name as the index grows (only the new ones are looked at).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..model import FloatArray, SeriesInfo
from .storm import NfsFigures

# quantity -> the node-exporter metrics summed into it (mountstats; rates and link speed)
METRICS: dict[str, tuple[str, ...]] = {
    "backlog": ("node_mountstats_nfs_transport_backlog_queue_total",),
    "sends": ("node_mountstats_nfs_transport_sends_total",),
    "queue_s": ("node_mountstats_nfs_operations_queue_time_seconds_total",),
    "rtt_s": ("node_mountstats_nfs_operations_response_time_seconds_total",),
    "execute_s": ("node_mountstats_nfs_operations_request_time_seconds_total",),
    "ops": ("node_mountstats_nfs_operations_requests_total",),
    "bytes": ("node_mountstats_nfs_read_bytes_total", "node_mountstats_nfs_write_bytes_total"),
    "link_bytes_per_s": ("node_infiniband_rate_bytes_per_second", "node_network_speed_bytes"),
}
QUANTITIES = tuple(METRICS)
# every raw counter a storm's bottleneck is read from (``detector export-selector`` keeps them)
NFS_METRICS = tuple(name for names in METRICS.values() for name in names)
_QUANTITY_OF = {metric: q for q, metrics in METRICS.items() for metric in metrics}


@dataclass(frozen=True, slots=True)
class NfsSnapshot:
    """The running sums at one time: ``sums[quantity index, node index]`` (``QUANTITIES``)."""

    time: float
    sums: FloatArray


class NfsMeter:
    """See the module docstring."""

    def __init__(self) -> None:
        self.nodes: list[str] = []
        self._node_id: dict[str, int] = {}
        self._columns = np.zeros(0, dtype=np.int64)
        self._quantity = np.zeros(0, dtype=np.int64)
        self._node = np.zeros(0, dtype=np.int64)
        self._last = np.zeros(0)
        self._scanned = 0
        self._time = math.nan

    def _scan(self, infos: Sequence[SeriesInfo]) -> None:
        columns, quantity, node = [], [], []
        for info in infos[self._scanned :]:
            q = _QUANTITY_OF.get(info.metric)
            if q is None or not info.node:
                continue
            if info.node not in self._node_id:
                self._node_id[info.node] = len(self.nodes)
                self.nodes.append(info.node)
            columns.append(info.column)
            quantity.append(QUANTITIES.index(q))
            node.append(self._node_id[info.node])
        self._scanned = len(infos)
        if columns:
            self._columns = np.concatenate((self._columns, np.asarray(columns, dtype=np.int64)))
            self._quantity = np.concatenate((self._quantity, np.asarray(quantity, np.int64)))
            self._node = np.concatenate((self._node, np.asarray(node, dtype=np.int64)))
            self._last = np.concatenate((self._last, np.full(len(columns), np.nan)))

    def observe(self, time: float, values: FloatArray, infos: Sequence[SeriesInfo]) -> None:
        """Take one tick's raw values (aligned to ``infos``, the series index's)."""
        if len(infos) > self._scanned:
            self._scan(infos)
        self._time = time
        if not self._columns.size:
            return
        seen = self._columns < values.shape[0]
        fresh = np.full(self._columns.shape[0], np.nan)
        fresh[seen] = values[self._columns[seen]]
        self._last = np.where(np.isnan(fresh), self._last, fresh)

    def snapshot(self) -> NfsSnapshot:
        """The running sums now (NaN for a node and quantity with no value yet)."""
        n = len(self.nodes)
        sums = np.zeros((len(QUANTITIES), n))
        known = np.zeros((len(QUANTITIES), n), dtype=bool)
        have = ~np.isnan(self._last)
        np.add.at(sums, (self._quantity[have], self._node[have]), self._last[have])
        known[self._quantity[have], self._node[have]] = True
        return NfsSnapshot(self._time, np.where(known, sums, np.nan))

    def figures(self, older: NfsSnapshot, newer: NfsSnapshot) -> list[NfsFigures]:
        """Per node (known to both snapshots), the figures between ``older`` and ``newer``."""
        n = min(older.sums.shape[1], newer.sums.shape[1])
        delta = newer.sums[:, :n] - older.sums[:, :n]
        delta[delta < 0] = np.nan  # a counter reset in between: no figure for that node
        return nfs_figures(delta, newer.time - older.time, self.link(newer)[:n])

    @staticmethod
    def link(snapshot: NfsSnapshot) -> FloatArray:
        """Each node's link rate, bytes per second (a gauge: its value in ``snapshot``)."""
        rate: FloatArray = snapshot.sums[QUANTITIES.index("link_bytes_per_s")]
        return rate


def nfs_figures(delta: FloatArray, span: float, link: FloatArray) -> list[NfsFigures]:
    """Per node, the figures of counter increases ``delta`` (``QUANTITIES`` x nodes; the link
    row unused) over ``span`` seconds, with the nodes' ``link`` rates; nodes without NFS
    operations in the window are left out."""
    if not span > 0 or delta.shape[1] == 0:
        return []
    q = {name: delta[i] for i, name in enumerate(QUANTITIES)}
    with np.errstate(divide="ignore", invalid="ignore"):
        rows = np.vstack(
            (
                q["backlog"] / q["sends"],
                q["queue_s"] / q["ops"],
                q["rtt_s"] / q["ops"],
                q["execute_s"] / q["ops"],
                q["bytes"] / span,
                link,
            )
        )
    rows[~np.isfinite(rows)] = np.nan
    return [
        NfsFigures(*(float(v) for v in rows[:, i]))
        for i in range(delta.shape[1])
        if not np.isnan(rows[1, i])
    ]
