"""Failures on cue: ``--failure-at 5m:79@node-03/2`` planted at a chosen moment of a serve.

A cue names when (an offset from the start of the serve: ``90s``, ``5m``, ``1.5h``; a bare
number is seconds), which XID ends the failure, and optionally where (``@node-03`` or
``@node-03/2``, GPU by index). ``parse_cue`` reads that text; ``plant_cues`` turns cues into the
scenario's ``FailureSpec`` list on a clock of ``speed`` simulated seconds per wall second, so
the offset is the wall time a person waits (``--speed 60 --failure-at 2m:79``: two minutes of
waiting, two simulated hours).

What is left open is drawn from the scenario's seed, so the same command plants the same
failure: the node and GPU (uniform), and the precursor's lead (log-uniform in
``Scenario.precursor_lead_s``, at most ``MAX_LEAD_SHARE`` of the time before the fault, so the
detector sees the GPU healthy before it degrades). The failure kind is the one whose final XID
the cue names (``CUE_KINDS``): 79 is a PCIe fault, the GPU falls off the bus after a PCIe
replay surge.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

import numpy as np

from ..errors import ConfigError
from .failures import PlannedFailure
from .precursors import log_uniform
from .scenario import FailureSpec, Scenario

# The XIDs a cue can plant -> the failure kind that ends in it (failures.py's library).
CUE_KINDS: dict[int, str] = {
    13: "straggler",
    43: "straggler",
    64: "row_remap",
    74: "nvlink",
    79: "pcie",
    94: "ecc",
    95: "ecc",
    119: "thermal",
    149: "nvlink",
}
MAX_LEAD_SHARE = 0.8  # the precursor starts no earlier than 20% of the way to the fault
_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0}
_CUE = re.compile(
    r"(?P<offset>\d+(?:\.\d+)?)(?P<unit>[smh]?):(?P<xid>\d+)"
    r"(?:@(?P<node>[A-Za-z0-9_.-]+)(?:/(?P<gpu>\d+))?)?"
)
_SEED_SALT = 39  # separates the cue draws from the scenario's own streams of the same seed


@dataclass(frozen=True, slots=True)
class FailureCue:
    """One ``--failure-at``: ``offset_s`` wall seconds after the start; ``node`` a node name
    and ``gpu`` an index, None where the seed chooses."""

    text: str
    offset_s: float
    xid: int
    node: str | None = None
    gpu: int | None = None


def parse_cue(text: str) -> FailureCue:
    """``OFFSET:XID[@NODE[/GPU]]`` -> a cue; ValueError with what is wrong and the form."""
    match = _CUE.fullmatch(text.strip())
    if match is None:
        raise ValueError(
            f"{text!r} is not OFFSET:XID[@NODE[/GPU]] (e.g. 5m:79 or 90s:79@node-03/2; "
            "OFFSET in s, m or h)"
        )
    offset = float(match["offset"]) * _UNITS[match["unit"] or "s"]
    if offset <= 0:
        raise ValueError(f"{text!r}: the offset must be > 0 (the detector needs a healthy start)")
    xid = int(match["xid"])
    if xid not in CUE_KINDS:
        planted = ", ".join(str(x) for x in sorted(CUE_KINDS))
        raise ValueError(f"{text!r}: XID {xid} cannot be planted; the simulator plants {planted}")
    gpu = match["gpu"]
    return FailureCue(text, offset, xid, match["node"], None if gpu is None else int(gpu))


def plant_cues(
    scenario: Scenario, cues: tuple[FailureCue, ...], speed: float = 1.0
) -> tuple[FailureSpec, ...]:
    """The failures the cues ask for, at ``offset_s * speed`` simulated seconds; ConfigError
    (naming the cue) for a node or GPU outside the cluster or a time past its end."""
    names = {scenario.node_name(n): n for n in range(scenario.nodes)}
    specs = []
    for i, cue in enumerate(cues):
        rng = np.random.default_rng((scenario.seed, _SEED_SALT, i))
        node = int(rng.integers(scenario.nodes))
        gpu = int(rng.integers(scenario.gpus))
        if cue.node is not None:
            if cue.node not in names:
                first, last = scenario.node_name(0), scenario.node_name(scenario.nodes - 1)
                raise ConfigError(f"--failure-at {cue.text}: no node {cue.node} ({first}..{last})")
            node = names[cue.node]
        if cue.gpu is not None:
            if cue.gpu >= scenario.gpus:
                raise ConfigError(
                    f"--failure-at {cue.text}: no GPU {cue.gpu} (GPUs 0..{scenario.gpus - 1})"
                )
            gpu = cue.gpu
        at_s = cue.offset_s * speed
        if at_s >= scenario.duration_s:
            raise ConfigError(
                f"--failure-at {cue.text}: {at_s / 86400.0:.3g} simulated days in (at --speed "
                f"{speed:g}), past the simulated {scenario.days:g} days; raise --days"
            )
        specs.append(
            FailureSpec(CUE_KINDS[cue.xid], node, gpu, at_s, _lead(scenario, rng, at_s), cue.xid)
        )
    return tuple(specs)


def _lead(scenario: Scenario, rng: np.random.Generator, at_s: float) -> float:
    return min(log_uniform(*scenario.precursor_lead_s, rng), MAX_LEAD_SHARE * at_s)


def plan_lines(
    scenario: Scenario, failures: list[PlannedFailure], speed: float, wall_start: float
) -> list[str]:
    """The plan a serve prints: per failure its node, GPU, XIDs, and the wall time (UTC) and
    simulated time of its precursor onset and of the fault."""

    def when(sim_s: float) -> str:
        wall = wall_start + sim_s / speed
        return (
            f"{_clock(wall)} (+{_span(sim_s / speed)}), "
            f"simulated {_stamp(scenario.start + sim_s)} (+{_span(sim_s)})"
        )

    if not failures:
        return ["plan: no failures planted"]
    lines = [f"plan: {len(failures)} failure(s) at --speed {speed:g} (wall UTC, simulated):"]
    for f in failures:
        xids = ", ".join(str(x) for _, x in f.xids)
        lines.append(
            f"  {scenario.node_name(f.node)} GPU {f.gpu}: {f.kind} failure, XID {xids}, "
            f"repaired {_span(f.repair_end - f.time)} (simulated) later"
        )
        if f.lead_s > 0:
            lines.append(f"    precursor onset {when(f.time - f.lead_s)}")
        else:
            lines.append("    no precursor")
        lines.append(f"    fault           {when(f.time)}")
    return lines


def _clock(unix_s: float) -> str:
    return time.strftime("%H:%M:%S", time.gmtime(unix_s))


def _stamp(unix_s: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(unix_s))


def _span(seconds: float) -> str:
    """``1h02m03s`` / ``2m00s`` / ``45s`` (whole seconds)."""
    total = round(seconds)
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m{secs:02d}s"
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"
