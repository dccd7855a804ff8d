"""The diagnosis confusion table ``detector replay`` prints: for each detected failure, the class
diagnosed at its first alert (what the page said) against the class of the XID that followed.

A first alert raised by the XID itself (no precursor: ``basis`` "xid") is on the diagonal by
construction; the table counts those apart, and the accuracy that measures the model is the
one over failures diagnosed from their precursor signals.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class DiagnosedFailure:
    """One detected failure: what its first alert diagnosed and what the XID then said."""

    time: float
    node: str
    gpu: str | None
    xid: int
    actual: str  # the class of the XID
    predicted: str  # the class diagnosed at the first alert
    confidence: float
    basis: str  # "xid", "signals" or "none" (Diagnosis.basis)
    lead_time_s: float | None = None


@dataclass(frozen=True, slots=True)
class Confusion:
    """The table: ``classes`` in taxonomy order (those that occur), one row per failure."""

    classes: tuple[str, ...]
    rows: tuple[DiagnosedFailure, ...]

    def matrix(self) -> dict[str, dict[str, int]]:
        """actual class -> predicted class -> failures."""
        counts = Counter((r.actual, r.predicted) for r in self.rows)
        return {
            a: {p: counts[(a, p)] for p in self.classes if counts[(a, p)]}
            for a in self.classes
            if any(counts[(a, p)] for p in self.classes)
        }

    def correct(self, basis: str | None = None) -> tuple[int, int]:
        """(on the diagonal, rows) over rows of ``basis`` (None: all)."""
        rows = [r for r in self.rows if basis is None or r.basis == basis]
        return sum(r.actual == r.predicted for r in rows), len(rows)

    def to_json(self) -> dict[str, Any]:
        """The report JSON's top-level ``diagnosis``."""
        right, n = self.correct()
        right_signals, n_signals = self.correct("signals")
        return {
            "classes": list(self.classes),
            "matrix": self.matrix(),
            "diagnosed": n,
            "correct": right,
            "from_signals": n_signals,
            "correct_from_signals": right_signals,
            "from_xid": self.correct("xid")[1],
            "accuracy_from_signals": right_signals / n_signals if n_signals else None,
            "mean_confidence_from_signals": (
                sum(r.confidence for r in self.rows if r.basis == "signals") / n_signals
                if n_signals
                else None
            ),
            "failures": [
                {
                    "time": r.time,
                    "node": r.node,
                    "gpu": r.gpu,
                    "xid": r.xid,
                    "actual": r.actual,
                    "predicted": r.predicted,
                    "confidence": r.confidence,
                    "basis": r.basis,
                }
                for r in self.rows
            ],
        }

    def lines(self) -> list[str]:
        """The table for the terminal: rows the XID's class, columns the diagnosis."""
        if not self.rows:
            return ["diagnosis: no detected failure to check the diagnosis against"]
        right, n = self.correct()
        right_signals, n_signals = self.correct("signals")
        head = (
            f"diagnosis at the first alert against the XID's class: {right}/{n} on the "
            f"diagonal; from precursor signals {right_signals}/{n_signals}, "
            f"raised by the XID itself {self.correct('xid')[1]}"
        )
        short = {c: c[:10] for c in self.classes}
        corner = "XID class \\ diagnosed"
        width = max(len(corner), *(len(c) for c in self.classes))
        columns = " ".join(f"{short[c]:>10}" for c in self.classes)
        out = [head, f"{corner:<{width}}  {columns}"]
        matrix = self.matrix()
        for actual in self.classes:
            if actual not in matrix:
                continue
            cells = " ".join(f"{matrix[actual].get(p, 0) or '.':>10}" for p in self.classes)
            out.append(f"{actual:<{width}}  {cells}")
        return out


def confusion_table(rows: Sequence[DiagnosedFailure], taxonomy: Sequence[str]) -> Confusion:
    """The table over ``rows``, its classes those of ``taxonomy`` (in its order) that occur."""
    used = {r.actual for r in rows} | {r.predicted for r in rows}
    classes = tuple(c for c in taxonomy if c in used) + tuple(sorted(used - set(taxonomy)))
    return Confusion(classes, tuple(sorted(rows, key=lambda r: (r.time, r.node))))
