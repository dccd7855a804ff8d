"""The report's charts as inline SVG, built from plain arrays (``html.py`` picks the data).

- ``timeline_svg``: one node's fused score over the whole replay plus zoom panels around its
  failures; alert bands, XID lines and the lead-time bracket from first alert to XID. The
  zoom windows are shaded under the alert bands, so a band keeps its colour inside one.
- ``heatmap_svg``: node x time, max-pooled to at most ``HEAT_BINS`` columns so a one-tick
  spike still shows, drawn as an inline PNG under SVG axes, failure XIDs marked, with a
  colour legend that marks the alert threshold.
- ``bars_svg``: a bar per time bucket (FP/day) with the overall mean as a dashed line.
"""

from __future__ import annotations

from dataclasses import dataclass
from html import escape

import numpy as np

from ...model import FloatArray
from .svg import (
    HEAT_COLORS,
    HEAT_STOPS,
    NO_DATA_RGB,
    Axes,
    heat_rgb,
    path_d,
    png_data_uri,
    pool_max,
    svg,
    utc,
)

HEAT_BINS = 1000


@dataclass(frozen=True, slots=True)
class Span:
    """An alert drawn as a shaded band: matched alerts amber, false positives grey."""

    start: float
    end: float
    matched: bool
    title: str


@dataclass(frozen=True, slots=True)
class Mark:
    """An XID drawn as a vertical line; a failure may carry its first alert's start (lead)."""

    time: float
    label: str
    failure: bool
    title: str
    alert_start: float | None = None


TIMELINE_WIDTH = 1200.0
_LEFT, _RIGHT = 44.0, 16.0


def _spans(ax: Axes, spans: list[Span]) -> str:
    out = []
    for s in spans:
        if s.end < ax.t_lo or s.start > ax.t_hi:
            continue
        x0, x1 = ax.xf(s.start), ax.xf(s.end)
        cls = "tp" if s.matched else "fp"
        out.append(
            f'<rect x="{x0:.1f}" y="{ax.top}" width="{max(x1 - x0, 1.5):.1f}" '
            f'height="{ax.height}" class="{cls}"><title>{escape(s.title)}</title></rect>'
        )
    return "".join(out)


def _marks(ax: Axes, marks: list[Mark], *, labels: bool) -> str:
    out = []
    bottom = ax.top + ax.height
    for m in marks:
        if not ax.t_lo <= m.time <= ax.t_hi:
            continue
        x = float(ax.x(m.time))
        cls = "xid" if m.failure else "xidminor"
        top = ax.top if m.failure else bottom - ax.height / 4
        out.append(
            f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{top}" y2="{bottom}" class="{cls}">'
            f"<title>{escape(m.title)}</title></line>"
        )
    if labels:
        out += [_failure_label(ax, group) for group in _label_groups(ax, marks)]
    return "".join(out)


def _label_groups(ax: Axes, marks: list[Mark], min_px: float = 60.0) -> list[list[Mark]]:
    """Failure marks in view, grouped when closer than ``min_px`` (one label per group)."""
    groups: list[list[Mark]] = []
    for m in sorted(
        (m for m in marks if m.failure and ax.t_lo <= m.time <= ax.t_hi), key=lambda m: m.time
    ):
        if groups and float(ax.x(m.time) - ax.x(groups[-1][0].time)) < min_px:
            groups[-1].append(m)
        else:
            groups.append([m])
    return groups


def _failure_label(ax: Axes, group: list[Mark]) -> str:
    first = group[0]
    x = float(ax.x(first.time))
    codes = ", ".join(dict.fromkeys(m.label for m in group))
    out = f'<text x="{x + 3:.1f}" y="{ax.top + 11}" class="xidlab">{escape(codes)}</text>'
    starts = [m.alert_start for m in group if m.alert_start is not None]
    if starts and min(starts) < first.time:
        # The bracket runs from the earliest alert to the first XID of the group: the warning
        # an operator actually had.
        start = min(starts)
        xa, y = ax.xf(start), ax.top + ax.height - 12
        lead = first.time - start
        text = f"lead {lead / 60:.0f} min" if lead >= 120 else f"lead {lead:.0f} s"
        anchor = (
            f'x="{(xa + x) / 2:.1f}" text-anchor="middle"'
            if x - xa > 70
            else f'x="{xa - 3:.1f}" text-anchor="end"'
        )
        out += (
            f'<line x1="{xa:.1f}" x2="{x:.1f}" y1="{y}" y2="{y}" class="lead"/>'
            f'<line x1="{xa:.1f}" x2="{xa:.1f}" y1="{y - 4}" y2="{y + 4}" class="lead"/>'
            f'<text {anchor} y="{y - 4}" class="leadlab">{text}</text>'
        )
    return out


def _score_line(ax: Axes, times: FloatArray, scores: FloatArray, threshold: float) -> str:
    centers, pooled, filled = pool_max(times, scores, ax.t_lo, ax.t_hi, int(min(ax.width, 1000)))
    # Bins without ticks are skipped (the line joins over them); ticks without data break it.
    d = path_d(ax.x(centers[filled]), ax.y(np.clip(pooled[filled, 0], 0.0, 1.0)))
    y = float(ax.y(threshold))
    right = ax.left + ax.width
    return (
        f'<line x1="{ax.left}" x2="{right}" y1="{y:.1f}" y2="{y:.1f}" class="thr"/>'
        f'<path d="{d}" class="score"/>'
    )


def timeline_svg(
    times: FloatArray,
    scores: FloatArray,
    threshold: float,
    spans: list[Span],
    marks: list[Mark],
    span: tuple[float, float],
    windows: list[tuple[float, float]],
    label: str,
) -> str:
    """One node: the whole replay on top (zoom windows outlined), then a zoom panel per window
    (alert bands, failure XIDs with their lead-time bracket, fused score, threshold)."""
    plot_w = TIMELINE_WIDTH - _LEFT - _RIGHT
    overview = Axes(_LEFT, 14, plot_w, 60, span[0], span[1])
    body = [overview.frame((0.0, 1.0), 12)]
    names = "ABCDEFGH"
    # A zoom window is shaded under the alert bands and outlined over them: a band keeps its
    # colour inside a window (drawn over a band, the blue shade turned matched amber grey).
    edges = []
    for i, (lo, hi) in enumerate(windows):
        x0, x1 = overview.xf(lo), overview.xf(hi)
        box = f'x="{x0:.1f}" y="13" width="{max(x1 - x0, 2):.1f}" height="62"'
        body.append(f'<rect {box} class="win"/>')
        edges.append(
            f'<rect {box} class="winedge"/>'
            f'<text x="{x0:.1f}" y="11" class="winlab">{names[i]}</text>'
        )
    body += [_spans(overview, spans), *edges]
    body += [_marks(overview, marks, labels=False), _score_line(overview, times, scores, threshold)]
    height = 104.0
    if windows:
        gap = 24.0
        w = (plot_w - gap * (len(windows) - 1)) / len(windows)
        for i, (lo, hi) in enumerate(windows):
            ax = Axes(_LEFT + i * (w + gap), 112, w, 110, lo, hi)
            body += [
                f'<text x="{ax.left}" y="{ax.top - 4}" class="winlab">{names[i]} '
                f"{utc(lo)} – {utc(hi, '%H:%M')} UTC</text>",
                ax.frame((0.0, threshold, 1.0), max(3, int(w / 70))),
                _spans(ax, spans),
                _score_line(ax, times, scores, threshold),
                _marks(ax, marks, labels=True),
            ]
        height = 244.0
    return svg(TIMELINE_WIDTH, height, "".join(body), cls="timeline", label=label)


def heatmap_svg(
    times: FloatArray,
    scores: FloatArray,
    node_names: tuple[str, ...] | list[str],
    span: tuple[float, float],
    threshold: float,
    failures: list[tuple[float, int, str]],
) -> str:
    """Node x time heat map of ``scores`` (ticks x nodes); ``failures`` are (time, node
    column, tooltip) drawn as markers on their row."""
    n = len(node_names)
    row_h = float(min(14, max(4, 640 // max(n, 1))))
    top, plot_w = 8.0, TIMELINE_WIDTH - 80 - _RIGHT
    ax = Axes(80, top, plot_w, row_h * n, span[0], span[1])
    bins = int(min(HEAT_BINS, max(times.shape[0], 1)))
    _, pooled, _ = pool_max(times, scores, span[0], span[1], bins)
    image = png_data_uri(heat_rgb(pooled.T))
    body = [
        f'<image x="{ax.left}" y="{top}" width="{plot_w}" height="{ax.height}" '
        f'preserveAspectRatio="none" href="{image}"/>',
        ax.frame((), 12).replace('class="grid"', 'class="grid heatgrid"'),
    ]
    every = max(1, int(np.ceil(8 / row_h)))  # label every row when there is room
    for i, name in enumerate(node_names):
        if i % every == 0:
            y = top + (i + 0.5) * row_h + 3
            body.append(f'<text x="{ax.left - 4}" y="{y:.1f}" class="ylab">{escape(name)}</text>')
    for t, col, title in failures:
        x, y = float(ax.x(t)), top + (col + 0.5) * row_h
        r = max(row_h / 2, 3)
        body.append(
            f'<path d="M{x - r:.1f} {y - r:.1f}L{x + r:.1f} {y - r:.1f}L{x:.1f} {y + r:.1f}Z" '
            f'class="heatmark"><title>{escape(title)}</title></path>'
        )
    legend_y = top + ax.height + 26
    body.append(_legend(ax.left, legend_y, threshold))
    return svg(TIMELINE_WIDTH, legend_y + 34, "".join(body), cls="heat", label="heat map")


def _legend(left: float, top: float, threshold: float, width: float = 300.0) -> str:
    stops = "".join(
        f'<stop offset="{s:g}" stop-color="rgb({r:g},{g:g},{b:g})"/>'
        for s, (r, g, b) in zip(HEAT_STOPS.tolist(), HEAT_COLORS.tolist(), strict=True)
    )
    xt = left + threshold * width
    ticks = "".join(
        f'<text x="{left + v * width:.1f}" y="{top + 24}" class="xlab">{v:g}</text>'
        for v in (0.0, 0.25, 0.5, 0.75, 1.0)
    )
    nd = "rgb({},{},{})".format(*NO_DATA_RGB)
    return (
        f'<defs><linearGradient id="heatscale">{stops}</linearGradient></defs>'
        f'<text x="{left - 4}" y="{top + 10}" class="ylab">fused score</text>'
        f'<rect x="{left}" y="{top}" width="{width}" height="12" fill="url(#heatscale)" '
        'class="plot"/>'
        f'<line x1="{xt:.1f}" x2="{xt:.1f}" y1="{top - 4}" y2="{top + 16}" class="thr"/>'
        f'<text x="{xt:.1f}" y="{top - 6}" class="xlab">threshold {threshold:.2f}</text>{ticks}'
        f'<rect x="{left + width + 30}" y="{top}" width="18" height="12" fill="{nd}"/>'
        f'<text x="{left + width + 52}" y="{top + 10}">no data</text>'
        f'<path d="M{left + width + 120} {top}l12 0l-6 12z" class="heatmark"/>'
        f'<text x="{left + width + 138}" y="{top + 10}">failure XID</text>'
    )


def bars_svg(
    starts: FloatArray,
    width_s: float,
    values: FloatArray,
    labels: list[str],
    span: tuple[float, float],
    mean: float,
    label: str,
) -> str:
    """A bar per bucket [start, start + width_s) with ``values`` and a text label above it;
    ``mean`` is drawn as a dashed line."""
    top_v = float(max(np.max(values, initial=0.0), mean, 1e-9)) * 1.15
    ax = Axes(_LEFT, 16, TIMELINE_WIDTH - _LEFT - _RIGHT, 150, span[0], span[1], 0.0, top_v)
    ticks = tuple(np.round(np.linspace(0.0, top_v / 1.15, 3), 0 if top_v > 10 else 1).tolist())
    body = [ax.frame(ticks, 12)]
    for t, v, text in zip(starts.tolist(), values.tolist(), labels, strict=True):
        x0, x1 = ax.xf(t), ax.xf(t + width_s)
        y = float(ax.y(v))
        body.append(
            f'<rect x="{x0 + 2:.1f}" y="{y:.1f}" width="{max(x1 - x0 - 4, 1):.1f}" '
            f'height="{ax.top + ax.height - y:.1f}" class="bar">'
            f"<title>{escape(text)}</title></rect>"
            f'<text x="{(x0 + x1) / 2:.1f}" y="{y - 3:.1f}" class="xlab">{escape(text)}</text>'
        )
    y = float(ax.y(mean))
    body.append(
        f'<line x1="{ax.left}" x2="{ax.left + ax.width}" y1="{y:.1f}" y2="{y:.1f}" class="avg"/>'
        f'<text x="{ax.left + ax.width - 4}" y="{y - 4:.1f}" class="ylab">'
        f"mean {mean:.2f}/day</text>"
    )
    return svg(TIMELINE_WIDTH, 190, "".join(body), cls="bars", label=label)


# The page's style sheet: mostly the chart classes used above (one place to restyle).
LEGEND = (
    "<p class=legend><span class='sw score'></span>fused score "
    "<span class='sw thr'></span>threshold <span class='sw tp'></span>alert that matched a "
    "failure <span class='sw fp'></span>false-positive alert <span class='sw xid'></span>failure "
    "XID <span class='sw xidminor'></span>other XID</p>"
)

CSS = """
body{font:14px/1.4 system-ui,-apple-system,'Segoe UI',Roboto,'DejaVu Sans',sans-serif;
 color:#1f2937;background:#f8fafc;margin:0}
main{max-width:1240px;margin:0 auto;padding:16px 20px 40px}
h1{margin:4px 0}h2{margin:28px 0 8px;border-bottom:2px solid #e5e7eb}h3{margin:16px 0 2px}
h3 small{font-weight:normal;color:#6b7280}.sub,.note{color:#4b5563}.note{font-size:12px}
table{border-collapse:collapse;background:#fff;font-variant-numeric:tabular-nums}
th,td{border:1px solid #e5e7eb;padding:4px 8px;text-align:left;white-space:nowrap}
td:last-child{white-space:normal}th{background:#f1f5f9}
tbody tr:nth-child(even){background:#f9fafb}
table.summary td{font-size:18px;font-weight:600}
.early{color:#15803d;font-weight:600}.late{color:#b45309;font-weight:600}
.miss{color:#b91c1c;font-weight:600}code{font-size:12px}
ul.signals{margin:2px 0 0;font-size:13px}
svg{background:#fff;display:block}svg text{font-size:10px;fill:#374151}
.plot{fill:none;stroke:#9ca3af}.grid{stroke:#eef0f3}.ylab{text-anchor:end}
.xlab{text-anchor:middle}.score{fill:none;stroke:#1d4ed8;stroke-width:1.2}
.thr{stroke:#111827;stroke-dasharray:5 3}.tp{fill:#f59e0b;fill-opacity:.35}
.fp{fill:#6b7280;fill-opacity:.25}.xid{stroke:#dc2626;stroke-width:2}
.xidminor{stroke:#a855f7;stroke-width:1;stroke-dasharray:2 2}
.xidlab{fill:#dc2626;font-weight:600}
.xidlab,.leadlab{paint-order:stroke;stroke:#fff;stroke-width:3px}
.lead{stroke:#15803d;stroke-width:2}
.leadlab{fill:#15803d;font-weight:600}
.win{fill:#dbeafe;fill-opacity:.5}.winedge{fill:none;stroke:#60a5fa}.winlab{font-weight:600}
.legend .sw{display:inline-block;width:18px;height:10px;margin:0 4px 0 12px;
 vertical-align:middle}
.sw.score{border-top:2px solid #1d4ed8;height:0}.sw.thr{border-top:2px dashed #111827;height:0}
.sw.tp{background:#f59e0b;opacity:.5}.sw.fp{background:#6b7280;opacity:.35}
.sw.xid{border-left:3px solid #dc2626;width:0}
.sw.xidminor{border-left:2px dashed #a855f7;width:0}
.heat image{image-rendering:pixelated}.heat .ylab{font-size:8px}
.bar{fill:#6b7280}.avg{stroke:#dc2626;stroke-dasharray:5 3}
"""
