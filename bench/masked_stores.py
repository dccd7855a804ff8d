"""What ``detector.jit.keep`` buys: the scorers' kernels compiled with it and without it.

    python bench/masked_stores.py [--columns 30000] [--ticks 200]

``keep`` stands on the "else keep the old value" side of the kernels' state updates so that
LLVM does not turn them into masked stores (``vmaskmovpd``; jit.py says why). Here every
kernel that calls it, and every kernel that calls one of those, is compiled twice from its own
source: once with ``keep`` and once with a plain identity in its place (what the code was
before). Both variants are compiled the same way here (no disk cache), so only ``keep``
differs. Each scorer of the realistic path (bench/scorer_bench.py's ``rules_layout``) runs
twice, one instance per variant, its own ``update`` on its own columns, the kernel names its
module calls bound to that variant's kernels for the call; the two run interleaved tick by
tick so the machine's drift is shared. Printed:
- per kernel, the masked stores in each variant's machine code (AVX2's ``vmaskmov*`` to
  memory, AVX-512's stores under a ``{%k}`` mask);
- per scorer and for the whole path, the median CPU time a tick of each variant, and a decay
  pass (``decays2``) over the times the peer columns' state reached;
- that the two variants' scores agree bit for bit on every tick (the script stops if not).
"""

from __future__ import annotations

import argparse
import inspect
import re
import statistics
import textwrap
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np
from numba import njit
from scorer_bench import SCORERS, TICK_S, rules_layout, stream

from detector.jit import keep
from detector.scorers import changepoint, counts, health, peers, zscore
from detector.scorers.kernels import counts_health as counts_health_kernels
from detector.scorers.kernels import ew as kernels
from detector.scorers.kernels import peers as peer_kernels

# callees first: each is looked up by name in the namespace its callers are compiled in
KERNELS = (
    (kernels, "_decays_rest"),
    (kernels, "decays"),
    (kernels, "decays2"),
    (kernels, "ew_step"),
    (kernels, "cusum_step"),
    (peer_kernels, "_peer_column"),
    (peer_kernels, "peer_step"),
    (counts_health_kernels, "count_step"),
    (counts_health_kernels, "health_step"),
)
# per scorer, the module whose global names its update calls, and those names
CALLS: dict[str, tuple[ModuleType, tuple[str, ...]]] = {
    "zscore": (zscore, ("ew_step",)),
    "changepoint": (changepoint, ("cusum_step",)),
    "peers": (peers, ("peer_step",)),
    "counts": (counts, ("count_step",)),
    "health": (health, ("health_step",)),
}
MASKED_STORE = re.compile(
    r"^\s*(?:vp?maskmov\w+\s+%[xy]mm\d+,\s*%[xy]mm\d+,\s*[^,\s]*\(|vmov\w+\s+%[xyz]mm\d+,\s*"
    r"[^,\s]*\([^)]*\)\s*\{%k)",
    re.MULTILINE,
)


def compiled(keep_fn: Any) -> dict[str, Any]:
    """The kernels of ``KERNELS`` compiled anew with ``keep`` bound to ``keep_fn``."""
    namespace = {**vars(kernels), **vars(peer_kernels), **vars(counts_health_kernels)}
    namespace["keep"] = keep_fn
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


def scorer_step(
    name: str, scorer: Any, ns: dict[str, Any], x: np.ndarray, layout: Any
) -> Callable[[int], np.ndarray]:
    """``scorer``'s own update of tick ``i``, its module's kernels those of ``ns`` meanwhile."""
    module, names = CALLS[name]
    ours = {n: ns[n] for n in names}

    def step(i: int) -> np.ndarray:
        saved = {n: getattr(module, n) for n in names}
        vars(module).update(ours)
        try:
            return np.array(scorer.update(TICK_S * i, x[i], layout))
        finally:
            vars(module).update(saved)

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
    x = stream(len(real), args.ticks, subsets.get("counts"))
    rows, scorers = {}, {}
    for name, idx in subsets.items():
        layout, xs = real.subset(idx), np.ascontiguousarray(x[:, idx])
        scorers[name] = {v: SCORERS[name]() for v in variants}
        steps = {v: scorer_step(name, scorers[name][v], variants[v], xs, layout) for v in variants}
        rows[f"{name} ({idx.size} columns)"] = interleaved(steps, args.ticks)
    rows["realistic path (sum)"] = {v: sum(us[v] for us in rows.values()) for v in variants}
    if "peers" in scorers:  # a decay pass over the times the peers' state reached
        last_t, t = scorers["peers"]["keep"].last_t, TICK_S * args.ticks
        steps = {v: decay_step(ns, last_t, t) for v, ns in variants.items()}
        late = np.mean(last_t < t - TICK_S)
        rows[f"decays2 ({last_t.shape[0]} peer times, {late:.1%} late)"] = interleaved(steps, 200)
    print("masked stores in the machine code, with keep / with a plain identity:")
    for _, name in KERNELS:
        found = [masked_stores(ns[name]) for ns in variants.values()]
        print(f"  {name:<14}{found[0]:4d} /{found[1]:4d}")
    print("median CPU us a tick, interleaved (outputs bit-identical on every tick):")
    print(f"  {'':<42}{'keep':>8}{'plain':>8}  plain / keep")
    for row, us in rows.items():
        print(f"  {row:<42}{us['keep']:8.1f}{us['plain']:8.1f}  {us['plain'] / us['keep']:.2f}x")


if __name__ == "__main__":
    main()
