"""What ``detector.jit.keep`` buys: the kernels that use it, compiled with it and without it.

    python bench/masked_stores.py [--columns 30000] [--ticks 200]

``keep`` stands on the "else keep the old value" side of the kernels' state updates so that
LLVM does not turn them into masked stores (``vmaskmovpd``; jit.py says why). Here every
kernel that calls it, and every kernel that calls one of those, is compiled twice from its own
source: once with ``keep`` and once with a plain identity in its place (what the code was
before). Both variants are compiled the same way here (no disk cache), so only ``keep``
differs. Printed:
- per kernel, the masked stores in each variant's machine code (AVX2's ``vmaskmov*`` to
  memory, AVX-512's stores under a ``{%k}`` mask);
- the median CPU time a tick of PeerDeviation's and ChangePoint's kernels on the realistic
  layout's peer and changepoint columns (bench/scorer_bench.py's ``rules_layout``), each
  variant with its own scorer state, interleaved tick by tick so the machine's drift is
  shared, and a decay pass (``decays2``) over the peer columns' times;
- whether the two variants' scores agree bit for bit on every tick (the script stops if not).
"""

from __future__ import annotations

import argparse
import inspect
import re
import statistics
import textwrap
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from numba import njit
from scorer_bench import TICK_S, rules_layout, stream

from detector.jit import keep
from detector.scorers import kernels, peer_kernels
from detector.scorers.changepoint import ChangePoint
from detector.scorers.peers import PeerDeviation

# callees first: each is looked up by name in the namespace its callers are compiled in
KERNELS = (
    (kernels, "_decays_rest"),
    (kernels, "decays"),
    (kernels, "decays2"),
    (kernels, "ew_step"),
    (kernels, "cusum_step"),
    (peer_kernels, "_peer_column"),
    (peer_kernels, "peer_step"),
)
MASKED_STORE = re.compile(
    r"^\s*(?:vp?maskmov\w+\s+%[xy]mm\d+,\s*%[xy]mm\d+,\s*[^,\s]*\(|vmov\w+\s+%[xyz]mm\d+,\s*"
    r"[^,\s]*\([^)]*\)\s*\{%k)",
    re.MULTILINE,
)


def compiled(keep_fn: Any) -> dict[str, Any]:
    """The kernels of ``KERNELS`` compiled anew with ``keep`` bound to ``keep_fn``."""
    namespace = {**vars(kernels), **vars(peer_kernels), "keep": keep_fn}
    for module, name in KERNELS:
        source = textwrap.dedent(inspect.getsource(getattr(module, name).py_func))
        exec(source.replace("@jit\n", "", 1), namespace)
        namespace[name] = njit(error_model="numpy", nogil=True)(namespace[name])
    return namespace


def masked_stores(fn: Any) -> int:
    return sum(len(MASKED_STORE.findall(fn.inspect_asm(sig))) for sig in fn.signatures)


def interleaved(steps: dict[str, Callable[[int], np.ndarray]], ticks: int) -> dict[str, float]:
    """Median CPU us a tick of each step (called with the tick's index), interleaved; the
    first 10 ticks (compilation, warm-up) left out. Stops if the steps' outputs differ."""
    spent: dict[str, list[int]] = {name: [] for name in steps}
    for i in range(ticks):
        outs = []
        for name, step in steps.items():
            start = time.process_time_ns()
            outs.append(step(i))
            spent[name].append(time.process_time_ns() - start)
        if not all(np.array_equal(o.view(np.int64), outs[0].view(np.int64)) for o in outs):
            raise SystemExit(f"masked_stores: the variants' outputs differ at tick {i}")
    return {name: statistics.median(v[10:]) / 1e3 for name, v in spent.items()}


def peers_step(ns: dict[str, Any], x: np.ndarray, layout: Any) -> Callable[[int], np.ndarray]:
    """A PeerDeviation of its own, its ticks through ``ns``'s peer_step (peers_parts' call)."""
    s = PeerDeviation()
    out = np.empty(x.shape[1])

    def step(i: int) -> np.ndarray:
        if i < 2:  # groups and state are built by the scorer's own update
            s.update(TICK_S * i, x[i], layout)
            return np.zeros(0)
        state = (s.smoothed, s.scale_var, s.scale_w, s.count, s.last_t, s.interval, s.late_run)
        assert s.baseline is not None
        habit = (s.habit_runs, s.habit_peaks, s.habit_lengths, s.run_start, s.run_last, s.run_peak)
        ns["peer_step"](
            TICK_S * i, x[i], None, s._groups, s._g, layout.direction, state, s._q,
            s.baseline.arrays(), s.baseline.params(), s._floor, habit, s._h, s._habit_last, out,
        )  # fmt: skip
        return out.copy()

    return step


def changepoint_step(ns: dict[str, Any], x: np.ndarray, layout: Any) -> Callable[[int], np.ndarray]:
    """A ChangePoint of its own, its ticks through ``ns``'s cusum_step (changepoint.py's call)."""
    s = ChangePoint()
    out = np.empty(x.shape[1])

    def step(i: int) -> np.ndarray:
        if i < 2:  # state is built by the scorer's own update
            s.update(TICK_S * i, x[i], layout)
            return np.zeros(0)
        base = s.baseline
        cusum = (s.s_pos, s.s_neg, s.n_pos, s.n_neg, s.last_t, s.change_t, s.peak)
        ns["cusum_step"](
            float(TICK_S * i), x[i], None, base.arrays(), base.params(), cusum, s._q,
            layout.direction, out,
        )  # fmt: skip
        return out.copy()

    return step


def decay_step(ns: dict[str, Any], last_t: np.ndarray, t: float) -> Callable[[int], np.ndarray]:
    """``ns``'s decays2 at time ``t`` over ``last_t`` (two half-lives), into arrays of its own."""
    a, b = np.empty(last_t.shape[0]), np.empty(last_t.shape[0])

    def step(i: int) -> np.ndarray:
        ns["decays2"](t, last_t, -1e-3, -1e-2, a, b)
        return np.concatenate([a, b])

    return step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--columns", type=int, default=30_000)
    parser.add_argument("--ticks", type=int, default=200)
    args = parser.parse_args()
    variants = {"keep": compiled(keep), "plain": compiled(njit(lambda value: value))}
    real, subsets = rules_layout(args.columns)
    x = stream(len(real), args.ticks)
    rows = {}
    for scorer, make in (("peers", peers_step), ("changepoint", changepoint_step)):
        layout = real.subset(subsets[scorer])
        xs = np.ascontiguousarray(x[:, subsets[scorer]])
        steps = {name: make(ns, xs, layout) for name, ns in variants.items()}
        rows[f"{scorer} ({xs.shape[1]} columns)"] = interleaved(steps, args.ticks)
        if scorer == "peers":  # a decay pass over the times the peers' state reached
            state = PeerDeviation()
            for i in range(args.ticks):
                state.update(TICK_S * i, xs[i], layout)
            t = TICK_S * args.ticks
            steps = {name: decay_step(ns, state.last_t, t) for name, ns in variants.items()}
            late = np.mean(state.last_t < t - TICK_S)
            rows[f"decays2 ({xs.shape[1]} columns, {late:.1%} late)"] = interleaved(steps, 200)
    print("masked stores in the machine code, with keep / with a plain identity:")
    for _, name in KERNELS:
        counts = [masked_stores(ns[name]) for ns in variants.values()]
        print(f"  {name:<14}{counts[0]:4d} /{counts[1]:4d}")
    print("median CPU us a tick, interleaved (outputs bit-identical on every tick):")
    print(f"  {'':<40}{'keep':>8}{'plain':>8}  plain / keep")
    for row, us in rows.items():
        print(f"  {row:<40}{us['keep']:8.1f}{us['plain']:8.1f}  {us['plain'] / us['keep']:.2f}x")


if __name__ == "__main__":
    main()
