"""Rule catalogs: which metrics become which signals (rules/signals.yaml) and what each XID
code means (rules/xid.yaml). Validated by pydantic when loaded; every mistake is reported as a
``ConfigError`` naming the file and the field, e.g.
``rules/signals.yaml: signals[3].transform: must be one of level, rate, edge, presence, ratio``.

Matching contract (``SignalCatalog.classify``): a metric named by a rule (exact name first, then
the first rule whose ``pattern`` fully matches, rules in file order) belongs to that rule, even
if it also matches ``ignore``; otherwise an ignored metric is never scored; otherwise the
``default_rule`` scores it (level for gauges, rate for counters) unless it is disabled.

Counters have two spellings: OpenMetrics names a counter family ``X`` and its samples
``X_total`` (so does Prometheus when it scrapes OpenMetrics, and so do strict OpenMetrics
dumps), while dcgm-exporter's text names its counters bare. Every lookup here (rules, ignore,
XID sources, the export selector) is by the name as spelled first, then by its other spelling
(``other_spelling``: ``_total`` added or removed), so a rule naming ``X`` reads ``X_total`` and a
rule naming ``X_total`` reads bare ``X``, whichever path the samples came by (scrape, any dump
format). A rule's signal keeps the rule's name; a metric no rule names is the signal of its
family (``default_signal_name``: the name without ``_total``), so a cluster whose exporters
spell a counter both ways has one signal for it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, model_validator

from ..errors import ConfigError
from .yamlfile import read_yaml

_M = TypeVar("_M", bound=BaseModel)


def _default_rules_dir() -> Path:
    """rules/ of the checkout this package runs from, else the copy a wheel installs as
    ``detector/builtin_rules`` (pyproject.toml)."""
    checkout = Path(__file__).resolve().parents[2] / "rules"
    if (checkout / "signals.yaml").is_file():
        return checkout
    return Path(__file__).resolve().parents[1] / "builtin_rules"


DEFAULT_RULES_DIR = _default_rules_dir()

Transform = Literal["level", "rate", "edge", "presence", "ratio"]
Entity = Literal["gpu", "node"]
Direction = Literal["up", "down", "both"]
# Every name of scorers/registry.py (a test keeps the two lists equal).
ScorerName = Literal[
    "zscore",
    "changepoint",
    "bocpd",
    "peers",
    "health",
    "counts",
    "forecast",
    "range",
    "context",
    "seasonal",
    "window",
    "stuck",
    "shape",
    "own_past",
]
Severity = Literal["critical", "warning", "info"]

# Presence signals are computed per entity by signals.py, not read from one series.
PRESENCE_SIGNALS: dict[str, Entity] = {
    "health_series_missing_fraction": "gpu",
    "health_gpu_count": "node",
    "health_targets_frozen_fraction": "node",
}
DEFAULT_SCORERS: tuple[ScorerName, ...] = ("zscore", "changepoint", "peers")


COUNTER_SUFFIX = "_total"

# An agent's summary (served at /summary, service/summary.py; docs/deploy.md "Agents feeding a
# fleet"): each node-level signal column the agent computed is one series of this metric,
# labelled ``signal`` (the rule's name) and ``series`` (the column's source series), its value
# the column's value that tick. A fleet maps it onto the column of the rule it names with the
# value as it is (``signals.SignalMap``); the rules read the summary's GPU scores and XIDs by
# metric name (rules/signals.yaml ``agent_gpu_score``, rules/xid.yaml).
SUMMARY_PREFIX = "detector_summary_"
SUMMARY_SIGNAL_METRIC = SUMMARY_PREFIX + "signal"


def other_spelling(metric: str) -> str:
    """``metric`` as the other spelling of a counter: without the OpenMetrics ``_total``
    suffix when it has it, with it when it has not."""
    if metric.endswith(COUNTER_SUFFIX):
        return metric[: -len(COUNTER_SUFFIX)]
    return metric + COUNTER_SUFFIX


def counter_family(metric: str) -> str:
    """The family a sample name belongs to as a counter: the name without ``_total``. Both
    spellings of a counter give the same family."""
    return metric.removesuffix(COUNTER_SUFFIX)


def _compile(pattern: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"invalid regular expression {pattern!r}: {exc}") from None


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SignalRule(_Strict):
    """One named signal: which series feed it and how they are turned into a number."""

    name: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    metrics: tuple[str, ...] = ()
    pattern: str | None = None
    transform: Transform
    entity: Entity
    direction: Direction = "both"
    weight: float = Field(default=1.0, ge=0.0)
    scale: float = 1.0  # multiplies the transformed value (e.g. ns of throttling/s -> fraction)
    # The smallest difference that means anything, in the scaled unit: values are rounded to
    # it (0: exact). A GPU throttled 3% of a tick more than its peers is not a fault, and with
    # zero-inflated peers (all others exactly 0) nothing else stops it looking infinitely odd.
    resolution: float = Field(default=0.0, ge=0.0)
    # Compare in log space: the value becomes ln(1 + value / log_unit) (0: as it is). For a
    # positive quantity whose spread grows with its level (a latency: 30x higher in a checkpoint
    # storm, and its spread with it), so that a node 30% slower than its peers deviates by the
    # same amount in a storm and between storms. log_unit is the smallest value that matters
    # (below it the scale is about linear, so 0 is finite); negative values read as 0.
    log_unit: float = Field(default=0.0, ge=0.0)
    scorers: tuple[ScorerName, ...] = DEFAULT_SCORERS
    truth: Literal["xid"] | None = None  # ground truth, claimed but never scored
    # The value is a score in [0, 1] computed elsewhere (an agent's GPU score, read from its
    # summary): fused as it is (``pipeline.fusion``), never scored again. Level, no scorers.
    given: bool = False
    # ratio: increase of this counter per increase of the ``denominator`` counter with the same
    # labels (seconds of RTT per NFS operation, not seconds of RTT per second, which is volume)
    denominator: str | None = None
    description: str = ""

    @model_validator(mode="after")
    def _check(self) -> SignalRule:
        if self.pattern is not None:
            _compile(self.pattern)
        if self.transform == "presence":
            if self.name not in PRESENCE_SIGNALS:
                known = ", ".join(PRESENCE_SIGNALS)
                raise ValueError(f"presence signal {self.name!r} unknown; known: {known}")
            if self.metrics or self.pattern:
                raise ValueError("presence signals are computed: give no metrics or pattern")
        elif not self.metrics and self.pattern is None:
            raise ValueError("give metrics and/or pattern")
        if (self.transform == "ratio") != (self.denominator is not None):
            raise ValueError("transform ratio needs a denominator (and only ratio takes one)")
        if self.log_unit > 0 and (self.transform in ("edge", "presence") or self.resolution > 0):
            raise ValueError("log_unit takes a level, rate or ratio transform and no resolution")
        if "health" in self.scorers and not self.name.startswith("health_"):
            raise ValueError("signals scored by 'health' must be named health_*")
        if self.given and (self.transform != "level" or self.scorers or self.truth):
            raise ValueError("a given score takes transform level, scorers [] and no truth")
        return self


class DefaultRule(_Strict):
    """How series that no rule names are scored (gauges: level, counters: rate)."""

    enabled: bool = True
    # Node-level series too? Off by default: without cohort labels (job, rack) every node is
    # compared with every other, and nodes running different jobs differ for no fault.
    node_level: bool = False
    weight: float = Field(default=0.3, ge=0.0)
    # Fusion weight of the node-level series of a node with too few peers, scored against their
    # own past (``own_past``) while ``node_level`` is off: that preset's z is calibrated per
    # column by its likelihood, so it is trusted like a named signal's.
    own_past_weight: float = Field(default=1.0, ge=0.0)
    direction: Direction = "both"
    scorers: tuple[ScorerName, ...] = DEFAULT_SCORERS
    # Metrics to treat as counters although they neither end in _total nor are declared
    # counters (node-exporter's netstat/vmstat fields are exposed untyped).
    counter_patterns: tuple[str, ...] = ()

    @model_validator(mode="after")
    def _check(self) -> DefaultRule:
        for pattern in self.counter_patterns:
            _compile(pattern)
        return self


def _alternation(patterns: tuple[str, ...]) -> re.Pattern[str] | None:
    return re.compile("|".join(f"(?:{p})" for p in patterns)) if patterns else None


@dataclass(frozen=True, slots=True)
class _Tables:
    """Compiled lookups of a SignalCatalog."""

    key: tuple[int, int, int]
    exact: dict[str, int]
    patterns: list[tuple[int, re.Pattern[str]]]
    ignore: re.Pattern[str] | None
    counter: re.Pattern[str] | None
    by_name: dict[str, SignalRule]

    @staticmethod
    def build(catalog: SignalCatalog, key: tuple[int, int, int]) -> _Tables:
        exact: dict[str, int] = {}
        patterns: list[tuple[int, re.Pattern[str]]] = []
        for i, rule in enumerate(catalog.signals):
            for metric in rule.metrics:
                exact.setdefault(metric, i)
            if rule.pattern is not None:
                patterns.append((i, re.compile(rule.pattern)))
        ignore = _alternation(catalog.ignore)
        counter = _alternation(catalog.default_rule.counter_patterns)
        by_name = {rule.name: rule for rule in reversed(catalog.signals)}  # first one wins
        return _Tables(key, exact, patterns, ignore, counter, by_name)


class SignalCatalog(_Strict):
    """The whole rules/signals.yaml."""

    version: int = 1
    signals: tuple[SignalRule, ...]
    default_rule: DefaultRule = DefaultRule()
    ignore: tuple[str, ...] = ()

    _tables: _Tables | None = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _check(self) -> SignalCatalog:
        seen: set[str] = set()
        for rule in self.signals:
            if rule.name in seen:
                raise ValueError(f"signal name {rule.name!r} is used twice")
            seen.add(rule.name)
        for pattern in self.ignore:
            _compile(pattern)
        return self

    def _lookup(self) -> _Tables:
        # Built lazily and keyed on the field objects: model_copy(update=...) skips validators,
        # so a copied catalog must not reuse tables compiled for other fields.
        key = (id(self.signals), id(self.ignore), id(self.default_rule))
        tables = self._tables
        if tables is None or tables.key != key:
            tables = self._tables = _Tables.build(self, key)
        return tables

    def rule_for(self, metric: str) -> SignalRule | None:
        """The first rule (file order) naming ``metric`` exactly or by pattern as it is
        spelled, else the first naming its other spelling (``other_spelling``), else None."""
        tables = self._lookup()
        best = self._first_rule(tables, metric)
        if best == len(self.signals):
            best = self._first_rule(tables, other_spelling(metric))
        return self.signals[best] if best < len(self.signals) else None

    def _first_rule(self, tables: _Tables, metric: str) -> int:
        """Index of the first rule naming ``metric`` as spelled; len(signals) for none."""
        best = tables.exact.get(metric, len(self.signals))
        for i, pattern in tables.patterns:
            if i >= best:
                break
            if pattern.fullmatch(metric):
                return i
        return best

    def rule_named(self, name: str) -> SignalRule | None:
        """The rule whose signal is ``name`` (an agent's summary names its columns so)."""
        return self._lookup().by_name.get(name)

    def is_ignored(self, metric: str) -> bool:
        """Whether ``ignore`` names ``metric`` in either spelling (``other_spelling``)."""
        ignore = self._lookup().ignore
        if ignore is None:
            return False
        spellings = (metric, other_spelling(metric))
        return any(ignore.fullmatch(name) is not None for name in spellings)

    def is_counter(self, metric: str, declared_type: str | None = None) -> bool:
        """Counters are rated by the default rule: declared type, _total suffix or pattern."""
        if declared_type is not None and declared_type != "untyped":
            return declared_type == "counter"
        if metric.endswith("_total"):
            return True
        counter = self._lookup().counter
        return counter is not None and counter.fullmatch(metric) is not None

    def default_signal_name(self, metric: str) -> str:
        """The signal a metric no rule names is scored as: its family (``counter_family``),
        one name for both spellings of a counter."""
        return counter_family(metric)

    def classify(self, metric: str) -> SignalRule | Literal["ignore", "default", "off"]:
        """The rule scoring ``metric``; "ignore", "default", or "off" (default rule disabled)."""
        rule = self.rule_for(metric)
        if rule is not None:
            return rule
        if self.is_ignored(metric):
            return "ignore"
        return "default" if self.default_rule.enabled else "off"

    def presence_rules(self) -> list[SignalRule]:
        return [rule for rule in self.signals if rule.transform == "presence"]


class MessageAction(_Strict):
    """A recovery action named in an XID message (154): case-insensitive substring match."""

    match: str = Field(min_length=1)
    action: str = Field(pattern=r"^[A-Z0-9_/]+$")
    failure: bool


class XidRule(_Strict):
    """One XID code: what it means and whether it counts as a GPU failure."""

    code: int = Field(ge=0)
    name: str
    meaning: str = ""
    severity: Severity
    action: str = Field(pattern=r"^[A-Z0-9_/]+$")  # NVIDIA's immediate resolution bucket
    investigate: str = Field(default="", pattern=r"^[A-Z0-9_/]*$")  # investigatory bucket
    failure: bool
    # An XID within this many seconds after another XID on the same GPU belongs to that
    # episode instead of starting its own (45: channel teardown after an earlier error).
    follows_within_s: float | None = Field(default=None, gt=0.0)
    recovery: bool = False  # reports that an earlier problem cleared: ends the open episode
    carries_action: bool = False  # the message names a recovery action (154)
    message_actions: tuple[MessageAction, ...] = ()
    description: str = ""

    def action_in(self, message: str) -> MessageAction | None:
        """The recovery action a message names (text after the last " to "), if any."""
        if not self.carries_action or not message:
            return None
        text = message.lower()
        cut = text.rfind(" to ")
        if cut >= 0:
            text = text[cut + 4 :]
        for candidate in self.message_actions:
            if candidate.match.lower() in text:
                return candidate
        return None


class XidSources(_Strict):
    """Where XIDs are read from in scraped data."""

    gauge_metrics: tuple[str, ...] = ("DCGM_FI_DEV_XID_ERRORS",)
    count_metrics: tuple[str, ...] = ("DCGM_EXP_XID_ERRORS_COUNT",)
    code_labels: tuple[str, ...] = ("err_code", "xid")


class XidUnknown(_Strict):
    """How a code missing from the catalog is treated."""

    severity: Severity = "warning"
    action: str = "CONTACT_SUPPORT"
    failure: bool = False


class XidCatalog(_Strict):
    """The whole rules/xid.yaml."""

    version: int = 1
    episode_window_s: float = Field(default=300.0, gt=0.0)
    sources: XidSources = XidSources()
    unknown: XidUnknown = XidUnknown()
    xids: tuple[XidRule, ...]

    _by_code: dict[int, XidRule] = PrivateAttr(default_factory=dict)

    @model_validator(mode="after")
    def _check(self) -> XidCatalog:
        seen: set[int] = set()
        for rule in self.xids:
            if rule.code in seen:
                raise ValueError(f"xid {rule.code} is listed twice")
            seen.add(rule.code)
        return self

    def model_post_init(self, context: Any, /) -> None:
        self._by_code.update({rule.code: rule for rule in self.xids})

    def source_kind(self, metric: str) -> Literal["gauge", "count"] | None:
        """Whether ``sources`` name ``metric`` (either spelling, ``other_spelling``) as the
        sticky XID gauge or the windowed XID count; None when they do not."""
        for name in (metric, other_spelling(metric)):
            if name in self.sources.gauge_metrics:
                return "gauge"
            if name in self.sources.count_metrics:
                return "count"
        return None

    def get(self, code: int) -> XidRule | None:
        return self._by_code.get(code)

    def is_failure(self, code: int) -> bool:
        rule = self._by_code.get(code)
        return self.unknown.failure if rule is None else rule.failure


def _where(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif not part.startswith(("function-", "value_error")):
            out += f".{part}" if out else part
    return out or "(top level)"


def _message(error: Any) -> str:
    if error["type"] == "literal_error":
        expected = str(error.get("ctx", {}).get("expected", ""))
        choices = expected.replace(" or ", ", ").replace("'", "")
        return f"must be one of {choices}"
    if error["type"] == "extra_forbidden":
        return "unknown field"
    msg = str(error["msg"])
    return msg.removeprefix("Value error, ")


def _load(path: Path, model: type[_M]) -> _M:
    data = read_yaml(path)
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        problems = [f"{_where(tuple(e['loc']))}: {_message(e)}" for e in exc.errors()]
        raise ConfigError(f"{path}: " + f"; {path}: ".join(problems)) from None


def _resolve(path: Path | None, filename: str) -> Path:
    if path is None:
        return DEFAULT_RULES_DIR / filename
    return path / filename if path.is_dir() else path


def load_signal_rules(path: Path | None = None) -> SignalCatalog:
    """Load and validate a signal catalog (a file, a rules directory, or the built-in one)."""
    return _load(_resolve(path, "signals.yaml"), SignalCatalog)


def load_xid_catalog(path: Path | None = None) -> XidCatalog:
    """Load and validate an XID catalog (a file, a rules directory, or the built-in one)."""
    return _load(_resolve(path, "xid.yaml"), XidCatalog)


def load_rules_file(path: Path | None, filename: str, model: type[_M]) -> _M:
    """Load and validate a rules file as ``model``: ``path`` is a file, a rules directory
    holding ``filename``, or None for the built-in one. ConfigError names the file and field."""
    return _load(_resolve(path, filename), model)


# Series the rules do not name but replay reads: host names (series.host_names) and each
# pod's node (kube-state-metrics); scraped series of either exporter's DCGM namespaces.
_EXPORT_ALWAYS = (
    "DCGM_.*",
    "dcgm_.*",
    "node_uname_info",
    "kube_pod_info",
    SUMMARY_PREFIX + ".*",  # agents' summaries, remote-written to a fleet
)


def export_pattern(signals: SignalCatalog, xids: XidCatalog, extra: Sequence[str] = ()) -> str:
    """A regular expression (RE2, as Prometheus matches ``__name__``) for every metric a
    replay reads: each rule's metrics, patterns and ratio denominators, the XID sources, every
    DCGM field (GPU series no rule names are still compared with their peers) and the series
    that name hosts and pods. An export selected by it (``{__name__=~"..."}``) replays as the
    whole Prometheus would, without node-exporter's thousands of series no rule reads; with
    ``default_rule.node_level`` on, every ``node_`` series too. Each name and pattern admits
    both spellings of a counter (``both_spellings``), as the rules read both. ``extra``: more
    metric names a replay reads (the diagnosis' NFS mountstats counters)."""
    broad = list(_EXPORT_ALWAYS)
    if signals.default_rule.enabled and signals.default_rule.node_level:
        broad.append("node_.*")
    covered = re.compile("|".join(broad))
    names: list[str] = []
    for rule in signals.signals:
        names.extend(rule.metrics)
        names.extend([rule.pattern] if rule.pattern else [])
        names.extend([rule.denominator] if rule.denominator else [])
    names.extend((*xids.sources.gauge_metrics, *xids.sources.count_metrics, *extra))
    # metric names are [a-zA-Z_:][a-zA-Z0-9_:]*: nothing to escape; a name a broad pattern
    # covers (every DCGM field) is left out
    named = [both_spellings(n) for n in names if not covered.fullmatch(n)]
    return "|".join(dict.fromkeys([*broad, *named]))


_PLAIN_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")


def both_spellings(pattern: str) -> str:
    """A regular expression (RE2 and Python) for what ``pattern``, a metric name or a rule's
    pattern, names in either spelling of a counter (``other_spelling``): ``X`` and ``X_total``
    for a name, each top-level alternative with an optional ``_total`` (one that ends in the
    literal ``_total`` with it optional instead). Exact for names and for patterns whose
    ``_total`` ends an alternative; a pattern with ``_total`` inside a group
    (``a_(b_total|c_total)``) admits the bare spelling only as far as the rest allows."""
    if _PLAIN_NAME.fullmatch(pattern):
        return f"{counter_family(pattern)}(?:{COUNTER_SUFFIX})?"
    out = []
    for alternative in _alternatives(pattern):
        body = alternative.removesuffix(COUNTER_SUFFIX)
        if body != alternative and not body.endswith("\\"):
            out.append(f"{body}(?:{COUNTER_SUFFIX})?")
        else:
            out.append(f"(?:{alternative})(?:{COUNTER_SUFFIX})?")
    return "|".join(out)


def _alternatives(pattern: str) -> list[str]:
    """The top-level alternatives of a regular expression (``|`` outside groups and classes)."""
    parts: list[str] = []
    depth, start, i, in_class = 0, 0, 0, False
    while i < len(pattern):
        char = pattern[i]
        if char == "\\":
            i += 2
            continue
        if in_class:
            in_class = char != "]"
        elif char == "[":
            in_class = True
        elif char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif char == "|" and depth == 0:
            parts.append(pattern[start:i])
            start = i + 1
        i += 1
    parts.append(pattern[start:])
    return parts
