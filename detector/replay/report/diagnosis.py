"""The report's ``diagnosis`` section: the confusion table of the class diagnosed at each
detected failure's first alert against its XID's class, every alert's class, action and
confidence, and each cluster incident's bottleneck with its NFS figures (docs/diagnosis.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from html import escape

import numpy as np

from ...diagnosis import Confusion, Diagnosis
from ...evaluation import Evaluation
from ...loop import ClusterIncident
from .markup import html_table, node_link
from .svg import utc


def class_cell(d: Diagnosis) -> str:
    """Class (its title on hover), confidence and action of a diagnosis."""
    return (
        f"<span title='{escape(d.title)}'>{escape(d.failure_class)}</span> "
        f"{100 * d.confidence:.0f}% → {escape(d.action)}"
    )


def diagnosis_section(
    ev: Evaluation,
    confusion: Confusion | None,
    diagnoses: Mapping[tuple[str, float], Diagnosis],
    storms: Sequence[ClusterIncident],
) -> str:
    """The confusion table and every alert's diagnosis (module docstring)."""
    if confusion is None or not diagnoses:
        return ""
    parts = ["<section id=diagnosis><h2>Diagnosis</h2>"]
    if confusion.rows:
        right, n = confusion.correct()
        right_signals, n_signals = confusion.correct("signals")
        parts.append(
            f"<p>The class diagnosed when each detected failure's first alert started, against "
            f"the class of the XID that followed: {right} of {n} on the diagonal; from precursor "
            f"signals {right_signals} of {n_signals}, raised by the XID itself "
            f"{confusion.correct('xid')[1]}.</p>"
        )
        matrix = confusion.matrix()
        rows = [
            [escape(actual)] + [str(matrix[actual].get(p, 0) or "·") for p in confusion.classes]
            for actual in confusion.classes
            if actual in matrix
        ]
        header = ["XID class \\ diagnosed", *(escape(c) for c in confusion.classes)]
        parts.append(html_table("confusion", header, rows))
    else:
        parts.append("<p>No detected failure to check the diagnosis against.</p>")
    rows = []
    for row in ev.alerts:
        a = row.alert
        found = diagnoses.get((a.node, a.start))
        if found is None:
            continue
        rows.append(
            [
                utc(a.start, "%Y-%m-%d %H:%M"),
                node_link(a.node),
                escape(a.gpu or "–"),
                escape(found.failure_class),
                escape(found.action),
                f"{100 * found.confidence:.0f}%",
                "yes" if row.matched else "no",
                escape(", ".join(a.signals)),
            ]
        )
    header = ["start (UTC)", "node", "GPU", "class", "action", "confidence", "matched", "signals"]
    parts.append("<h3>Alerts</h3>" + html_table("alerts", header, rows))
    if storms:
        parts.append(_storms(storms))
    parts.append("</section>")
    return "".join(parts)


def _storms(storms: Sequence[ClusterIncident]) -> str:
    """One row per cluster incident: its signals, bottleneck and the NFS figures behind it."""

    def ms(now: float, before: float) -> str:
        return "–" if np.isnan(now) else f"{now:.1f} ({before:.1f})"

    rows = []
    for storm in storms:
        f = storm.diagnosis.figures
        rows.append(
            [
                utc(storm.start, "%Y-%m-%d %H:%M"),
                f"{(storm.end - storm.start) / 60:.0f} min",
                escape(", ".join(storm.signals)),
                f"<span title='{escape(storm.diagnosis.reason)}'>"
                f"{escape(storm.diagnosis.bottleneck)}</span>",
                "–" if np.isnan(f["backlog_per_rpc"]) else f"{f['backlog_per_rpc']:.0%}",
                ms(f["queue_ms_per_op"], f["queue_ms_per_op_before"]),
                ms(f["rtt_ms_per_op"], f["rtt_ms_per_op_before"]),
                "–" if np.isnan(f["link_share"]) else f"{f['link_share']:.1%}",
            ]
        )
    header = [
        "incident (UTC)",
        "lasted",
        "signals moving cluster-wide",
        "bottleneck",
        "RPCs backlogged",
        "queue ms/op (before)",
        "RTT ms/op (before)",
        "links used",
    ]
    return "<h3>Cluster incidents</h3>" + html_table("storms", header, rows)
