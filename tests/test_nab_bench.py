"""bench/nab.py's best row is the product's own_past scorer: the same z as its parts fused."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # bench/ is scripts, not installed

from bench import nab


def daily_file(days: int, seed: int) -> nab.NabFile:
    """A NAB file of 5-minute rows with a daily wave, noise, a spike and a level shift."""
    rows = days * 288
    rng = np.random.default_rng(seed)
    times = np.arange(rows, dtype=np.float64) * 300.0
    values = 50 + 20 * np.sin(2 * np.pi * times / 86400.0) + rng.normal(size=rows)
    values[rows // 2] += 40.0
    values[3 * rows // 4 :] += 15.0
    return nab.NabFile("cat/f.csv", [""] * rows, times, values, ())


def test_own_past_row_is_the_fusion_of_its_parts_bit_for_bit() -> None:
    """The product scorer's z equals ``fuse`` of the bench's separately streamed parts (the
    committed ``likelihoodContextSeasonal`` assembly) on every row after its warm-up of 120
    rows (inside NAB's probation), before the holdoff; 0 during the warm-up."""
    f = daily_file(4, seed=1)
    cfg = nab.SeasonalConfig()
    parts = nab.Components(*nab.predictive_z(f)[1:], nab.context_z(f), nab.seasonal_z(f, cfg))
    assembled = nab.fuse(parts, replace(cfg, holdoff_rows=0), nab.ContextConfig().context_weight)
    product = nab.own_past_z(f)
    assert np.count_nonzero(product) > 100  # the parts do speak on this file
    assert np.count_nonzero(assembled[32:120]) > 0  # the warm-up silences what they say
    assembled[:120] = 0.0
    assert np.array_equal(assembled, product)


def test_own_past_detectors_write_the_held_off_score_map() -> None:
    """The row NAB scores: holdoff of 80 rows, then ``1 - exp(-z / 10)``."""
    f = daily_file(3, seed=2)
    expected = 1.0 - np.exp(-nab.holdoff(nab.own_past_z(f), 80) / 10.0)
    assert np.array_equal(expected, nab.own_past_detectors(f)["likelihoodContextSeasonal"])
