"""What float32 arithmetic would buy the scorers: the robust EW update in float64 and float32.

    python bench/float32_ew.py [--columns 15520] [--ticks 50] [--rounds 25]

The per-column operations of ``kernels.ew_column`` (the robust EW baseline every z-score,
changepoint and habit baseline runs) written out once and compiled twice, every operand
float64 and then every operand float32. The kernel itself cannot be reused for this: its
constants and literals are float64, so given float32 arrays it would compute in float64. The
two run interleaved, round by round, on the same vector width as the scorers (``detector.jit``
is imported first); printed: each one's median CPU time a tick and their ratio. Only a speed
figure: float32 keeps ~7 significant digits, so the scores differ and would need their own
validation of detection.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from numba import njit

_UPDATE = """
def update(t, x, mean, var, w_mean, w_var, count, last_t, decay, z_out):
    warmup, clip, floor_rel, floor_abs, relearn = F(20.0), F(4.0), F(0.0), F(1.0), F(5.0)
    one, zero, cap = F(1.0), F(0.0), F(50.0)
    for j in range(x.shape[0]):
        xj = x[j]
        obs = abs(xj) <= F(1e30)
        m, v, lt, wm, wv, c = mean[j], var[j], last_t[j], w_mean[j], w_var[j], count[j]
        elapsed = (t - lt) if obs else zero
        d = decay[j] if obs else one
        wm = wm * d
        wv = wv * d
        c = c * (wm >= F(1e-6))
        warm = c >= warmup
        floor = m * floor_rel
        floor = floor * floor + floor_abs
        sigma = np.sqrt(max(floor, v))
        resid = (xj - m) if obs else zero
        zj = resid / sigma
        bound = (sigma * clip) if warm else F(np.inf)
        resid = max(min(resid, bound), -bound)
        accept = obs & ((abs(zj) <= clip) | (c < warmup) | (wv < relearn))
        wm = wm + obs
        wv = wv + accept
        b = accept / max(wv, one)
        mean[j] = m + resid / max(wm, one)
        var[j] = (resid * resid * b + v) * (one - b)
        w_mean[j] = wm
        w_var[j] = wv
        count[j] = c + obs
        last_t[j] = lt + elapsed
        z_out[j] = max(min(zj, cap), -cap) * warm
"""


def compiled(dtype: type[np.floating[Any]]) -> Callable[..., None]:
    """``_UPDATE`` compiled with every constant of ``dtype``."""
    namespace: dict[str, Any] = {"np": np, "F": dtype}
    exec(_UPDATE, namespace)
    return njit(error_model="numpy")(namespace["update"])  # type: ignore[no-any-return]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--columns", type=int, default=15_520)  # the realistic peers columns
    parser.add_argument("--ticks", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=25)
    args = parser.parse_args()
    n = args.columns
    rng = np.random.default_rng(0)
    kinds = {"float64": np.float64, "float32": np.float32}
    updates = {name: compiled(dtype) for name, dtype in kinds.items()}
    spent: dict[str, list[float]] = {name: [] for name in kinds}
    for _ in range(args.rounds):
        for name, dtype in kinds.items():
            x = rng.normal(size=n).astype(dtype)
            state = [np.zeros(n, dtype), np.ones(n, dtype)]
            state += [np.full(n, 50, dtype) for _ in range(3)]
            state += [np.zeros(n, dtype), np.full(n, 0.99, dtype), np.empty(n, dtype)]
            update, t = updates[name], dtype(15.0)
            update(t, x, *state)  # compiled on the first round, warm after
            start = time.process_time_ns()
            for _ in range(args.ticks):
                update(t, x, *state)
            spent[name].append((time.process_time_ns() - start) / args.ticks / 1e3)
    us = {name: statistics.median(v) for name, v in spent.items()}
    for name, value in us.items():
        print(f"{name}: {value:.1f} us a tick of {n} columns ({value * 1e3 / n:.2f} ns a column)")
    print(
        f"float64 / float32: {us['float64'] / us['float32']:.2f}x (median of {args.rounds} rounds)"
    )


if __name__ == "__main__":
    main()
