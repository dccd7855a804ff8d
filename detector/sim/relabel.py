"""A new job label at each run (``Scenario.job_label_runs``): the series under each identity.

A scheduler that writes file_sd gives a node's targets its job's id, a new one at every run
(a Slurm job id, a Kubernetes Job's generated name). Prometheus then stores every series of
the node under a new identity from the run's first scrape on: the old series stop, new ones
start. Here each series of the cluster's fixed list has one copy per label value its node
takes (none before its first run, then ``<job>-<run>``), and each tick's values go to the
copies its nodes hold at that tick; the other copies read NaN (not exposed).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from ..model import FloatArray, IntArray, Labels


@dataclass(frozen=True, slots=True)
class RunLabels:
    series: list[tuple[str, Labels]]  # every copy, each series' copies in run order
    offset: IntArray  # per series of the fixed list: the index of its first copy
    node_of: IntArray  # per series of the fixed list: its node
    copy: NDArray[np.int64]  # (nodes, ticks): which copy of its series a node sends

    @classmethod
    def build(
        cls,
        series: list[tuple[str, Labels]],
        node_of: IntArray,
        label: str,
        jobs: dict[int, str],
        run: NDArray[np.int16],
    ) -> RunLabels:
        """``series`` and their ``node_of``; ``jobs``: node -> job name; ``run`` (nodes,
        ticks): the run of its job the node last joined (0: none yet)."""
        copy = np.zeros(run.shape, dtype=np.int64)
        extras: list[list[tuple[tuple[str, str], ...]]] = []
        for n in range(run.shape[0]):
            values = np.unique(run[n])
            copy[n] = np.searchsorted(values, run[n])
            job = jobs.get(n)
            extras.append(
                [() if v == 0 or job is None else ((label, f"{job}-{v}"),) for v in values]
            )
        out: list[tuple[str, Labels]] = []
        offset = np.empty(len(series), dtype=np.int64)
        for i, (name, labels) in enumerate(series):
            offset[i] = len(out)
            out.extend((name, tuple(sorted(labels + extra))) for extra in extras[node_of[i]])
        return cls(out, offset, np.asarray(node_of, dtype=np.int64), copy)

    def frame(self, k: int, values: FloatArray) -> FloatArray:
        """Tick ``k``'s ``values`` (aligned to the fixed list) placed on the copies sent."""
        out = np.full(len(self.series), np.nan)
        out[self.offset + self.copy[self.node_of, k]] = values
        return out
