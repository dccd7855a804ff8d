"""The HTML replay report (``detector replay --html FILE``): one self-contained file.

``render_html(result, threshold=..., label=...)`` is a pure function of a replay's result (read
through the ``ReplayData`` protocol, which ``replay.ReplayResult`` satisfies; this module sits
below the drivers and does not import them). It needs the result recorded with
``record_scores=True`` for the timelines and the heat map; without scores those sections say so.

Sections, each under an element id the tests look for: ``summary`` (headline table, the
``incidents`` note saying what a cluster incident is, ``inputs``: the failures by source and
how many named signals the data fed, then ``unfed``: those it did not, collapsed),
``failures`` (a row per failure XID with its lead time), ``timelines`` (an SVG per node with a
failure: fused score, threshold, alert bands, XIDs, zoom panels around the failures clamped
to the data's span, and the top signals listed under it), ``heatmap`` (node x time,
max-pooled, with a colour legend), ``signals`` (the dominant signal per failure type, from
``signals_first``), ``fp`` (FP/day per daily bucket of unmatched alerts) and ``offenders``
(nodes ranked by alerts and failures) and, given the diagnoses, ``diagnosis`` (the
confusion table of the class diagnosed at each detected failure's first alert against its XID's
class, every alert's class, action and confidence, and each cluster incident's bottleneck) and,
given the recovery analytics, ``recovery`` (concentration, repeat offenders' recommendations,
retry chains: report/recovery.py).

No network resources: CSS and SVG are inline, the heat map is an inline PNG (``data:`` URI).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from html import escape
from typing import Protocol

import numpy as np

from ...diagnosis import Confusion, Diagnosis
from ...evaluation import (
    Evaluation,
    FailureRow,
    describe_other_xids,
    describe_weights,
    failure_sources,
)
from ...loop import ClusterIncident
from ...model import Alert, FloatArray, XidEvent
from ..recovery import Recovery
from .charts import CSS, LEGEND, Mark, Span, bars_svg, heatmap_svg, timeline_svg
from .diagnosis import class_cell, diagnosis_section
from .markup import html_table, node_link
from .recovery import recovery_section
from .svg import utc

ZOOM_BEFORE_S = 5400.0  # a zoom panel shows 90 min before the failure (longer if the lead is)
ZOOM_AFTER_S = 2700.0
MERGE_S = 2 * 3600.0  # failures this close share one zoom panel
MAX_PANELS = 4


class ReplayData(Protocol):
    """What the report reads from a replay (``replay.ReplayResult`` has all of it)."""

    @property
    def start(self) -> float: ...
    @property
    def end(self) -> float: ...
    @property
    def ticks(self) -> int: ...
    @property
    def series(self) -> int: ...
    @property
    def alerts(self) -> Sequence[Alert]: ...
    @property
    def all_xids(self) -> Sequence[XidEvent]: ...
    @property
    def incidents(self) -> int: ...
    @property
    def evaluation(self) -> Evaluation: ...
    @property
    def wall_s(self) -> float: ...
    @property
    def node_names(self) -> Sequence[str]: ...
    @property
    def times(self) -> FloatArray: ...
    @property
    def node_scores(self) -> FloatArray: ...
    @property
    def failures(self) -> Sequence[XidEvent]: ...
    @property
    def signals_found(self) -> Sequence[str]: ...
    @property
    def signals_missing(self) -> Sequence[str]: ...
    @property
    def split_nodes(self) -> Sequence[str]: ...
    @property
    def inferred_split_nodes(self) -> Sequence[str]: ...
    @property
    def alone_nodes(self) -> Sequence[str]: ...
    @property
    def cohort_advice(self) -> str: ...


def render_html(
    result: ReplayData,
    *,
    threshold: float,
    label: str,
    signal_weights: Mapping[str, float] | None = None,
    confusion: Confusion | None = None,
    diagnoses: Mapping[tuple[str, float], Diagnosis] | None = None,
    storms: Sequence[ClusterIncident] = (),
    recovery: Recovery | None = None,
) -> str:
    """The whole report as one HTML document (module docstring). ``diagnoses``: each alert's
    diagnosis by (node, start); ``confusion``: the table over the detected failures;
    ``storms``: the cluster incidents with their bottlenecks; ``recovery``: the recovery
    analytics (replay/recovery.py)."""
    sections = [
        _summary(result, threshold, signal_weights or {}),
        _failures(result.evaluation, diagnoses or {}),
        _timelines(result, threshold),
        _heatmap(result, threshold),
        _signals(result.evaluation),
        _fp_per_day(result),
        _offenders(result.evaluation),
        diagnosis_section(result.evaluation, confusion, diagnoses or {}, storms),
        recovery_section(recovery),
    ]
    days = (result.end - result.start) / 86400
    head = (
        f"<h1>Replay report</h1><p class=sub>{escape(label)}<br>{utc(result.start)} – "
        f"{utc(result.end)} UTC ({days:.2f} days), {len(result.node_names)} nodes, "
        f"{result.series} series, {result.ticks} ticks, replayed in {result.wall_s:.1f} s</p>"
    )
    return (
        "<!DOCTYPE html>\n<html lang=en><head><meta charset=utf-8>"
        "<meta name=viewport content='width=device-width, initial-scale=1'>"
        f"<title>detector replay report: {escape(label)}</title><style>{CSS}</style></head>"
        f"<body><main>{head}{''.join(sections)}</main></body></html>\n"
    )


def _pct(v: float | None) -> str:
    return "–" if v is None else f"{100 * v:.0f}%"


def _lead(v: float | None) -> str:
    if v is None:
        return "–"
    return f"{v:+.0f} s" if abs(v) < 120 else f"{v / 60:+.1f} min"


def _summary(result: ReplayData, threshold: float, weights: Mapping[str, float]) -> str:
    s = result.evaluation.summary
    other = describe_other_xids(result.evaluation)
    lt = s.lead_time_s
    cells = [
        ("failures", str(s.failures)),
        ("detected", f"{s.detected} ({_pct(s.recall)})"),
        ("before the XID", f"{s.detected_before_failure} ({_pct(s.share_before)})"),
        ("alerts", str(len(result.alerts))),
        ("precision", _pct(s.precision)),
        ("false positives", str(s.false_positives)),
        ("FP/day", f"{s.fp_per_day:.2f}"),
        ("lead time p25 / median / p75", f"{_lead(lt.p25)} / {_lead(lt.median)} / {_lead(lt.p75)}"),
        ("<a href='#incidents'>cluster incidents</a>", str(result.incidents)),
        ("alert threshold", f"{threshold:.3f}"),
    ]
    return (
        "<section id=summary><h2>Summary</h2>"
        + html_table("summary", [h for h, _ in cells], [[v for _, v in cells]])
        + "<p class=note id=incidents>Cluster incidents: how many times many nodes moved "
        "together (an NFS checkpoint storm, a job restart), on whatever signals, each reported "
        "once as one group event with its bottleneck (under Diagnosis), not as node alerts or "
        "false positives.</p>"
        + "<p class=note>Lead time: XID time minus the start of the earliest matching alert "
        "(positive: the alert came first). Signal weights: "
        + (escape(describe_weights(weights)) if weights else "the rules' own (none calibrated)")
        + "."
        + (f" {escape(other[:1].upper() + other[1:])}." if other else "")
        + "</p>"
        + _inputs(result)
        + _unfed(result)
        + "</section>"
    )


def _inputs(result: ReplayData) -> str:
    """Where the failures came from, which named signals the data fed, and the nodes whose
    GPUs ran different jobs at once (what a user checks first when the figures surprise)."""
    sources = failure_sources(result.failures)
    fed, unfed = list(result.signals_found), list(result.signals_missing)
    parts = []
    if sources:
        counted = ", ".join(f"{escape(k)} {n}" for k, n in sources)
        parts.append(f"Failures by the source that first reported each: {counted}.")
    if fed or unfed:
        parts.append(
            f"Signals named in rules/signals.yaml that the data fed: {len(fed)} of "
            f"{len(fed) + len(unfed)}" + ("; the others are listed below." if unfed else ".")
        )
    unlabelled = "GPUs that no workload label names moved"
    for nodes, what, setting in (
        (
            result.split_nodes,
            "GPUs in different jobs at once on {n} node(s), each GPU judged against its own job's",
            "labels.gpu_workload_labels",
        ),
        (
            result.inferred_split_nodes,
            f"{unlabelled} as separate jobs on {{n}} node(s), each group judged against its own",
            "labels.gpu_workload_comovement",
        ),
        (
            result.alone_nodes,
            f"{unlabelled} with none of their node's GPUs beside a job that did on {{n}} "
            "node(s), each judged without GPU peers",
            "labels.gpu_workload_comovement",
        ),
    ):
        if nodes:
            links = ", ".join(node_link(n) for n in nodes)
            parts.append(f"{what.format(n=len(nodes))} (<code>{setting}</code>): {links}.")
    if result.cohort_advice:
        parts.append(f"{escape(result.cohort_advice[0].upper() + result.cohort_advice[1:])}.")
    return f"<p class=note id=inputs>{' '.join(parts)}</p>" if parts else ""


def _unfed(result: ReplayData) -> str:
    """The named signals the data did not feed, last in the summary and collapsed: a long list
    (dozens where a cluster exports no InfiniBand or ECC series) that matters when a figure
    surprises, not before the figures."""
    unfed = list(result.signals_missing)
    if not unfed:
        return ""
    names = ", ".join(f"<code>{escape(n)}</code>" for n in unfed)
    return (
        f"<details class=note id=unfed><summary>{len(unfed)} signal(s) named in "
        f"rules/signals.yaml not fed by the data</summary><p>{names}.</p></details>"
    )


def _node_link(node: str) -> str:
    return f"<a href='#node-{escape(node)}'>{escape(node)}</a>"


def _failures(ev: Evaluation, diagnoses: Mapping[tuple[str, float], Diagnosis]) -> str:
    rows = []
    for row in ev.failures:
        f = row.event
        if not row.detected:
            found = "<span class=miss>missed</span>"
        elif row.lead_time_s is not None and row.lead_time_s > 0:
            found = "<span class=early>before</span>"
        else:
            found = "<span class=late>after</span>"
        diagnosed = ""
        if row.first_alert is not None:
            signals = escape(", ".join(row.first_alert.signals))
            diagnosis = diagnoses.get((row.first_alert.node, row.first_alert.start))
            diagnosed = "" if diagnosis is None else class_cell(diagnosis)
        else:
            firing = _firing_at(ev, f)
            signals = (
                "" if firing is None else f"(the alert of {utc(firing, '%H:%M')} still firing)"
            )
        rows.append(
            [
                utc(f.time, "%Y-%m-%d %H:%M:%S"),
                node_link(f.node),
                escape(f.gpu or "–"),
                str(f.xid),
                found,
                _lead(row.lead_time_s),
                signals,
                *([diagnosed] if diagnoses else []),
            ]
        )
    if not rows:
        return (
            "<section id=failures><h2>Failures</h2><p>No failure XIDs in this replay.</p></section>"
        )
    header = ["time (UTC)", "node", "GPU", "XID", "detected", "lead time", "first alert's signals"]
    header += ["first alert's diagnosis"] if diagnoses else []
    return f"<section id=failures><h2>Failures</h2>{html_table('failures', header, rows)}</section>"


def _firing_at(ev: Evaluation, f: XidEvent) -> float | None:
    """Start of an alert on the failure's node already firing at its time (a miss that an
    operator would still have seen), or None."""
    for a in ev.alerts:
        al = a.alert
        if al.node == f.node and al.start < f.time and (al.end is None or al.end >= f.time):
            return al.start
    return None


def _windows(
    times: list[float], leads: list[float], span: tuple[float, float]
) -> list[tuple[float, float]]:
    """Zoom windows around failures; failures within MERGE_S of each other share one. A
    window is clamped to the data's ``span``: none starts before the first tick or ends after
    the last (a failure near either end would show an empty stretch)."""
    windows: list[tuple[float, float]] = []
    for t, lead in sorted(zip(times, leads, strict=True)):
        before = min(max(ZOOM_BEFORE_S, lead + 1800.0), 8 * ZOOM_BEFORE_S)
        if windows and t - windows[-1][1] < MERGE_S - ZOOM_AFTER_S:
            lo, _ = windows[-1]
            windows[-1] = (min(lo, t - before), t + ZOOM_AFTER_S)
        else:
            windows.append((t - before, t + ZOOM_AFTER_S))
    first, last = span
    clamped = [(max(lo, first), min(hi, last)) for lo, hi in windows]
    return [(lo, hi) for lo, hi in clamped if lo < hi][:MAX_PANELS]


def _timelines(result: ReplayData, threshold: float) -> str:
    ev = result.evaluation
    by_node: dict[str, list[int]] = defaultdict(list)
    for i, row in enumerate(ev.failures):
        by_node[row.event.node].append(i)
    if not by_node:
        return "<section id=timelines><h2>Timelines</h2><p>No node had a failure.</p></section>"
    if result.node_scores.size == 0:
        return (
            "<section id=timelines><h2>Timelines</h2><p>Scores were not recorded "
            "(replay with record_scores=True).</p></section>"
        )
    column = {name: i for i, name in enumerate(result.node_names)}
    span = (result.start, result.end)
    parts = ["<section id=timelines><h2>Timelines of the nodes that failed</h2>", LEGEND]
    for node, idx in by_node.items():
        rows = [ev.failures[i] for i in idx]
        spans = [
            Span(a.alert.start, a.alert.end or result.end, a.matched, _alert_title(a.alert))
            for a in ev.alerts
            if a.alert.node == node
        ]
        failure_times = {(r.event.time, r.event.xid) for r in rows}
        marks = [
            Mark(
                r.event.time,
                f"XID {r.event.xid}",
                True,
                _xid_title(r.event),
                r.first_alert.start if r.first_alert else None,
            )
            for r in rows
        ] + [
            Mark(x.time, f"xid {x.xid}", False, _xid_title(x))
            for x in result.all_xids
            if x.node == node and (x.time, x.xid) not in failure_times
        ]
        windows = _windows(
            [r.event.time for r in rows], [max(r.lead_time_s or 0.0, 0.0) for r in rows], span
        )
        scores = (
            result.node_scores[:, column[node]]
            if node in column
            else np.full(result.times.shape, np.nan)
        )
        chart = timeline_svg(
            result.times, scores, threshold, spans, marks, span, windows, f"timeline of {node}"
        )
        n_alerts = len(spans)
        parts.append(
            f"<div class=node id='node-{escape(node)}'><h3>{escape(node)} <small>"
            f"{len(rows)} failure(s), {n_alerts} alert(s)</small></h3>{chart}"
            f"{_node_signals(ev, rows, [a.alert for a in ev.alerts if a.alert.node == node])}</div>"
        )
    parts.append("</section>")
    return "".join(parts)


def _alert_title(a: Alert) -> str:
    end = "open" if a.end is None else utc(a.end, "%H:%M")
    gpu = f" GPU {a.gpu}" if a.gpu is not None else ""
    return f"alert{gpu} {utc(a.start)}–{end}, peak {a.peak_score:.2f}: {', '.join(a.signals)}"


def _xid_title(x: XidEvent) -> str:
    gpu = f" GPU {x.gpu}" if x.gpu is not None else ""
    return f"XID {x.xid}{gpu} at {utc(x.time, '%Y-%m-%d %H:%M:%S')} ({x.source or 'data'})"


def _node_signals(ev: Evaluation, rows: Sequence[FailureRow], alerts: Sequence[Alert]) -> str:
    items = []
    for row in rows:
        f, first = row.event, row.first_alert
        what = f"XID {f.xid} (GPU {escape(f.gpu or '–')}, {utc(f.time)})"
        firing = _firing_at(ev, f) if first is None else None
        if firing is not None:
            items.append(
                f"<li>{what}: <span class=miss>no new alert</span> (the alert raised at "
                f"{utc(firing, '%H:%M')} was still firing)</li>"
            )
        elif first is None:
            items.append(f"<li>{what}: <span class=miss>no alert</span></li>")
        else:
            lead = _lead(row.lead_time_s)
            sig = ", ".join(f"<code>{escape(s)}</code>" for s in first.signals) or "–"
            items.append(f"<li>{what}: first alert {lead}, top signals {sig}</li>")
    counts = Counter(s for a in alerts for s in a.signals[:1])
    if counts:
        led = ", ".join(f"<code>{escape(s)}</code> ×{n}" for s, n in counts.most_common(5))
        items.append(f"<li>leading signal over all {len(alerts)} alerts: {led}</li>")
    return f"<ul class=signals>{''.join(items)}</ul>"


def _heatmap(result: ReplayData, threshold: float) -> str:
    title = "<section id=heatmap><h2>Cluster heat map</h2>"
    if result.node_scores.size == 0:
        return f"{title}<p>Scores were not recorded.</p></section>"
    column = {name: i for i, name in enumerate(result.node_names)}
    marks = [
        (row.event.time, column[row.event.node], _xid_title(row.event))
        for row in result.evaluation.failures
        if row.event.node in column
    ]
    chart = heatmap_svg(
        result.times,
        result.node_scores,
        list(result.node_names),
        (result.start, result.end),
        threshold,
        marks,
    )
    return (
        f"{title}<p class=note>Each cell is the highest fused score of its node in its time "
        f"bin (max-pooled, so short spikes stay visible).</p>{chart}</section>"
    )


def _fp_per_day(result: ReplayData) -> str:
    """FP/day per bucket of unmatched alerts (by alert start); hourly buckets under 2 days."""
    days = (result.end - result.start) / 86400
    width = 86400.0 if days >= 2 else 3600.0
    n = max(int(np.ceil((result.end - result.start) / width)), 1)
    starts = result.start + width * np.arange(n, dtype=np.float64)
    fp = np.array([r.alert.start for r in result.evaluation.alerts if not r.matched])
    counts = (
        np.bincount(
            np.clip(((fp - result.start) // width).astype(np.int64), 0, starts.size - 1),
            minlength=starts.size,
        )
        if fp.size
        else np.zeros(starts.size, dtype=np.int64)
    )
    # A partial last bucket is scaled by the time it covers, not by its nominal width.
    covered = np.minimum(starts + width, max(result.end, result.start + 1)) - starts
    rates = counts / (covered / 86400)
    labels = [f"{c} FP" for c in counts.tolist()]
    chart = bars_svg(
        starts,
        width,
        rates,
        labels,
        (result.start, starts[-1] + width),
        result.evaluation.summary.fp_per_day,
        "false positives per day",
    )
    unit = "day" if width == 86400 else "hour"
    return (
        f"<section id=fp><h2>False positives per day</h2><p class=note>Alerts that matched no "
        f"failure, by the {unit} they started in, as a rate per day.</p>{chart}</section>"
    )


def _signals(ev: Evaluation) -> str:
    per_xid: dict[int, list[int]] = defaultdict(lambda: [0, 0, 0])
    for row in ev.failures:
        c = per_xid[row.event.xid]
        c[0] += 1
        c[1] += row.detected
        c[2] += bool(row.lead_time_s is not None and row.lead_time_s > 0)
    rows = []
    for xid, (n, detected, before) in sorted(per_xid.items()):
        counts = sorted(ev.signals_first.get(xid, {}).items(), key=lambda kv: (-kv[1], kv[0]))
        # xid_<code> signals are the XID itself forcing the alert, not a precursor.
        precursors = [(s, k) for s, k in counts if not s.startswith("xid_")]
        top = precursors[0][0] if precursors else None
        if top is not None:
            dominant = f"<code>{escape(top)}</code> ({precursors[0][1]}/{detected})"
        elif counts:
            dominant = "<span class=note>none: alerts raised by the XID itself</span>"
        else:
            dominant = "–"
        others = ", ".join(f"{escape(s)} ({k})" for s, k in counts if s != top)
        rows.append([str(xid), str(n), str(detected), str(before), dominant, others])
    header = ["XID", "failures", "detected", "before the XID", "dominant precursor", "also"]
    table = html_table("signals", header, rows) if rows else "<p>No failures.</p>"
    return (
        "<section id=signals><h2>Dominant signal per failure type</h2>"
        "<p class=note>Counted over the top signals of the earliest alert that matched each "
        "failure; <code>xid_&lt;code&gt;</code> means the XID itself raised the alert.</p>"
        f"{table}</section>"
    )


def _offenders(ev: Evaluation, limit: int = 20) -> str:
    alerts: Counter[str] = Counter()
    fps: Counter[str] = Counter()
    leading: dict[str, Counter[str]] = defaultdict(Counter)
    for a in ev.alerts:
        alerts[a.alert.node] += 1
        fps[a.alert.node] += not a.matched
        leading[a.alert.node].update(a.alert.signals[:1])
    failures: dict[str, list[int]] = defaultdict(list)
    for row in ev.failures:
        failures[row.event.node].append(row.event.xid)
    nodes = sorted(set(alerts) | set(failures), key=lambda n: (-(alerts[n] + len(failures[n])), n))
    rows = [
        [
            str(rank),
            node_link(n) if failures[n] else escape(n),
            str(alerts[n]),
            str(fps[n]),
            str(len(failures[n])),
            ", ".join(str(x) for x in failures[n]) or "–",
            escape(leading[n].most_common(1)[0][0]) if leading[n] else "–",
        ]
        for rank, n in enumerate(nodes[:limit], 1)
    ]
    header = ["#", "node", "alerts", "false positives", "failures", "XIDs", "usual leading signal"]
    table = html_table("offenders", header, rows) if rows else "<p>No alerts and no failures.</p>"
    more = (
        f"<p class=note>{len(nodes) - limit} more nodes not shown.</p>"
        if len(nodes) > limit
        else ""
    )
    return f"<section id=offenders><h2>Repeat offenders</h2>{table}{more}</section>"
