"""Scrape pages of one simulated node: the dcgm-exporter page and the node-exporter page.

Both are in the exporters' own shape: HELP and TYPE per family, the exporter's labels (no
``instance``/``job``: Prometheus adds those), DCGM's blank sentinel printed as the integer
dcgm-exporter writes, Kubernetes pod labels on GPUs that run a job pod, and no line at all
for a series that is not exposed (NaN: a GPU that fell off the bus).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..model import DCGM_BLANK_THRESHOLD, FloatArray, IntArray
from .catalog import DCGM_BLANK_VALUE


def format_value(value: float) -> str:
    """Exporter-style number: integers without a fraction, the DCGM blank verbatim."""
    if value >= DCGM_BLANK_THRESHOLD:
        return str(DCGM_BLANK_VALUE)
    if value.is_integer() and abs(value) < 2.0**53:  # exactly representable integers
        return str(int(value))
    return repr(value)


@dataclass(frozen=True, slots=True)
class PageFamily:
    """One family's slice of one node's page: columns and label text (wire order)."""

    header: str  # "# HELP ...\n# TYPE ..."
    exporter: str  # "dcgm" or "node"
    name: str
    columns: IntArray
    wire: tuple[str, ...]
    gpus: tuple[int, ...]  # per column its GPU's index, -1 for node-level series


def render(
    families: Sequence[PageFamily], values: FloatArray, pods: Sequence[str]
) -> tuple[str, str]:
    """(dcgm page, node-exporter page); ``pods``: per GPU index, wire text appended to the
    labels of that GPU's DCGM series."""
    pages: dict[str, list[str]] = {"dcgm": [], "node": []}
    for fam in families:
        picked = values[fam.columns]
        dcgm = fam.exporter == "dcgm"
        lines = []
        for labels, gpu, value in zip(fam.wire, fam.gpus, picked.tolist(), strict=True):
            if math.isnan(value):
                continue
            text = labels + pods[gpu] if dcgm and gpu >= 0 else labels
            key = f"{fam.name}{{{text}}}" if text else fam.name
            lines.append(f"{key} {format_value(value)}")
        if lines:
            out = pages[fam.exporter]
            out.append(fam.header)
            out.extend(lines)
    return "\n".join(pages["dcgm"]) + "\n", "\n".join(pages["node"]) + "\n"


def node_layout(
    node: int,
    names: Sequence[tuple[str, str, str, str]],
    columns: Sequence[IntArray],
    nodes: Sequence[IntArray],
    wires: Sequence[tuple[str, ...]],
    gpus: Sequence[tuple[str, ...]],
) -> list[PageFamily]:
    """The page families of ``node`` from per-family (name, kind, help, exporter), columns,
    node of each column, label text of each column and GPU of each column ("" for none)."""
    layout = []
    for (name, kind, help_text, exporter), cols, owner, wire, gpu in zip(
        names, columns, nodes, wires, gpus, strict=True
    ):
        mine = np.flatnonzero(owner == node)
        if len(mine):
            header = f"# HELP {name} {help_text}\n# TYPE {name} {kind}"
            family = PageFamily(
                header,
                exporter,
                name,
                cols[mine],
                tuple(wire[i] for i in mine),
                tuple(int(gpu[i]) if gpu[i] else -1 for i in mine),
            )
            layout.append(family)
    return layout
