"""A fast path for the bulk of a timestamped text dump: blocks of plain sample lines.

A dump in the promtool backfill layout (``detector simulate``, ``detector record``) is, apart
from a ``# TYPE`` line per family, millions of lines ``name{labels} value timestamp``, each
series' lines one after another. The exposition parser reads every byte of them through the
whole grammar, ~3 us a line (bench/RESULTS.md "Replay throughput"). Here a block of such lines
is cut into its three fields with numpy (the positions of its newlines and of the last two
spaces of each line), and only the *distinct* values and timestamps of the block (a dump's
timestamps repeat across series, its values often) go through the grammar's number patterns
and Python's ``float``, as the parser converts them; the keys are left to the caller's series
table, which checks each distinct key once (``split_series``).

Anything else is not guessed at: a block that is not ASCII, holds a ``#`` (comments, ``# EOF``,
exemplars), a carriage return, a NUL, a blank line, a line that does not start with a metric
name's first character, a line without two spaces, an empty field or a field the number
grammar rejects gets None, and the caller parses it exactly, with its
error reporting. So for the blocks it takes, the samples are the parser's, value for value.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import numpy as np

from ..model import FloatArray, IntArray
from .parse import NUMBER_PATTERN, SECONDS_PATTERN

_NEWLINE, _SPACE = 10, 32
_WIDEST = 40  # a value or timestamp wider than this sends the block to the parser
_REFUSED = (b"#", b"\r", b"\x00")


def sample_fields(block: bytes) -> tuple[list[str], FloatArray, FloatArray] | None:
    """Keys, values and timestamps (as written: seconds or ms) of ``block``, whole lines
    ``key value timestamp`` ending in a newline; None when the block is not only such
    lines (module docstring)."""
    if not block.endswith(b"\n") or block.startswith(b"\n") or not block.isascii():
        return None
    if any(mark in block for mark in _REFUSED):
        return None
    data = np.frombuffer(block, dtype=np.uint8)
    ends = np.flatnonzero(data == _NEWLINE)
    starts = np.concatenate(([0], ends[:-1] + 1))
    if not (ends > starts).all():
        return None  # a blank line
    first = data[starts]  # a key starts with a metric name: [a-zA-Z_:] (not '{': tsdb's)
    letter = ((first | 0x20) >= ord("a")) & ((first | 0x20) <= ord("z"))
    if not (letter | (first == ord("_")) | (first == ord(":"))).all():
        return None
    spaces = np.flatnonzero(data == _SPACE)
    last = np.searchsorted(spaces, ends) - 1  # each line's last space, -1 if none before
    if last.min() < 1:  # the first line has fewer than two spaces
        return None
    time_at, value_at = spaces[last], spaces[last - 1]
    if not ((value_at > starts).all() and (time_at > value_at + 1).all()):
        return None  # a space too few in a line, a key or a value empty
    if not (ends > time_at + 1).all():
        return None  # a timestamp empty
    values = _numbers(data, value_at + 1, time_at, NUMBER_PATTERN.fullmatch)
    times = _numbers(data, time_at + 1, ends, SECONDS_PATTERN.fullmatch)
    if values is None or times is None or not np.isfinite(times).all():
        return None  # the parser sends a time past float range to its exact path
    text = block.decode("ascii")
    keys = [text[a:b] for a, b in zip(starts.tolist(), value_at.tolist(), strict=True)]
    return keys, values, times


def _numbers(
    data: np.ndarray,
    begin: IntArray,
    end: IntArray,
    grammar: Callable[[str], re.Match[str] | None],
) -> FloatArray | None:
    """``float`` of each field ``data[begin[i]:end[i]]`` when every distinct one matches
    ``grammar`` (a compiled pattern's ``fullmatch``), else None."""
    width = end - begin
    widest = int(width.max())
    if widest > _WIDEST:
        return None
    offsets = np.arange(widest)
    inside = offsets[None, :] < width[:, None]
    where = np.where(inside, begin[:, None] + offsets[None, :], 0)
    chars = np.where(inside, data[where], 0).astype(np.uint8)
    fields = chars.view(f"S{widest}").reshape(-1)  # trailing NULs (padding) are dropped
    distinct, inverse = np.unique(fields, return_inverse=True)
    texts: list[str] = distinct.astype(f"U{widest}").tolist()
    if not all(grammar(t) for t in texts):
        return None
    converted = np.array([float(t) for t in texts], dtype=np.float64)
    out: FloatArray = converted[inverse.reshape(-1)]
    return out
