"""Checks and notes around a replay or calibration, for the operator: flags the chosen source
would ignore and outputs that cannot be written are refused before any work; after it, where
the threshold came from and which failures no alert could match are said."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from ..config import Calibration, Config
from ..errors import ConfigError, DetectorError
from ..model import JobAttempt
from ..replay import ReplayResult

_THRESHOLD_VAR = "DETECTOR_ALERTS__THRESHOLD"


def threshold_source(
    args: argparse.Namespace, config: Config, calibration: Calibration | None
) -> str:
    """Where the alert threshold came from, in build_pipeline's order: the config's
    alerts.threshold wins over a calibration file, which wins over the default. A calibration
    overridden by the config is said to be, since the operator asked for both."""
    cal_path = args.calibration or config.calibration.path
    if config.alerts.threshold is not None:
        from_env = _THRESHOLD_VAR in (name.upper() for name in os.environ)  # env wins
        where = _THRESHOLD_VAR if from_env else f"alerts.threshold in {args.config}"
        if calibration is not None:
            where += f", which overrides {cal_path}'s {calibration.threshold:.4f}"
        return where
    if calibration is not None:
        return f"calibrated: {cal_path}"
    return "uncalibrated default; see detector calibrate"


def check_source_flags(args: argparse.Namespace) -> None:
    """Refuse flags that the chosen source would silently ignore: the built-in cluster's knobs
    with a DUMP, or a DUMP's tick length without one."""
    if args.dump:
        knobs = [f"--{k}" for k in ("seed", "days", "nodes") if getattr(args, k) is not None]
        if knobs:
            verb, them = ("applies", "it") if len(knobs) == 1 else ("apply", "them")
            raise ConfigError(
                f"{' and '.join(knobs)} {verb} to the built-in simulated cluster only, not to "
                f"a DUMP; drop {them} (or the DUMP)"
            )
    elif args.step is not None:
        raise ConfigError(
            "--step sets the tick length of a DUMP replay; the built-in simulated cluster "
            "ticks at its sample interval (detector simulate --step writes a dump with another)"
        )


def check_output(*paths: Path | None) -> None:
    """Fail before minutes of work, not after, when an output file cannot be created."""
    for path in paths:
        if path is None:
            continue
        if path.is_dir():
            raise DetectorError(f"{path}: is a directory; give a file name to write")
        if not path.parent.is_dir():
            raise DetectorError(
                f"{path}: No such file or directory (the directory {path.parent} does not exist)"
            )


def warn_unknown_job_nodes(result: ReplayResult, jobs: Sequence[JobAttempt] | None) -> None:
    """Say on stderr when the job-attempts file names nodes the data does not have: their
    failures cannot be tied to the attempts they ended (time lost, same-node refailures)."""
    known = set(result.node_names)
    strangers = sorted({n for a in jobs or () for n in a.nodes} - known)
    if strangers and known:
        shown = ", ".join(strangers[:5]) + (", ..." if len(strangers) > 5 else "")
        print(
            f"detector: warning: {len(strangers)} node(s) of the job-attempts file are not in "
            f"the data: {shown} (its nodes are named like {min(known)}); failures on them "
            "cannot be tied to their attempts",
            file=sys.stderr,
        )


def warn_unmatchable(result: ReplayResult) -> None:
    """Say on stderr when failures cannot be matched by any alert: they name a node the data
    does not have (a naming mismatch between events and dump: they count as missed; a
    dcgm-exporter that names its pod is one such mismatch, said apart), or fall
    outside the replayed span (a wrong file, a time zone, or events covering more than the
    dump: they are not evaluated, see evaluation.py)."""
    known = set(result.node_names)
    strangers = sorted({f.node for f in result.failures} - known)
    if strangers:
        shown = ", ".join(strangers[:5]) + (", ..." if len(strangers) > 5 else "")
        example = f" (its nodes are named like {min(known)})" if known else ""
        print(
            f"detector: warning: {len(strangers)} node(s) with failures are not in the data: "
            f"{shown}{example}; their failures count as missed",
            file=sys.stderr,
        )
    if result.pod_named:
        shown = ", ".join(result.pod_named[:3]) + (", ..." if len(result.pod_named) > 3 else "")
        print(
            f"detector: warning: {len(result.pod_named)} node(s) are named by a dcgm-exporter "
            f"pod, not a node ({shown}: its Hostname is its pod's name): their GPUs are apart "
            "from their node's other series and from XIDs naming the host; add "
            "kube-state-metrics' kube_pod_info to the dump (docs/evaluate.md)",
            file=sys.stderr,
        )
    outside = result.evaluation.summary.out_of_span
    if outside:
        print(
            f"detector: warning: {outside} failure(s) fall outside the replayed span "
            f"({_utc(result.start)} to {_utc(result.end)} UTC): no alert in it could match "
            "them, so they are not evaluated (summary: failures_out_of_span)",
            file=sys.stderr,
        )


def _utc(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M")
