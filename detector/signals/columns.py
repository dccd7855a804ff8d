"""The signal columns' table: per column what it reads, how, and whose it is.

``SignalMap`` (signals.py) decides which columns exist and appends them here; columns are
only appended, in index order. This module holds the per-column lists and builds from them
the arrays a tick reads (``arrays``) and the layout the scorers group by (``layout``); the
caller caches both and rebuilds them when columns are added or moved.
"""

from __future__ import annotations

import zlib
from typing import Any

import numpy as np

from ..model import ColumnLayout

# column kinds: what a column's value is computed from (signal_values.transformed)
LEVEL, RATE, EDGE, MISSING, GPU_COUNT, RATIO, FROZEN = 0, 1, 2, 3, 4, 5, 6
TRANSFORM = {"level": LEVEL, "rate": RATE, "edge": EDGE, "ratio": RATIO}
_DIRECTION = {"up": 1, "down": -1, "both": 0}


def gpu_number(label: str) -> int:
    """The layout's GPU int: the label itself when it is a number, else a stable hash."""
    if label.isdigit():
        return int(label)
    return 1_000_000 + zlib.crc32(label.encode()) % 1_000_000_000


def _id(table: dict[str, int], names: list[str], name: str) -> int:
    found = table.get(name)
    if found is None:
        found = table[name] = len(names)
        names.append(name)
    return found


class SignalColumns:
    """Per signal column: its series (-1: computed), kind, scale, signal, node, GPU, cohort,
    team, direction, weight, entity (presence columns), denominator series (ratio columns,
    -1 until found), rounding step and log unit."""

    def __init__(self) -> None:
        self.series: list[int] = []
        self.kind: list[int] = []
        self.scale: list[float] = []
        self.signal: list[int] = []
        self.node: list[int] = []
        self.gpu: list[int] = []
        self.gpu_label: list[str | None] = []
        self.cohort: list[int] = []
        self.team: list[int] = []  # the GPU's team id (0: node columns)
        self.direction: list[int] = []
        self.weight: list[float] = []
        self.entity: list[int] = []  # gpu entity id (MISSING) or node id (GPU_COUNT), else -1
        self.denom: list[int] = []  # RATIO: series column of the denominator, -1 unknown yet
        self.resolution: list[float] = []  # rounding step of the column's values (0: none)
        self.log_unit: list[float] = []  # log space: ln(1 + value / unit) (0: none)
        self.signal_names: list[str] = []
        self.node_names: list[str] = []
        self.node_columns: dict[int, list[int]] = {}  # node id -> its columns
        self._signal_ids: dict[str, int] = {}
        self._node_ids: dict[str, int] = {}
        self._fixed: dict[str, np.ndarray] = {}  # layout's arrays of what never changes

    def __len__(self) -> int:
        return len(self.series)

    def node_id(self, node: str) -> int:
        """The node's id (new nodes get the next)."""
        return _id(self._node_ids, self.node_names, node)

    def known_node(self, node: str) -> int:
        """The node's id, -1 when it has none yet."""
        return self._node_ids.get(node, -1)

    def append(
        self,
        series: int,
        kind: int,
        name: str,
        node: str,
        gpu: str | None,
        cohort: int,
        team: int,
        **rule: Any,
    ) -> int:
        """Add a column reading ``series`` (-1: computed) as ``kind``, signal ``name`` of
        ``node`` (and ``gpu``), with the rule's fields (direction, weight, and optionally
        scale, resolution, log_unit, entity_id); returns its index."""
        self.series.append(series)
        self.kind.append(kind)
        self.scale.append(float(rule.get("scale", 1.0)))
        self.resolution.append(float(rule.get("resolution", 0.0)))
        self.log_unit.append(float(rule.get("log_unit", 0.0)))
        self.signal.append(_id(self._signal_ids, self.signal_names, name))
        node_id = self.node_id(node)
        column = len(self.node)
        self.node_columns.setdefault(node_id, []).append(column)
        self.node.append(node_id)
        self.gpu.append(-1 if gpu is None else gpu_number(gpu))
        self.gpu_label.append(gpu)
        self.cohort.append(cohort)
        self.team.append(team)
        self.direction.append(_DIRECTION[rule["direction"]])
        self.weight.append(float(rule["weight"]))
        self.entity.append(int(rule.get("entity_id", -1)))
        self.denom.append(-1)
        return column

    def arrays(self) -> dict[str, np.ndarray]:
        """The per-column index arrays a tick reads (signal_values.transformed and the
        presence columns): which columns are of each kind, their scales and units."""
        kind = np.asarray(self.kind, dtype=np.int64)
        series = np.asarray(self.series, dtype=np.int64)
        scale = np.asarray(self.scale, dtype=np.float64)
        level = np.flatnonzero(kind == LEVEL)
        rate = np.flatnonzero(kind == RATE)
        weight = np.asarray(self.weight, dtype=np.float64)
        weight.setflags(write=False)  # handed out by ``SignalMap.weights`` every tick
        return {
            "series": series,
            "scale": scale,
            "level": level,
            "level_scale": scale[level],
            "rate": rate,
            "rate_scale": scale[rate],
            "edge": np.flatnonzero(kind == EDGE),
            "ratio": np.flatnonzero(kind == RATIO),
            "rounded": np.flatnonzero(np.asarray(self.resolution) > 0),
            "resolution": np.asarray(self.resolution, dtype=np.float64),
            "logged": np.flatnonzero(np.asarray(self.log_unit) > 0),
            "log_unit": np.asarray(self.log_unit, dtype=np.float64),
            "denom": np.asarray(self.denom, dtype=np.int64),
            "backed": np.flatnonzero(series >= 0),
            "computed": np.flatnonzero(series < 0),
            "missing": np.flatnonzero(kind == MISSING),
            "count": np.flatnonzero(kind == GPU_COUNT),
            "entity": np.asarray(self.entity, dtype=np.int64),
            "is_rate": kind == RATE,
            "frozen": np.flatnonzero(kind == FROZEN),
            "weight": weight,
        }

    def layout(self) -> ColumnLayout:
        """Per-column signal, node, gpu, cohort, direction, resolution and team. A column's
        signal, node, GPU, direction and resolution never change, so their arrays (read-only)
        are rebuilt only when columns were added; cohorts and teams move, and are read anew."""
        built = self._fixed.get("signal")
        if built is None or built.shape[0] != len(self.series):
            fixed = {
                "signal": np.asarray(self.signal, dtype=np.int64),
                "node": np.asarray(self.node, dtype=np.int64),
                "gpu": np.asarray(self.gpu, dtype=np.int64),
                "direction": np.asarray(self.direction, dtype=np.int64),
                "resolution": np.asarray(self.resolution, dtype=np.float64),
            }
            for array in fixed.values():
                array.setflags(write=False)
            self._fixed = fixed
        return ColumnLayout(
            **self._fixed,
            cohort=np.asarray(self.cohort, dtype=np.int64),
            signal_names=tuple(self.signal_names),
            node_names=tuple(self.node_names),
            team=np.asarray(self.team, dtype=np.int64),
        )

    def names(self, i: int) -> tuple[str, str, str | None, int]:
        """(signal name, node, gpu label or None, series column or -1 when computed)."""
        return (
            self.signal_names[self.signal[i]],
            self.node_names[self.node[i]],
            self.gpu_label[i],
            self.series[i],
        )
