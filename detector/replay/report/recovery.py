"""The report's ``recovery`` section (replay/recovery.py computes it): how concentrated
exclusions, failures and alerts are (a bar per kind: the top 3 nodes' share, the study's 50 %
line and the even share beside it, then the top-k table), the repeat offenders with their
recommendation and the rule that chose it, and, given a job-attempts file, the retry chains:
success of automatic chains against manual restarts, retry intervals and time lost per failure,
each beside the study's figure.
"""

from __future__ import annotations

from html import escape

from ...evaluation import RULE, STUDY_CONCENTRATION, STUDY_TOP3_SHARE
from ..recovery import Recovery
from ..retries import KINDS, STUDY_AUTOMATIC_SUCCESS, STUDY_MANUAL_SUCCESS, Spread
from .markup import html_table, node_link

BAR_W, BAR_H = 320, 14
_VERDICT = {"replace": "miss", "keep excluded": "late", "inspect": ""}


def recovery_section(recovery: Recovery | None) -> str:
    """The whole section (module docstring); empty without the analysis."""
    if recovery is None:
        return ""
    return (
        "<section id=recovery><h2>Recovery</h2>"
        + _concentration(recovery)
        + _offenders(recovery)
        + _retries(recovery)
        + "</section>"
    )


def _pct(v: float | None, digits: int = 0) -> str:
    return "–" if v is None else f"{100 * v:.{digits}f}%"


def _bar(share: float | None, even: float) -> str:
    """An SVG bar: the top 3 nodes' share, the study's 50 % line, the even share's tick."""
    fill = 0.0 if share is None else share
    ref = STUDY_TOP3_SHARE
    return (
        f"<svg class=share width='{BAR_W}' height='{BAR_H}' role=img "
        f"aria-label='top 3 share {_pct(share)}; study line {_pct(ref)}'>"
        f"<rect x='0' y='0' width='{BAR_W}' height='{BAR_H}' fill='#e5e7eb'></rect>"
        f"<rect class=bar x='0' y='2' width='{fill * BAR_W:.1f}' height='{BAR_H - 4}'></rect>"
        f"<line class=avg x1='{ref * BAR_W:.1f}' x2='{ref * BAR_W:.1f}' y1='0' y2='{BAR_H}'>"
        f"</line><line stroke='#1d4ed8' stroke-width='2' x1='{even * BAR_W:.1f}' "
        f"x2='{even * BAR_W:.1f}' y1='0' y2='{BAR_H}'></line></svg>"
    )


def _concentration(recovery: Recovery) -> str:
    rows = []
    ks: list[int] = []
    for c in recovery.concentration:
        listed = c.to_json()["top"]
        ks = [t["k"] for t in listed] if len(listed) > len(ks) else ks
        even = min(1.0, 3 / c.nodes) if c.nodes else 0.0
        rows.append(
            [
                escape(c.what),
                str(c.total),
                f"{len(c.per_node)} of {c.nodes}",
                *(_pct(t["share"]) for t in listed),
                *(["–"] * (len(ks) - len(listed))),
                _bar(c.top_share(3), even),
                ", ".join(node_link(n) for n, _ in c.per_node[:3]) or "–",
            ]
        )
    header = ["", "total", "nodes with any", *(f"top {k}" for k in ks), "top 3", "top 3 nodes"]
    return (
        "<h3>Concentration</h3>"
        f"<p class=note>The share of each kind on the k nodes with the most. The bar is the top 3 "
        f"nodes' share; the red dashed line is the {escape(STUDY_CONCENTRATION['text'])}; "
        "the blue tick is the share 3 nodes would hold if spread evenly. Exclusions appear when "
        "actions were enabled (dry-run counts).</p>" + html_table("concentration", header, rows)
    )


def _offenders(recovery: Recovery) -> str:
    if not recovery.offenders:
        table = "<p>No node had 2 or more failures or alerts.</p>"
    else:
        rows = [
            [
                node_link(o.node),
                str(o.failures),
                str(o.alerts),
                str(o.false_positives),
                ", ".join(str(x) for x in o.xids) or "–",
                escape(o.leading_signal or "–"),
                f"<span class='{_VERDICT[o.recommendation]}'>{escape(o.recommendation)}</span>",
                escape(o.reason),
            ]
            for o in recovery.offenders
        ]
        header = ["node", "failures", "alerts", "false positives", "XIDs", "leading signal"]
        table = html_table("recommendations", [*header, "recommendation", "why"], rows)
    return (
        "<h3>Repeat offenders: what to do</h3>"
        f"<p class=note>Rule, first that applies: {escape(RULE)}.</p>{table}"
    )


def _minutes(s: Spread) -> str:
    if s.median is None or s.p25 is None or s.p75 is None:
        return "–"
    return f"{s.median / 60:.0f} min (IQR {s.p25 / 60:.0f}–{s.p75 / 60:.0f})"


def _retries(recovery: Recovery) -> str:
    r = recovery.retries
    if r is None:
        return (
            "<h3>Retry chains</h3><p>No job-attempts file: give <code>--jobs FILE</code> "
            "(docs/recovery.md) to see how restarts fared.</p>"
        )
    study = {
        "automatic": f"{_pct(STUDY_AUTOMATIC_SUCCESS, 1)} (12 chains, 73 attempts)",
        "manual": _pct(STUDY_MANUAL_SUCCESS, 1),
        "mixed": "–",
    }
    rows = [
        [
            kind,
            str(s.chains),
            str(s.attempts),
            str(s.succeeded),
            str(s.failed),
            str(s.unfinished),
            f"<b>{_pct(s.success_rate, 1)}</b>",
            study[kind],
        ]
        for kind in KINDS
        if (s := r.by_kind[kind]).chains or kind != "mixed"
    ]
    header = ["restarts", "chains", "attempts", "succeeded", "failed", "unfinished", "success"]
    header.append("study")
    lost = r.lost_s
    same = ", ".join(f"{escape(job)} on {node_link(node)}" for job, node in r.same_node) or "none"
    timing = [
        ["retry interval, every restart", _minutes(r.interval_s), "11 min (IQR 10–11)"],
        ["retry interval, automatic", _minutes(r.interval_by_kind_s["automatic"]), "–"],
        ["retry interval, manual", _minutes(r.interval_by_kind_s["manual"]), "–"],
        [
            "time lost per failure (failure → restart)",
            _minutes(lost)
            + (f"; {lost.total / 3600:.1f} h in all, {r.lost_node_s / 3600:.0f} node-hours")
            if lost.count
            else "–",
            "–",
        ],
    ]
    return (
        "<h3>Retry chains</h3>"
        f"<p>{r.attempts} attempts of {r.jobs} jobs; a chain is a job restarted at least once. "
        f"{r.not_restarted} jobs failed and were never restarted; "
        f"{r.unrestarted_failures} failures in all were not restarted. "
        f"Chains that failed twice on the same node: {same}.</p>"
        + html_table("chains", header, rows)
        + "<p class=note>Retry interval: from an attempt's end to the next one's start. Time "
        "lost: from the failure to the restart (the hang, then the interval).</p>"
        + html_table("retry-timing", ["", "this history", "study"], timing)
    )
