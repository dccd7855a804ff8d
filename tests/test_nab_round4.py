"""NAB round 4 fusion pieces (bench/nab.py): the held shape z and how it joins the fusion."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # bench/ is scripts, not installed

from bench import nab


def five_minute_file(rows: int) -> nab.NabFile:
    """A NAB file of ``rows`` 5-minute rows from midnight (values 0, no windows)."""
    times = np.arange(rows, dtype=np.float64) * 300.0
    return nab.NabFile("cat/f.csv", [""] * rows, times, np.zeros(rows), ())


def test_held_shape_is_the_verdict_of_the_last_block_close() -> None:
    """Blocks of 45 min close every 9 rows; each row holds the z of the last close at or
    before it, and the first 32 rows hold 0."""
    f = five_minute_file(60)
    closes = np.flatnonzero(nab.shape_closes(f))
    assert [9, 18, 27, 36, 45, 54] == closes.tolist()
    z = np.zeros(60)
    z[36], z[45] = 3.0, 1.0
    held = nab.held_shape(f, z)
    assert np.all(held[:36] == 0.0)
    assert np.all(held[36:45] == 3.0)
    assert np.all(held[45:54] == 1.0)


def test_an_unusual_shape_opens_the_gate_and_alarms_ungated() -> None:
    """A likelihood surprise the hour explains (seasonal 0) counts half; after a close with
    shape z 3 it counts fully; the weighted shape z itself is fused ungated."""
    f = five_minute_file(60)
    z = np.zeros(60)
    z[45] = 3.0
    parts = nab.Components(
        likelihood=np.full(60, 6.0), range=np.zeros(60), context=np.zeros(60), seasonal=np.zeros(60)
    )
    cfg = replace(nab.SeasonalConfig(), holdoff_rows=0)
    plain = nab.fuse(parts, cfg, 0.0)
    shaped = nab.fuse(nab.with_shape(parts, f, z, 4.0), cfg, 0.0)
    assert 3.0 == plain[50]
    assert 6.0 == shaped[50]
    assert 12.0 == shaped[45]
    assert 3.0 == shaped[40]
