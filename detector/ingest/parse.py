"""Prometheus text (0.0.4) and OpenMetrics 1.0 exposition -> columnar samples, fast.

Contract
    ``parse_exposition(data, source)`` returns an :class:`~detector.model.Exposition`:
    ``keys[i]`` is sample i's series text exactly as written (``name`` or ``name{...}``,
    surrounding blanks stripped), ``values[i]`` its float, ``timestamps[i]`` its time in
    SECONDS or None, ``types`` the declared ``# TYPE`` per family. Keys stay raw: label parsing
    is the slow part, so it happens only in :func:`split_series`, once per new key (cached).

    Syntax is checked strictly (metric and label names, quoting and escapes: ``\\\\ \\" \\n`` are
    unescaped, a backslash before any other character is kept as written, as Prometheus and
    prometheus_client keep it; numbers; ``# TYPE``/``# HELP``/``# UNIT``/``# EOF`` lines, every
    type of both formats; exemplars), but a bad line is never fatal: it becomes a
    :class:`~detector.errors.ParseError` (source, line number, content, reason) in
    ``Exposition.errors`` and the lines around it are kept.
    Tolerated because real exporters emit them: missing HELP/TYPE, unknown ``#`` comments,
    blank lines, CRLF, leading/trailing blanks, ``NaN``/``+Inf``/``-Inf`` in any case, counters
    with or without ``_total``. Exemplars (`` # {labels} value [ts]``) are checked and dropped.
    Label names are unique per series only as far as :func:`split_series` checks it (it raises).

    Timestamps: OpenMetrics writes seconds (float); Prometheus text writes integer
    milliseconds, divided by 1000 here. ``openmetrics=None`` detects OpenMetrics from a
    ``# EOF`` line, a ``# UNIT`` line, an exemplar or a ``*_created`` sample.

    dcgm-exporter 'blank' sentinel: a ``DCGM_*``/``dcgm_*`` sample whose value is finite and
    >= ``DCGM_BLANK_THRESHOLD`` (e.g. 9223372036854775794, "no data / not supported") becomes
    NaN, i.e. missing. Only dcgm metrics: node-exporter has genuine counters above 9.2e18.
    Each conversion is counted in ``PARSE_STATS.dcgm_blanks`` (process-wide, for self metrics).

How it is fast
    One anchored regex describes every valid line (sample, TYPE, HELP, UNIT, EOF, comment,
    blank). ``findall`` runs it over the whole payload in C, first in its canonical form (the
    blanks exporters actually write), then in the tolerant form; if every line matched, the
    sample tuples are converted with ``map(float)`` and nothing else runs per line in Python.
    The canonical form takes a ``# HELP`` line and the ``# TYPE`` line after it as one match
    (fewer tuples to build), and every optional part of the grammar is possessive.
    Only when some line matches neither does the per-line path run, to keep the good lines and
    name the bad ones with a reason. bench/parse_bench.py measures it against prometheus_client.
"""

from __future__ import annotations

import gc
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache

from ..errors import ParseError
from ..model import DCGM_BLANK_THRESHOLD, Exposition, Labels, Sample

__all__ = [
    "PARSE_STATS",
    "ParseStats",
    "iter_samples",
    "parse_exposition",
    "split_series",
]


@dataclass
class ParseStats:
    """Process-wide counters, read by the daemon's self metrics. Never reset by the parser."""

    dcgm_blanks: int = 0  # dcgm 'blank' sentinels turned into NaN


PARSE_STATS = ParseStats()
# split_series' cache: a few node pages' keys. Not more: keys of series that come and go
# (containers' devices) would fill it for as long as the process runs, ~0.5 KB each.
SPLIT_CACHE_KEYS = 1 << 14

# --- the grammar as regex fragments. Quantifiers are possessive (*+ ++): the grammar never
# needs to give back what a repeat took, and sre runs possessive repeats ~15% faster; it also
# keeps every pattern linear on hostile input (no two adjacent optional blank runs either).
_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*+"
_LNAME = r"[a-zA-Z_][a-zA-Z0-9_]*+"
# A backslash escapes any character: \\ \" \n are unescaped, any other pair is kept as
# written (as Prometheus and prometheus_client keep it).
_LVALUE = r'"[^"\\\n]*+(?:\\.[^"\\\n]*+)*+"'
# Optional parts are possessive too (?+): a number is always followed by a blank, '#' or the
# line end, never by '.', 'e', a digit or a sign, so giving an optional part back cannot help,
# and sre runs a possessive optional group without the backtracking bookkeeping (~6% faster).
_EXP = r"(?:[eE][-+]?+\d++)?+"
_NUMBER = (
    rf"[-+]?+(?:\d++(?:\.\d*+)?+{_EXP}|\.\d++{_EXP}"
    r"|[Nn][Aa][Nn]|[Ii][Nn][Ff](?:[Ii][Nn][Ii][Tt][Yy])?+)"
)
_TS_MS = r"[-+]?\d++"  # Prometheus text: integer milliseconds
_TS_S = rf"[-+]?+(?:\d++(?:\.\d*+)?+{_EXP}|\.\d++{_EXP})"  # OpenMetrics: seconds
# Longest first where one type is a prefix of another (gaugehistogram, gauge): the line's
# grammar is possessive, so a shorter alternative that matched is never given back.
_TYPES = "counter|gaugehistogram|gauge|histogram|summary|untyped|unknown|info|stateset"
_KEYWORDS = r"(?:TYPE|HELP|UNIT|EOF)(?:[ \t]|\r?$)"
_BLANKS = r"[ \t]++"  # a separator, in the tolerant grammar
_PAD = r"[ \t]*+"  # optional blanks, in the tolerant grammar


def _labels_pattern(pad: str) -> str:
    label = rf"{_LNAME}{pad}={pad}{_LVALUE}"
    return rf"\{{{pad}(?:{label}{pad}(?:,{pad}{label}{pad})*+(?:,{pad})?+)?+\}}"


_LABELS = _labels_pattern(_PAD)


def _line_pattern(ts: str, *, canonical: bool) -> str:
    """One line of exposition; groups: key, value, timestamp, TYPE name, TYPE type.

    The canonical grammar is the tolerant one minus the blanks real exporters never write
    (leading, inside label sets, runs of separators): ~12% faster to run, and any line it
    accepts the tolerant grammar accepts with the same groups. It also takes a ``# HELP``
    line and the ``# TYPE`` line right after it as ONE match (exporters write them in pairs:
    ~20% fewer matches, each a tuple findall builds); its extra group, before the TYPE
    groups, is non-empty exactly then, so the caller can still count the lines matched.
    """
    sep, pad = (" ", "") if canonical else (_BLANKS, _PAD)
    labels = _labels_pattern(pad)
    exemplar = rf"{sep}#{sep}{labels}{sep}{_NUMBER}(?:{sep}{_TS_S})?"
    sample = rf"({_NAME}(?:{labels})?+){sep}({_NUMBER})(?:{sep}({ts}))?+(?:{exemplar})?+"
    help_line = rf"HELP{sep}{_NAME}(?:[ \t][^\n]*+)?"
    # possessive: a HELP line not followed by a TYPE line fails here and matches alone below
    pair = rf"(?:{help_line}{_PAD}\r?(\n)#{sep})?+" if canonical else ""
    comment = (
        rf"#{sep}{pair}TYPE{sep}({_NAME}){sep}({_TYPES})"
        rf"|#{sep}{help_line}"
        rf"|#{sep}UNIT{sep}{_NAME}(?:[ \t][^\n]*+)?"
        # EOF only as the last non-blank line: one earlier sends the payload to the slow path,
        # which detects OpenMetrics and reports what follows the EOF.
        rf"|#{sep}EOF(?=[ \t\r\n]*+\Z)"
        rf"|#(?![ \t]+{_KEYWORDS})[^\n]*+"
    )
    return rf"^{pad}(?:{sample}|{comment})?+{_PAD}\r?$"


# The bulk passes read timestamps with the OpenMetrics grammar (a superset of integer ms) and
# check Prometheus-mode timestamps are integers when converting; the per-line path is exact.
_CANONICAL_LINES = re.compile(_line_pattern(_TS_S, canonical=True), re.MULTILINE)
_LINES = re.compile(_line_pattern(_TS_S, canonical=False), re.MULTILINE)
_PROM_LINES = re.compile(_line_pattern(_TS_MS, canonical=False), re.MULTILINE)
_LABEL_PAIR = re.compile(rf'({_LNAME})[ \t]*+=[ \t]*+"([^"\\\n]*+(?:\\.[^"\\\n]*+)*+)"')
_UNESCAPE = re.compile(r"\\(.)")
_UNESCAPED = {"\\": "\\", '"': '"', "n": "\n"}
_EOF_LINE = re.compile(r"#[ \t]++EOF[ \t]*+\r?")
_CREATED = re.compile(r"\n[ \t]*([a-zA-Z_:][a-zA-Z0-9_:]*_created)[{ \t]")  # not possessive!
_TYPED = re.compile(r"^#[ \t]+TYPE[ \t]+([a-zA-Z_:][a-zA-Z0-9_:]*)[ \t]", re.MULTILINE)
_DCGM_PREFIXES = ("DCGM_", "dcgm_")
_INF = float("inf")
_NAN = float("nan")

# key, value, timestamp, TYPE name, TYPE type (the canonical grammar: key, value, timestamp,
# HELP+TYPE pair mark, TYPE name, TYPE type)
Row = tuple[str, ...]
_NAME_AT = re.compile(_NAME)
_LABELS_AT = re.compile(_LABELS)
# a sample line's exemplar: where `` # {`` follows the value (and timestamp), not a label value
_EXEMPLAR_AT = re.compile(
    rf"^{_PAD}{_NAME}(?:{_LABELS})?+{_BLANKS}{_NUMBER}(?:{_BLANKS}{_TS_S})?+{_BLANKS}#{_BLANKS}\{{",
    re.MULTILINE,
)
NUMBER_PATTERN = re.compile(_NUMBER)  # a sample value (fullmatch)
_TS_MS_FULL = re.compile(_TS_MS)
SECONDS_PATTERN = re.compile(_TS_S)  # an OpenMetrics timestamp (fullmatch)


def _unescape(match: re.Match[str]) -> str:
    char = match.group(1)
    return _UNESCAPED.get(char, "\\" + char)


@lru_cache(maxsize=SPLIT_CACHE_KEYS)
def split_series(key: str) -> tuple[str, Labels]:
    """Metric name and labels (sorted (name, value) pairs, values unescaped) of a raw key.

    Cached, for callers that split every sample of a page (``iter_samples``); the series index
    and the recorder keep their own per-key maps and call it only for new keys. Raises
    ParseError (source "series", line 0) on a malformed key or a label name given twice.
    """
    brace = key.find("{")
    if _NAME_AT.fullmatch(key, 0, brace if brace >= 0 else len(key)) is None:
        raise ParseError("series", 0, key, "invalid metric name")
    if brace < 0:
        return key, ()
    if _LABELS_AT.fullmatch(key, brace) is None:
        raise ParseError("series", 0, key, "invalid label set")
    pairs = _LABEL_PAIR.findall(key, brace)
    if "\\" in key:
        pairs = [(k, _UNESCAPE.sub(_unescape, v)) if "\\" in v else (k, v) for k, v in pairs]
    if len({label for label, _ in pairs}) != len(pairs):
        raise ParseError("series", 0, key, "a label name is given twice")
    return key[:brace], tuple(sorted(pairs))


def iter_samples(exp: Exposition) -> Iterator[Sample]:
    """Fully parsed samples of an exposition, in payload order (labels via split_series)."""
    for key, value, ts in zip(exp.keys, exp.values, exp.timestamps, strict=True):
        name, labels = split_series(key)
        yield Sample(name, labels, value, ts)


def _ends_with_eof(text: str) -> bool:
    """Whether the last non-blank line is ``# EOF`` (looks at the tail only: cheap)."""
    tail = text[-64:].rstrip()
    return tail.endswith("# EOF") and _find_eof(text[-64:]) >= 0


def _looks_like_openmetrics(text: str) -> bool:
    """Any OpenMetrics-only syntax: ``# EOF`` or ``# UNIT`` lines, an exemplar after a
    sample's value (not `` # {`` inside a label value), a ``*_created`` sample that no
    ``# TYPE`` line declares under that name (kube-state-metrics' ``kube_pod_created`` gauge
    is Prometheus text; an OpenMetrics counter's ``_created`` belongs to its family's TYPE)."""
    if "# EOF" in text and _find_eof(text) >= 0:
        return True
    if text.startswith("# UNIT") or "\n# UNIT" in text:
        return True
    if " # {" in text and _EXEMPLAR_AT.search(text) is not None:
        return True
    if "_created" not in text:
        return False
    created = {m.group(1) for m in _CREATED.finditer("\n" + text)}
    return bool(created - set(_TYPED.findall(text)))


def _find_eof(text: str) -> int:
    """Offset of the first ``# EOF`` line, or -1."""
    at = text.find("# EOF")
    while at >= 0:
        start = text.rfind("\n", 0, at) + 1
        end = text.find("\n", at)
        line = text[start : end if end >= 0 else len(text)]
        if _EOF_LINE.fullmatch(line.strip(" \t")):
            return start
        at = text.find("# EOF", at + 5)
    return -1


def _decode(data: bytes, source: str, errors: list[Exception]) -> str:
    """UTF-8 text of a payload; a line that is not UTF-8 becomes blank and an error."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        pass
    lines = data.split(b"\n")
    for i, raw in enumerate(lines):
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            content = raw.decode("utf-8", errors="replace")
            errors.append(ParseError(source, i + 1, content, f"invalid UTF-8 ({exc.reason})"))
            lines[i] = b""
    return b"\n".join(lines).decode("utf-8")


def parse_exposition(
    data: str | bytes, source: str, *, openmetrics: bool | None = None
) -> Exposition:
    """Parse one payload; see the module docstring for the contract. Never raises on bad
    lines: each one is a ParseError in ``Exposition.errors`` (sorted by line number)."""
    errors: list[Exception] = []
    text = _decode(data, source, errors) if isinstance(data, bytes) else data
    if openmetrics is None and _ends_with_eof(text):
        openmetrics = True
    # The fast path allocates one tuple per line and drops them all before returning. With the
    # collector on, those short-lived tuples trigger young (and now and then full) collections
    # that cost ~15% of the parse; paused, they are freed before any collection sees them.
    # Restored on exit; a caller that had the collector off keeps it off.
    collecting = gc.isenabled()
    gc.disable()
    try:
        exp = _parse(text, source, openmetrics, errors)
        if exp is None:  # timestamps present and format undecided: decide, then parse exactly
            exp = _parse(text, source, _looks_like_openmetrics(text), errors)
            assert exp is not None
    finally:
        if collecting:
            gc.enable()
    if len(exp.errors) > 1:
        exp.errors.sort(key=lambda e: e.line if isinstance(e, ParseError) else 0)
    return exp


def _parse(
    text: str,
    source: str,
    openmetrics: bool | None,
    errors: list[Exception],
    *,
    exact: bool = False,
) -> Exposition | None:
    """Parse in a known format, or undecided (None) as long as no sample carries a timestamp
    (the only thing the two formats read differently). Returns None for 'decide first'.
    ``exact`` skips the fast path (to locate bad lines)."""
    exp = Exposition(source, errors=list(errors))
    newlines = text.count("\n")
    exp.lines = newlines + (1 if text and not text.endswith("\n") else 0)
    if openmetrics:
        text = _cut_at_eof(text, source, exp.lines, exp.errors)
        newlines = text.count("\n")
    rows = None if exact else _fast_rows(text, newlines + 1, exp)
    if rows is None:
        if openmetrics is None:
            openmetrics = _looks_like_openmetrics(text)
            if openmetrics:
                return None
        rows = _parse_lines(text, _LINES if openmetrics else _PROM_LINES, source, exp)
    if not rows:
        return exp
    keys, vtexts, ttexts, *_ = zip(*rows, strict=True)
    stamps = None
    if any(ttexts):
        if openmetrics is None:
            return None
        stamps = _timestamps(ttexts, openmetrics)
        if stamps is None:  # the fast path let a non-integer Prometheus timestamp through
            return _parse(text, source, openmetrics, errors, exact=True)
    exp.keys = list(keys)
    exp.values = list(map(float, vtexts))
    exp.timestamps = stamps if stamps is not None else [None] * len(exp.keys)
    _blank_dcgm_sentinels(exp.keys, exp.values)
    return exp


def _fast_rows(text: str, lines: int, exp: Exposition) -> list[Row] | None:
    """Sample rows if all ``lines`` lines are valid (one findall in C), else None. Sets
    ``types``. Each valid line yields exactly one match (a canonical HELP+TYPE pair one for
    both, and says so): the grammar is anchored at both ends, so an invalid line yields none
    and the count of lines matched tells."""
    found = _CANONICAL_LINES.findall(text)
    typed = [row for row in found if row[4]]
    if len(found) + sum(1 for row in typed if row[3]) == lines:  # a pair is two lines
        exp.types = {row[4]: row[5] for row in typed}
    else:
        found = _LINES.findall(text)  # blanks where exporters rarely put them
        if len(found) != lines:
            return None
        exp.types = {row[3]: row[4] for row in found if row[3]}
    return [row for row in found if row[0]]


def _timestamps(texts: tuple[str, ...], openmetrics: bool) -> list[float | None] | None:
    """Seconds per sample (None where absent); None if a Prometheus timestamp is no integer
    or any timestamp is out of float range (the exact path then names those lines)."""
    try:
        if openmetrics:
            stamps = [float(t) if t else None for t in texts]
        else:
            # int / int is correctly rounded; float(ms) / 1000 is not always
            stamps = [int(t) / 1000 if t else None for t in texts]
    except (ValueError, OverflowError):  # OverflowError: more ms than a float holds
        return None
    present = [t for t in stamps if t is not None]
    if present and not (math.isfinite(max(present)) and math.isfinite(min(present))):
        return None  # "1e999" seconds: a time no sample has
    return stamps


def _timestamp_ok(text: str, openmetrics: bool) -> bool:
    """Whether one timestamp the grammar accepted converts to a finite time."""
    return _timestamps((text,), openmetrics) is not None


def _blank_dcgm_sentinels(keys: list[str], values: list[float]) -> None:
    threshold = DCGM_BLANK_THRESHOLD
    top = max(values)
    if top < threshold:  # not taken for NaN: max() is unreliable then, so scan
        return
    for i in [i for i, value in enumerate(values) if value >= threshold]:
        if values[i] != _INF and keys[i].startswith(_DCGM_PREFIXES):
            values[i] = _NAN
            PARSE_STATS.dcgm_blanks += 1


def _cut_at_eof(text: str, source: str, lines: int, errors: list[Exception]) -> str:
    """Text up to and including the ``# EOF`` line; what follows it is reported."""
    eof = _find_eof(text)
    if eof < 0:
        errors.append(ParseError(source, lines + 1, "", "missing '# EOF' line (truncated?)"))
        return text
    end = text.find("\n", eof)
    if end < 0:
        return text
    eof_line = text.count("\n", 0, eof) + 1
    for offset, line in enumerate(text[end + 1 :].split("\n"), start=eof_line + 1):
        if line.strip():
            errors.append(ParseError(source, offset, line, "content after '# EOF'"))
    return text[: end + 1]


def _parse_lines(text: str, pattern: re.Pattern[str], source: str, exp: Exposition) -> list[Row]:
    """The per-line path, taken only when some line is invalid: keeps the valid lines."""
    rows: list[Row] = []
    types = exp.types
    for number, line in enumerate(text.split("\n"), start=1):
        match = pattern.match(line)
        if match is None:
            reason = _diagnose(line, pattern is _LINES)
            exp.errors.append(ParseError(source, number, line.strip(), reason))
            continue
        row: Row = match.groups(default="")
        if row[2] and not _timestamp_ok(row[2], pattern is _LINES):
            exp.errors.append(ParseError(source, number, line.strip(), "timestamp out of range"))
            continue
        if row[0]:
            rows.append(row)
        elif row[3]:
            types[row[3]] = row[4]
    return rows


def _diagnose(line: str, openmetrics: bool) -> str:
    """Why the grammar rejected a line, in words a person can act on."""
    text = line.strip(" \t\r")
    if text.startswith("#"):
        words = text[1:].split()
        keyword = words[0] if words else ""
        if keyword == "TYPE":
            return f"malformed TYPE line: expected '# TYPE <name> <{_TYPES.replace('|', '|')}>'"
        if keyword in ("HELP", "UNIT"):
            return f"malformed {keyword} line: missing or invalid metric name"
        return "malformed EOF line: expected '# EOF' alone"
    name = _NAME_AT.match(text)
    if name is None:
        return "invalid metric name"
    rest = text[name.end() :]
    if rest.startswith("{"):
        labels = _LABELS_AT.match(rest)
        if labels is None:
            return 'invalid label set: expected {name="value",...}'
        rest = rest[labels.end() :]
    if rest[:1] not in (" ", "\t"):
        return "expected a blank between the series and its value"
    parts = rest.split()
    if not parts:
        return "missing value"
    if not NUMBER_PATTERN.fullmatch(parts[0]):
        return f"invalid value {parts[0]!r}"
    if len(parts) > 1 and parts[1] != "#":
        ts_ok = (SECONDS_PATTERN if openmetrics else _TS_MS_FULL).fullmatch(parts[1])
        if ts_ok is None:
            unit = "seconds" if openmetrics else "integer milliseconds"
            return f"invalid timestamp {parts[1]!r}: expected {unit}"
        parts = parts[1:]
    if len(parts) > 1 and parts[1] == "#":
        return "invalid exemplar: expected ' # {labels} value [timestamp]'"
    return "unexpected text after the value"
