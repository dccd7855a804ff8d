"""The terminal summary of a replay (``detector replay`` prints it, as the report's first lines):
what was replayed and how fast, failures caught and before the XID, false positives per day,
lead-time quartiles, where the failures came from, which named signals the data lacked, how
the GPUs and nodes were grouped, the diagnosis confusion table, and one row per failure."""

from __future__ import annotations

import time as wallclock
from collections import Counter
from collections.abc import Sequence
from typing import Any

from ..evaluation import describe_other_xids, describe_weights, failure_sources
from .diagnosis import describe_learned, diagnosis_confusion, storm_lines
from .run import ReplayResult


def summary_lines(result: ReplayResult) -> list[str]:
    """A readable summary for the terminal."""
    s: dict[str, Any] = result.evaluation.to_json()["summary"]
    days = result.end - result.start
    lt = s["lead_time_s"]

    def fmt_lead(v: float | None) -> str:
        return "-" if v is None else f"{v / 60:+.1f} min"

    lines = [
        f"replayed {days / 86400:.2f} days, {result.ticks} ticks, {result.series} series"
        f"{f' ({result.dropped} dropped by labels.drop)' if result.dropped else ''}, "
        f"{len(result.node_names)} nodes in {result.wall_s:.1f} s "
        f"({days / 86400 / max(result.wall_s, 1e-9) * 60:.1f} days/min)",
        f"failures {s['failures']}  detected {s['detected']}  "
        f"before the XID {s['detected_before_failure']}  "
        f"recall {_pct(s['recall'])}  precision {_pct(s['precision'])}",
        f"alerts {len(result.alerts)}  false positives {s['false_positives']}  "
        f"FP/day {s['fp_per_day']:.2f}  cluster incidents {result.incidents}",
        f"lead time p25 {fmt_lead(lt['p25'])}  median {fmt_lead(lt['median'])}  "
        f"p75 {fmt_lead(lt['p75'])}  (positive: alert before the XID)",
    ]
    if at_other := describe_other_xids(result.evaluation):  # still counted, worth a look
        lines.append(at_other)
    lines.extend(_action_lines(result))
    if result.failures:  # where the failures came from: a user checks their events loaded
        counted = ", ".join(f"{name} {n}" for name, n in failure_sources(result.failures))
        lines.append(f"failures by source (first report of each episode): {counted}")
    if result.signals_found or result.signals_missing:
        fed, unfed = len(result.signals_found), len(result.signals_missing)
        lines.append(
            f"signals: {fed} of {fed + unfed} named in rules/signals.yaml found in the data"
            + (f"; not found: {_first_few(result.signals_missing)}" if unfed else "")
        )
    unlabelled = "GPUs that no workload label names moved"
    for nodes, what, setting in (
        (
            result.split_nodes,
            "GPU workloads: {n} node{s} ran GPUs in different jobs at once, each GPU judged "
            "against its own job's",
            "labels.gpu_workload_labels",
        ),
        (
            result.inferred_split_nodes,
            f"GPU workloads inferred: on {{n}} node{{s}} {unlabelled} as separate jobs, each "
            "group judged against its own",
            "labels.gpu_workload_comovement",
        ),
        (
            result.alone_nodes,
            f"GPUs judged alone: on {{n}} node{{s}} {unlabelled} with none of their node's GPUs "
            "beside a job that did, each judged without GPU peers",
            "labels.gpu_workload_comovement",
        ),
    ):
        if nodes:
            named = what.format(n=len(nodes), s="s" if len(nodes) > 1 else "")
            lines.append(f"{named} ({setting}): {_first_few(nodes)}")
    if result.cohort_advice:
        lines.append(result.cohort_advice)
    if result.signal_weights:
        lines.append(f"calibrated signal weights: {describe_weights(result.signal_weights)}")
    rows = result.evaluation.to_json()["failures"]
    confusion = diagnosis_confusion(result)
    if confusion is not None:
        assert result.diagnosis_model is not None
        learned = describe_learned(result.diagnosis_model.learned)
        lines.extend(["", *confusion.lines(), f"diagnosis model: {learned}"])
        lines.extend(storm_lines(result))
    if rows:
        lines.append("")
        header = (
            f"{'failure time (UTC)':<20} {'node':<12} {'gpu':>3} {'xid':>4}  {'detected':<8} lead"
        )
        lines.append(header)
        for row in rows:
            when = wallclock.strftime("%Y-%m-%d %H:%M", wallclock.gmtime(row["time"]))
            lead = "-" if row["lead_time_s"] is None else f"{row['lead_time_s'] / 60:+.1f} min"
            gpu = "-" if row["gpu"] is None else str(row["gpu"])
            found = "yes" if row["detected"] else "no"
            lines.append(
                f"{when:<20} {row['node']:<12} {gpu:>3} {row['xid']:>4}  {found:<8} {lead}"
            )
    return lines


def _first_few(names: Sequence[str], most: int = 6) -> str:
    """The first ``most`` names, comma-separated, with ", ..." where there are more."""
    return ", ".join(names[:most]) + (", ..." if len(names) > most else "")


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.0f}%"


def _action_lines(result: ReplayResult) -> list[str]:
    """The node exclusions ``run`` would have decided (``actions.enabled``), and refusals."""
    if not result.actions:
        return []
    done = [d for d in result.actions if d.action == "exclude" and d.refused is None]
    refused = Counter(d.refused for d in result.actions if d.refused is not None)
    released = sum(1 for d in result.actions if d.action == "release")
    when = "%Y-%m-%d %H:%M"
    shown = ", ".join(
        f"{d.node} {wallclock.strftime(when, wallclock.gmtime(d.time))} ({d.reason})"
        for d in done[:8]
    )
    mode = "dry-run" if any(d.dry_run for d in result.actions) else "executed in run"
    lines = [f"actions ({mode}): {len(done)} node exclusion(s)" + (f": {shown}" if shown else "")]
    if len(done) > 8:
        lines[-1] += f", ... {len(done) - 8} more"
    if refused or released:
        parts = [f"{n} refused ({why})" for why, n in sorted(refused.items())]
        parts += [f"{released} released"] if released else []
        lines.append("actions: " + ", ".join(parts))
    return lines
