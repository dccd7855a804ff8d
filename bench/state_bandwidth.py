"""The least time a tick can take on this machine: the scorers' state read and written once.

    python bench/state_bandwidth.py [--columns 30000] [--rounds 40]

Every scorer reads and writes its whole state each tick. Here a kernel touches arrays of the
same size as the realistic path's state (bench/scorer_bench.py's ``rules_layout``, each
scorer's ``state_dict`` after a few ticks) once each, the cheapest vectorized update there is
(``s = s * c + 1``), so its time is the memory's, not the arithmetic's. Printed: the state's
bytes, the median time of one such pass, the read+write bandwidth it implies, and the
updates/s the realistic path could not exceed even with free arithmetic; then the same for
float32 state (half the bytes). A floor for the 150M/s goal, not a measurement of the
scorers.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
from numba import njit
from scorer_bench import SCORERS, TICK_S, rules_layout, state_bytes, stream


@njit(nogil=True)
def touch(state: np.ndarray, c: float) -> None:
    """Read and write every element of ``state`` (rows of one column count) once."""
    for i in range(state.shape[0]):
        row = state[i]
        for j in range(row.shape[0]):
            row[j] = row[j] * c + 1.0


def realistic_state(columns: int) -> tuple[int, int]:
    """(bytes of the realistic path's scorer state after a few ticks, its column count)."""
    real, subsets = rules_layout(columns)
    x = stream(len(real), 3, subsets.get("counts"))
    scorers = []
    for name, idx in subsets.items():
        scorer = SCORERS[name]()
        layout, xs = real.subset(idx), np.ascontiguousarray(x[:, idx])
        for i in range(x.shape[0]):
            scorer.update(TICK_S * i, xs[i], layout)
        scorers.append(scorer)
    return state_bytes(scorers), len(real)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--columns", type=int, default=30_000)
    parser.add_argument("--rounds", type=int, default=40)
    args = parser.parse_args()
    nbytes, columns = realistic_state(args.columns)
    print(f"realistic path: {columns} columns, state {nbytes / 1e6:.2f} MB")
    rows = nbytes // (8 * columns)  # the state's values per column (float64 today)
    for dtype in (np.float64, np.float32):
        state = np.random.default_rng(0).random((rows, columns)).astype(dtype)
        touch(state, dtype(0.5))  # compile
        spent = []
        for _ in range(args.rounds):
            start = time.perf_counter()
            touch(state, dtype(0.5))
            spent.append(time.perf_counter() - start)
        seconds = statistics.median(spent)
        print(
            f"{np.dtype(dtype).name} state ({state.nbytes / 1e6:.2f} MB): one read+write pass "
            f"{seconds * 1e6:.1f} us ({2 * state.nbytes / seconds / 1e9:.1f} GB/s): at most "
            f"{columns / seconds / 1e6:.0f}M updates/s with free arithmetic"
        )


if __name__ == "__main__":
    main()
