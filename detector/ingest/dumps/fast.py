"""A fast path for the bulk of a timestamped text dump: blocks of plain sample lines.

A dump in the promtool backfill layout (``detector simulate``, ``detector record``) is, apart
from a family's ``# HELP``/``# TYPE`` lines, millions of lines ``name{labels} value
timestamp``, each series' lines one after another; ``promtool tsdb dump`` writes
``{__name__="name", labels} value ms`` the same way. The exposition parser reads every byte
through the whole grammar, ~3 us a line (bench/RESULTS.md "Reading a recorded dump"). Here a block
of such lines is cut into its three fields with numpy (its newlines and each line's last two
spaces); one numba pass (``_scan``) reads every value and timestamp that is a plain decimal
(``_decimal``: exactly ``float``'s value) and notes where a line's key differs from the one
before; the other numbers go through the grammar's patterns and ``float`` once per distinct
text, as the parser converts them; the caller's series table checks each run's key once
(``split_series``, ``split_tsdb_series``).

Anything else is not guessed at: a block that is not ASCII, holds a ``#`` (comments, ``# EOF``,
exemplars), a carriage return, a NUL, a blank line, a line that does not start as its format's
keys do, a line without two spaces, an empty field, a field the number grammar rejects or (tsdb)
a timestamp that is not whole milliseconds gets None, and the format's own reader reads it,
with its error reporting. So for the blocks it takes, the samples are that reader's, value for
value (tests/test_dumps_fast.py compares both).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from ...jit import COMPILED, jit
from ...model import BoolArray, FloatArray, IntArray
from ..parse import NUMBER_PATTERN, SECONDS_PATTERN

_NEWLINE, _SPACE = 10, 32
_POW10 = 10.0 ** np.arange(23)  # exact doubles
_REFUSED = (b"#", b"\r", b"\x00")


def sample_fields(block: bytes, *, tsdb: bool = False) -> SampleFields | None:
    """The samples of ``block``, whole lines ``key value timestamp`` ending in a newline:
    the distinct keys of its runs of lines with one key, each line's run, its value and its
    timestamp (as written: seconds or ms); None when the block is not only such lines
    (module docstring), and where numba cannot compile (the parser is then faster).
    ``tsdb``: ``promtool tsdb dump`` lines, keys ``{__name__="x", ...}`` and timestamps
    integer milliseconds of at most 15 digits (anything else: None)."""
    if not COMPILED or not block.endswith(b"\n") or block.startswith(b"\n"):
        return None
    if not block.isascii() or any(mark in block for mark in _REFUSED):
        return None
    data = np.frombuffer(block, dtype=np.uint8)
    ends = np.flatnonzero(data == _NEWLINE)
    starts = np.concatenate(([0], ends[:-1] + 1))
    if not (ends > starts).all():
        return None  # a blank line
    first = data[starts]  # a key starts with a metric name: [a-zA-Z_:], or tsdb's '{'
    letter = ((first | 0x20) >= ord("a")) & ((first | 0x20) <= ord("z"))
    name = letter | (first == ord("_")) | (first == ord(":"))
    if not ((first == ord("{")) if tsdb else name).all():
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
    scanned = _scan(data, starts, value_at, time_at, ends)
    values, times, plain_value, plain_time, whole_times, new_run = scanned
    if not _convert_rest(block, value_at + 1, time_at, plain_value, values, NUMBER_PATTERN):
        return None
    if tsdb:  # whole milliseconds only
        if not whole_times:
            return None
    elif not _convert_rest(block, time_at + 1, ends, plain_time, times, SECONDS_PATTERN):
        return None
    if not np.isfinite(times).all():
        return None  # the parser sends a time past float range to its exact path
    runs = np.flatnonzero(new_run)
    text = block.decode("ascii")
    keys = [text[a:b] for a, b in zip(starts[runs].tolist(), value_at[runs].tolist(), strict=True)]
    return SampleFields(keys, np.cumsum(new_run) - 1, values, times)


@dataclass(frozen=True, slots=True)
class SampleFields:
    """A block's samples: line ``i`` is series ``keys[run[i]]`` at ``times[i]``."""

    keys: list[str]
    run: IntArray
    values: FloatArray
    times: FloatArray


def _convert_rest(
    block: bytes,
    begin: IntArray,
    end: IntArray,
    plain: BoolArray,
    out: FloatArray,
    grammar: re.Pattern[str],
) -> bool:
    """Fill ``out`` where the field is not a plain decimal: ``float`` of each distinct one, if
    every one matches ``grammar`` (the parser's pattern); False when one does not."""
    rest = np.flatnonzero(~plain)
    if not rest.size:
        return True
    bounds = zip(begin[rest].tolist(), end[rest].tolist(), strict=True)
    texts = [block[a:b].decode("ascii") for a, b in bounds]
    distinct = set(texts)
    if not all(grammar.fullmatch(t) for t in distinct):
        return False
    converted = {t: float(t) for t in distinct}
    out[rest] = [converted[t] for t in texts]
    return True


@jit
def _decimal(data: np.ndarray, begin: int, end: int) -> tuple[bool, float, bool]:
    """(True, value, whole) when ``data[begin:end]`` is a plain decimal: an optional sign, 1
    to 15 digits with at most one '.' among them, an optional exponent (``e``, a sign, 1 to 3
    digits), the power of ten it comes to within 1e-22 to 1e22 (every number grammar takes
    such a field); else (False, 0, False). ``whole``: digits alone, a leading '-' allowed
    (tsdb's milliseconds). Exact as ``float``: the digits as an integer below 2**53 times or
    over a power of ten up to 1e22, both exact doubles, is one correctly rounded operation
    (Clinger's fast path)."""
    i, negative = begin, False
    plus = data[i] == 43
    if data[i] == 45 or plus:  # '-' or '+'
        negative = data[i] == 45
        i += 1
    mantissa, digits, fraction, dots = 0, 0, 0, 0
    while i < end and data[i] != 101 and data[i] != 69:  # up to 'e' or 'E'
        c = data[i]
        if 48 <= c <= 57:
            mantissa = mantissa * 10 + (c - 48)
            digits += 1
            fraction += dots
        elif c == 46:
            dots += 1
        else:
            return False, 0.0, False
        i += 1
    if digits == 0 or digits > 15 or dots > 1:
        return False, 0.0, False
    power = -fraction
    whole = dots == 0 and i == end and not plus
    if i < end:  # the exponent
        i += 1
        minus = i < end and data[i] == 45
        if i < end and (data[i] == 45 or data[i] == 43):
            i += 1
        if i == end or end - i > 3:
            return False, 0.0, False
        exponent = 0
        while i < end:
            c = data[i]
            if not 48 <= c <= 57:
                return False, 0.0, False
            exponent = exponent * 10 + (c - 48)
            i += 1
        power += -exponent if minus else exponent
    if power > 22 or power < -22:
        return False, 0.0, False
    value = mantissa * _POW10[power] if power >= 0 else mantissa / _POW10[-power]
    return True, (-value if negative else value), whole


@jit
def _scan(
    data: np.ndarray, starts: IntArray, value_at: IntArray, time_at: IntArray, ends: IntArray
) -> tuple[FloatArray, FloatArray, BoolArray, BoolArray, bool, BoolArray]:
    """Per line: its value and timestamp where plain decimals (``_decimal``), whether they
    were, whether every timestamp is whole (``_decimal``), and whether its key differs from
    the previous line's (byte for byte)."""
    n = starts.shape[0]
    values, times = np.zeros(n), np.zeros(n)
    plain_value, plain_time = np.zeros(n, np.bool_), np.zeros(n, np.bool_)
    all_whole = True
    new_run = np.ones(n, np.bool_)
    for i in range(n):
        plain_value[i], values[i], _ = _decimal(data, value_at[i] + 1, time_at[i])
        plain_time[i], times[i], whole = _decimal(data, time_at[i] + 1, ends[i])
        all_whole &= whole
        if i > 0:
            width = value_at[i] - starts[i]
            if width == value_at[i - 1] - starts[i - 1]:
                a, b, same = starts[i], starts[i - 1], True
                for k in range(width):
                    if data[a + k] != data[b + k]:
                        same = False
                        break
                new_run[i] = not same
    return values, times, plain_value, plain_time, all_whole, new_run
