"""Where PeerDeviation's tick goes: its kernel whole, and with one part taken out at a time.

    python bench/peers_parts.py [--columns 30000] [--ticks 200]

``peer_kernels.peer_step`` is compiled from its own source as it is, and once per part with
that part replaced by a constant stand-in: the group statistics (``_stats``), the spread of
each group's median and sigma to its columns, the decays, the habit baseline (``ew_step``).
Every variant keeps its own PeerDeviation state and all run on the same ticks of the
realistic layout's peer columns (bench/scorer_bench.py's ``rules_layout``), interleaved tick
by tick so the machine's drift is shared; printed: the median CPU time a tick of each and
what the part costs (whole minus variant). The stand-ins change the scores, so a part's cost
is approximate (a variant may take other branches). A part whose source no longer matches
stops the script: the kernel changed and this must follow it.
"""

from __future__ import annotations

import argparse
import inspect
import statistics
import textwrap
import time
from typing import Any

import numpy as np
from numba import njit
from scorer_bench import TICK_S, rules_layout, stream

from detector.scorers.kernels import ew as kernels
from detector.scorers.kernels import peers as peer_kernels
from detector.scorers.peers import PeerDeviation

WITHOUT = {
    "group statistics": (
        "med_g, sigma_g = _stats(x, groups, int(g[0]), g[1], g[2])",
        "med_g, sigma_g = np.full(groups[3].max() + 1, 100.0), np.ones(groups[3].max() + 1)",
    ),
    "spread to columns": (
        "med[j] = med_g[row_of[b0 + j]]\n            sigma[j] = sigma_g[row_of[b0 + j]]",
        "med[j] = med_g[0]\n            sigma[j] = sigma_g[0]",
    ),
    "decays": (
        "if neg_inv_smooth != 0.0:\n            decays2(t, st[4], neg_inv_scale, neg_inv_smooth,"
        " scale_d[:m], smooth_d[:m])\n        else:\n            decays(t, st[4], neg_inv_scale,"
        " scale_d[:m])",
        "scale_d[:m] = 0.99\n        smooth_d[:m] = 0.5",
    ),
    "habit baseline": ("has_base = base[0].shape[0] > 0", "has_base = False"),
}


def variant(source: str, old: str, new: str) -> Any:
    """``peer_step`` compiled from ``source`` with ``old`` replaced by ``new``."""
    if old not in source:
        raise SystemExit(f"peers_parts: peer_step no longer contains {old!r}: update WITHOUT")
    namespace = {**vars(peer_kernels), **vars(kernels)}
    exec(source.replace(old, new), namespace)
    return njit(error_model="numpy")(namespace["peer_step"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--columns", type=int, default=30_000)
    parser.add_argument("--ticks", type=int, default=200)
    args = parser.parse_args()
    source = textwrap.dedent(inspect.getsource(peer_kernels.peer_step.py_func))
    source = source.replace("@jit\n", "", 1)
    steps = {"whole": variant(source, "", "")}
    steps |= {f"without {part}": variant(source, *swap) for part, swap in WITHOUT.items()}
    real, subsets = rules_layout(args.columns)
    layout = real.subset(subsets["peers"])
    x = np.ascontiguousarray(stream(len(real), args.ticks)[:, subsets["peers"]])
    scorers = {name: PeerDeviation() for name in steps}
    spent: dict[str, list[int]] = {name: [] for name in steps}
    out = np.empty(x.shape[1])
    for i in range(args.ticks):
        for name, step in steps.items():
            s = scorers[name]
            if i < 2:  # groups, state and compilation: not timed
                s.update(TICK_S * i, x[i], layout)
                continue
            state = (
                s.smoothed, s.scale_var, s.scale_w, s.count, s.last_t, s.interval, s.late_run
            )  # fmt: skip
            assert s.baseline is not None
            habit = (
                s.habit_runs, s.habit_peaks, s.habit_lengths, s.run_start, s.run_last,
                s.run_peak,
            )  # fmt: skip
            start = time.process_time_ns()
            step(
                TICK_S * i, x[i], None, s._groups, s._g, layout.direction, state, s._q,
                s.baseline.arrays(), s.baseline.params(), s._floor, habit, s._h,
                s._habit_last, out,
            )  # fmt: skip
            spent[name].append(time.process_time_ns() - start)
    us = {name: statistics.median(v[10:]) / 1e3 for name, v in spent.items()}
    print(f"peer_step on {x.shape[1]} columns, median CPU us a tick over {args.ticks - 12} ticks")
    for name, value in us.items():
        cost = "" if name == "whole" else f"   (the part: {us['whole'] - value:.1f} us)"
        print(f"{name:<30}{value:8.1f}{cost}")


if __name__ == "__main__":
    main()
