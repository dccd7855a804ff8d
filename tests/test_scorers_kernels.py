"""Scorer kernels: the decay pass, the sorting network, and compiled == interpreted."""

from __future__ import annotations

import itertools
import json
import os
import re
import subprocess
import sys
from typing import Any

import numpy as np
import pytest

from detector import jit
from detector.scorers.kernels.ew import decays, decays2
from detector.scorers.kernels.peers import _sorted8

# Scores of every kernel-backed scorer on a small seeded cluster, printed as JSON; run in this
# process (compiled) and in a child with NUMBA_DISABLE_JIT=1 (the plain-Python fallback used
# where executable memory is denied).
_RUN = """
import json, sys
import numpy as np
from detector.scorers.changepoint import ChangePoint
from detector.scorers.counts import CountBurst
from detector.scorers.health import TelemetryHealth
from detector.scorers.peers import PeerDeviation
from detector.scorers.registry import grid_layout
from detector.scorers.zscore import RobustZScore

def scores():
    layout = grid_layout(6, 8, ("a", "b"), ("n", "health_up", "health_scrape_duration"),
                         cohorts=2, directions={"a": 1, "b": -1})
    rng = np.random.default_rng(7)
    x = 50.0 + rng.normal(size=(60, len(layout)))
    x[30:, ::5] += 9.0
    x[rng.random(x.shape) < 0.1] = np.nan
    x[:, layout.signal == 3] = 1.0
    scorers = [RobustZScore(warmup=5), ChangePoint(warmup=5, half_life_s=300.0),
               PeerDeviation(warmup=2), CountBurst(warmup_s=60.0), TelemetryHealth(warmup=5)]
    out = []
    for i, row in enumerate(x):
        t = 15.0 * i + (40.0 if i > 45 else 0.0)
        out.append([s.update(t, np.abs(row) if s.name == "counts" else row, layout).tolist()
                    for s in scorers])
    return out

if __name__ == "__main__":
    json.dump(scores(), sys.stdout)
"""


def test_decays_match_exp2_for_irregular_elapsed_times() -> None:
    """Repeated, odd, negative and infinite elapsed times all get exp2(max(e, 0) * rate)."""
    rng = np.random.default_rng(0)
    last_t = 1000.0 - rng.choice([15.0, 15.0, 15.0, 30.0, 7.5, -5.0], size=500)
    last_t[[3, 200]] = -np.inf
    out = np.empty(500)
    decays(1000.0, last_t, -1.0 / 3600.0, out)
    expected = np.exp2(np.maximum(1000.0 - last_t, 0.0) * (-1.0 / 3600.0))
    np.testing.assert_allclose(out, expected, rtol=1e-15, atol=0.0)
    assert 0.0 == out[3]


def test_decays_are_exact_whichever_column_comes_first() -> None:
    """A first column that missed a tick (or was never observed: NaN) leaves most columns odd;
    every decay is still exp2(max(e, 0) * rate), bit for bit, as is decays2's at both rates."""
    rng = np.random.default_rng(1)
    for first in (985.0, 970.0, np.nan, -np.inf):
        last_t = 1000.0 - rng.choice([15.0] * 18 + [30.0, 45.0], size=400)
        last_t[0] = first
        last_t[rng.random(400) < 0.05] = np.nan
        expected = [np.exp2(np.maximum(1000.0 - last_t, 0.0) * r) for r in (-1 / 600, -1 / 30)]
        out, a, b = np.empty(400), np.empty(400), np.empty(400)
        decays(1000.0, last_t, -1 / 600, out)
        decays2(1000.0, last_t, -1 / 600, -1 / 30, a, b)
        for got, want in ((out, expected[0]), (a, expected[0]), (b, expected[1])):
            ok = ~np.isnan(last_t)
            assert np.array_equal(want[ok], got[ok])


def test_sorting_network_sorts_every_order_with_ties_and_padding() -> None:
    """The 19-comparator network sorts all orders of 8 values (ties, +inf padding)."""
    values = (3.0, -1.0, 3.0, np.inf, 0.5, -7.0, np.inf, 2.0)
    for perm in itertools.islice(itertools.permutations(values), 0, None, 7):
        assert sorted(values) == list(_sorted8(perm))


def _scores_here_and_in_child(env: dict[str, str]) -> tuple[np.ndarray, np.ndarray]:
    """``_RUN``'s scores computed in this process and in a child run with ``env``."""
    namespace: dict[str, object] = {"__name__": "kernels_run"}
    exec(compile(_RUN, "kernels_run", "exec"), namespace)
    here = np.array(namespace["scores"]())  # type: ignore[operator]
    proc = subprocess.run(
        [sys.executable, "-c", _RUN], env=env, capture_output=True, text=True, check=True
    )
    return here, np.array(json.loads(proc.stdout))


def test_interpreted_kernels_give_the_compiled_scores() -> None:
    """Where numba cannot JIT, the same kernels run as Python: same scores (to exp2's ulp)."""
    compiled, interpreted = _scores_here_and_in_child({**os.environ, "NUMBA_DISABLE_JIT": "1"})
    assert compiled.shape == interpreted.shape
    assert compiled.max() > 3.0  # the planted shift scores: the comparison is not all zeros
    np.testing.assert_allclose(interpreted, compiled, rtol=1e-9, atol=1e-9)


def test_disabled_jit_leaves_numba_unloaded_and_says_interpreted() -> None:
    """NUMBA_DISABLE_JIT=1: the daemon's modules load without numba (its ~55 MB unused) and
    report the kernels as interpreted; numba's own spelling of the switch is honoured."""
    probe = (
        "import sys, detector.service, detector.jit as j; print('numba' in sys.modules, j.COMPILED)"
    )
    env = {**os.environ, "NUMBA_DISABLE_JIT": "1"}
    child = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True)
    assert "False False" == child.stdout.strip(), child.stderr
    assert (True, False, False) == tuple(
        jit.jit_disabled({"NUMBA_DISABLE_JIT": v}) for v in ("1", "0", "")
    )
    assert not jit.jit_disabled({})


_MDWE_PROBE = """
import ctypes, sys
if ctypes.CDLL(None, use_errno=True).prctl(65, 1, 0, 0, 0) != 0:  # PR_SET_MDWE
    sys.exit(77)
import detector.service, detector.jit as j
print("llvmlite.binding" in sys.modules, j.COMPILED, j.executable_memory_allowed())
"""


def test_no_executable_memory_leaves_numba_unloaded() -> None:
    """Under the kernel's W^X rule (PR_SET_MDWE, as systemd's MemoryDenyWriteExecute=yes) the
    probe says no and numba is not imported: no half-loaded llvmlite, kernels interpreted."""
    child = subprocess.run([sys.executable, "-c", _MDWE_PROBE], capture_output=True, text=True)
    if child.returncode == 77:
        pytest.skip("kernel without PR_SET_MDWE (Linux < 6.3)")
    assert "False False False" == child.stdout.strip(), child.stderr[-2000:]
    assert jit.executable_memory_allowed()  # this process: compiled kernels


def test_wide_vectors_leave_an_operator_choice_alone() -> None:
    """An operator's NUMBA_CPU_FEATURES or NUMBA_CPU_NAME is kept as it is."""
    for key in ("NUMBA_CPU_FEATURES", "NUMBA_CPU_NAME"):
        assert jit.wide_vector_features({key: "chosen"}) is None


def test_wide_vectors_give_the_256_bit_scores_bit_for_bit() -> None:
    """On an AVX-512 CPU the kernels compile with 512-bit vectors (this process) and score
    exactly as with LLVM's 256-bit preference (a child given the host's own features)."""
    from numba.core.registry import cpu_target

    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CPU_FEATURES"}
    wide_features = jit.wide_vector_features(env)
    if wide_features is None:
        pytest.skip("no AVX-512 JIT here: the kernels have one vector width")
    assert cpu_target.target_context.codegen()._tm_features == wide_features
    host = wide_features.removesuffix(f",{jit.WIDE_VECTORS}")
    wide, narrow = _scores_here_and_in_child({**env, "NUMBA_CPU_FEATURES": host})
    assert wide.max() > 3.0  # the planted shift scores: the comparison is not all zeros
    assert np.array_equal(wide, narrow, equal_nan=True)


_SPECIAL = np.array([-0.0, 0.0, np.nan, -np.nan, np.inf, -np.inf, 5e-324, -1.5e308, 3.0])


def _kept_store_loop(keep_fn: object) -> Any:
    """``a[j] = 1.0 if c[j] else keep_fn(a[j])`` over arrays ``a`` and ``c``, compiled."""
    from numba import njit

    @njit(error_model="numpy")  # type: ignore[misc]
    def update(a: np.ndarray, c: np.ndarray) -> None:
        for j in range(a.shape[0]):
            old = a[j]
            a[j] = 1.0 if c[j] else keep_fn(old)  # type: ignore[operator]

    return update


def test_keep_returns_every_float_bit_for_bit_compiled_and_interpreted() -> None:
    """keep (LLVM's canonicalize when compiled) changes no bit of -0.0, NaN, inf or a
    subnormal, and the stores it stands in keep the old values exactly."""
    assert all(np.float64(jit.keep(v)).view(np.int64) == v.view(np.int64) for v in _SPECIAL)
    rng = np.random.default_rng(3)
    values = np.tile(_SPECIAL, 300)
    set_mask = rng.random(values.size) < 0.5
    out = values.copy()
    _kept_store_loop(jit.keep)(out, set_mask)
    assert np.array_equal(out[~set_mask].view(np.int64), values[~set_mask].view(np.int64))
    assert (out[set_mask] == 1.0).all()


def test_keep_keeps_a_vectorized_update_free_of_masked_stores() -> None:
    """Where LLVM compiles ``a[j] = new if c else a[j]`` to a masked store (x86 with AVX),
    the same loop with keep stores plainly (jit.keep's docstring: masked stores run as
    microcode on AMD's Zen)."""
    from numba import njit

    def stores(keep_fn: object) -> int:
        update = _kept_store_loop(keep_fn)
        update(np.zeros(64), np.zeros(64, dtype=np.bool_))
        asm = update.inspect_asm(update.signatures[0])
        return len(re.findall(r"maskmov\w*\s+%\w+,\s*%\w+,\s*[^,\s]*\(", asm))  # to memory

    plain = stores(njit(lambda value: value))
    if plain == 0:
        pytest.skip("this CPU's code has no masked store for the plain loop either")
    assert stores(jit.keep) == 0
