"""Command line: ``detector <command>``. The only module that exits.

Exit codes: 0 success, 1 internal error (a bug: please report), 2 bad input (the message names
the file, line or field; also an unreadable or unwritable path, and bad arguments),
3 calibration could not meet the FP budget (file still written), 130 interrupted.

An internal error prints one line and a request to report it; ``DETECTOR_DEBUG=1`` adds the
traceback. ``replay`` and ``calibrate`` draw a progress bar on stderr when it is a terminal
(never in pipes, under ``CI`` or with ``--quiet``; see progress.py).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import re
import signal
import sys
import threading
import traceback
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from .. import __version__
from ..alerting import RuleSettings, prometheus_rules
from ..config import (
    Calibration,
    Config,
    config_reference,
    describe_config,
    export_pattern,
    load_calibration,
    load_config,
    load_signal_rules,
    load_xid_catalog,
    save_calibration,
)
from ..diagnosis import NFS_METRICS
from ..errors import ConfigError, DetectorError
from ..evaluation import CalibrationResult, calibration_from_result, describe_weights
from ..ingest import load_jobs, run_record
from ..jit import SEED_ENV, seed_cache
from ..logs import configure_logging
from ..loop import TickLoop, episode_params
from ..model import JobAttempt, XidEvent
from ..replay import (
    Fitted,
    ProgressBar,
    ReplayResult,
    alert_diagnoses,
    describe_learned,
    diagnosis_confusion,
    dump_frames,
    fit_calibration,
    learn_diagnosis,
    load_event_files,
    recovery_analysis,
    render_html,
    report_document,
    run_replay,
    simulated_frames,
    summary_lines,
)
from ..series import LabelRules, SeriesIndex
from ..service import main_run
from ..sim import (
    Scenario,
    SimulatedCluster,
    node_jobs,
    plan_lines,
    plant_cues,
    serve,
    write_dump,
)
from .actions import cmd_actions
from .args import build_parser as _parser
from .checks import (
    check_output,
    check_source_flags,
    threshold_source,
    warn_unknown_job_nodes,
    warn_unmatchable,
)


def _load(args: argparse.Namespace) -> tuple[Config, Calibration | None]:
    config = load_config(args.config)
    path = args.calibration or config.calibration.path
    return config, (load_calibration(path) if path is not None else None)


def _index(config: Config) -> SeriesIndex:
    return SeriesIndex(LabelRules.from_config(config.labels))


def _scenario(args: argparse.Namespace) -> Scenario:
    scenario = Scenario.demo()
    overrides = {
        key: value
        for key, value in (("seed", args.seed), ("days", args.days), ("nodes", args.nodes))
        if value is not None
    }
    return dataclasses.replace(scenario, **overrides) if overrides else scenario


def _replay(
    args: argparse.Namespace,
    config: Config,
    calibration: Calibration | None,
    events: Sequence[XidEvent],
    *,
    record: bool,
    signal_weights: Mapping[str, float] | None = None,
    jobs_out: list[JobAttempt] | None = None,
) -> tuple[ReplayResult, str]:
    """One replay of the dump (or the built-in cluster) with what the caller loaded once.
    ``jobs_out``: the built-in cluster's job attempts are added to it."""
    index = _index(config)
    loop = TickLoop.from_config(config, index, calibration, signal_weights=signal_weights)
    span: tuple[float, float] | None = None
    bar = ProgressBar.for_stream(quiet=args.quiet)  # None unless stderr is a terminal
    if args.dump:
        frames = dump_frames(
            args.dump, index, args.step, on_span=bar.set_span if bar is not None else None
        )
        label = ", ".join(str(p) for p in args.dump)
    else:
        scenario = _scenario(args)
        cluster = SimulatedCluster(scenario)
        frames = simulated_frames(cluster, index)
        events = [*events, *cluster.events()]
        if jobs_out is not None:
            jobs_out.extend(cluster.job_attempts())
        span = (scenario.start, scenario.start + scenario.duration_s)
        label = (
            f"built-in simulated cluster ({scenario.nodes} nodes x {scenario.gpus} GPUs, "
            f"{scenario.days:g} days, seed {scenario.seed})"
        )
    result = run_replay(
        loop,
        frames,
        events=events,
        horizon_s=config.evaluation.horizon_s,
        grace_s=config.evaluation.grace_s,
        scores_out=getattr(args, "scores_out", None),
        record_scores=record,
        progress=bar,
        expected_span=span,
        source=label,
    )
    return result, label


def _cmd_replay(args: argparse.Namespace) -> int:
    check_source_flags(args)
    check_output(args.report_json, args.scores_out, args.html)
    config, calibration = _load(args)
    events = load_event_files(args.events)
    jobs = load_jobs(args.jobs) if args.jobs is not None else None
    simulated: list[JobAttempt] = []
    result, label = _replay(
        args, config, calibration, events, record=args.html is not None, jobs_out=simulated
    )
    recovery = recovery_analysis(result, jobs if jobs is not None or args.dump else simulated)
    print(f"detector replay: {label}")
    print(f"threshold {result.threshold:.4f} ({threshold_source(args, config, calibration)})")
    for line in summary_lines(result):
        print(line)
    warn_unmatchable(result)
    warn_unknown_job_nodes(result, jobs)
    for line in recovery.lines():
        print(line)
    if args.scores_out is not None:
        print(f"scores written to {args.scores_out}")
    if args.report_json is not None:
        args.report_json.write_text(json.dumps(report_document(result, recovery), indent=2) + "\n")
        print(f"report written to {args.report_json}")
    if args.html is not None:
        html = render_html(
            result,
            threshold=result.threshold,
            label=label,
            signal_weights=result.signal_weights,
            confusion=diagnosis_confusion(result),
            diagnoses=alert_diagnoses(result),
            storms=result.storms,
            recovery=recovery,
        )
        args.html.write_text(html, "utf-8")
        print(f"HTML report written to {args.html}")
    return 0


def _cmd_calibrate(args: argparse.Namespace) -> int:
    if not (math.isfinite(args.fp_per_day) and args.fp_per_day >= 0):
        raise ConfigError(f"--fp-per-day must be a finite number >= 0 (got {args.fp_per_day})")
    check_source_flags(args)
    check_output(args.out)
    config = load_config(args.config)
    events = load_event_files(args.events)
    label = ""

    def replay(weights: Mapping[str, float] | None) -> ReplayResult:
        nonlocal label
        # A fresh fit: no older calibration file, only the weights tried (none at first).
        result, label = _replay(args, config, None, events, record=True, signal_weights=weights)
        if not np.isfinite(result.node_scores).any():
            raise DetectorError(f"{label}: no scores were produced; nothing to calibrate")
        return result

    # The threshold in force without a calibration file: a candidate, and where the history
    # cannot tell thresholds apart, the one calibration stays nearest to.
    base = episode_params(config)
    fitted = fit_calibration(
        replay,
        base,
        args.fp_per_day,
        config.evaluation.horizon_s,
        config.evaluation.grace_s,
        early_first=config.alerts.alert_on_xid,
        fit_weights=not args.no_signal_weights,
    )
    result, found = fitted.result, fitted.threshold
    days = max((result.end - result.start) / 86400.0, 1e-9)
    cal = calibration_from_result(
        found,
        dump=label,
        days=days,
        failures=len(result.failures),
        signal_weights=fitted.signal_weights,
    )
    learned = None
    if result.diagnosis_model is not None and result.failures:
        # which signals led which class of failure, for replay's diagnosis (replay/diagnosis.py)
        learned = learn_diagnosis(result, result.diagnosis_model)
        cal = cal.model_copy(update={"diagnosis": learned})
    save_calibration(args.out, cal)
    print(f"detector calibrate: {label}")
    warn_unmatchable(result)
    print(_point_line("threshold", found, len(result.failures), days, args.fp_per_day))
    if found.mode in _MODE_NOTES:
        print(f"  ({found.mode}: {_MODE_NOTES[found.mode]})")
    weight_lines = (
        ["signal weights: not fitted (--no-signal-weights)"]
        if args.no_signal_weights
        else _weight_lines(fitted, len(result.failures), days, args.fp_per_day)
    )
    for line in weight_lines:
        print(line)
    print(f"diagnosis: {describe_learned(learned)}")
    print(f"calibration written to {args.out}")
    if days < _MIN_CALIBRATION_DAYS:
        print(
            f"detector: warning: the history covers {days:.2f} days; a threshold fitted on less "
            f"than {_MIN_CALIBRATION_DAYS:g} day of data says little about false positives per "
            "day: calibrate on days to weeks of your cluster's history before trusting it",
            file=sys.stderr,
        )
    if config.alerts.threshold is not None:
        print(
            f"detector: warning: the config's alerts.threshold ({config.alerts.threshold:g}) "
            "overrides any calibration file's threshold; unset it to use this one",
            file=sys.stderr,
        )
    return 0 if found.within_budget else 3


# Below this much history one false alert more or less swings FP/day by more than the budget.
_MIN_CALIBRATION_DAYS = 1.0

# What calibrate's "(budget)" and "(over-budget)" mean ("best" needs no note).
_MODE_NOTES = {
    "budget": "no failure could be caught within the budget, so the budget alone set the "
    "threshold: the lowest that stays within it",
    "over-budget": "no candidate threshold met the budget; this is the highest, written anyway "
    "(exit 3); raise --fp-per-day or check the history",
}


def _point_line(
    what: str, found: CalibrationResult, failures: int, days: float, budget: float
) -> str:
    p = found.point
    return (
        f"{what} {p.threshold:.4f} ({found.mode}): detected {p.detected}/{failures}, "
        f"before the XID {p.detected_before}, false positives {p.false_positives} "
        f"({p.fp_per_day:.2f}/day, budget {budget:g}/day) over {days:.2f} days"
    )


def _weight_lines(fitted: Fitted, failures: int, days: float, budget: float) -> list[str]:
    """What the signal-weight pass found, for the terminal."""
    if fitted.weighted is None:
        if not failures:
            return ["signal weights: none fitted (no failures in the history to learn from)"]
        tp = sum(t for t, _ in fitted.signal_hits.values())
        fp = sum(f for _, f in fitted.signal_hits.values())
        return [
            "signal weights: none fitted (needs alerts led by a signal before a failure and "
            f"false alerts to contrast; found {tp} and {fp})"
        ]
    lines = [
        _point_line("  without weights", fitted.unweighted, failures, days, budget),
        _point_line("  with weights   ", fitted.weighted, failures, days, budget),
    ]
    verdict = "kept" if fitted.kept else "dropped: no better than without"
    return [f"signal weights {describe_weights(fitted.tried_weights)}: {verdict}", *lines]


def _cmd_simulate(args: argparse.Namespace) -> int:
    if args.speed is not None and not args.serve:
        raise ConfigError("simulate: --speed needs --serve (a dump is written at full speed)")
    speed = 1.0 if args.speed is None else args.speed
    scenario = dataclasses.replace(
        Scenario(),
        nodes=args.nodes,
        gpus=args.gpus,
        days=args.days,
        seed=args.seed,
        step_s=args.step,
        failure_count=args.failures,
        # served pages carry no target labels: the printed config adds the job to each target
        job_label=None if args.serve else args.job_label,
        shared_nodes=args.shared_nodes,
        pod_per_gpu=args.pod_per_gpu,
        dcgm_fields=args.dcgm_fields,
    )
    if args.failure_at:  # the planted failures replace the drawn ones
        failures = plant_cues(scenario, tuple(args.failure_at), speed)
        scenario = dataclasses.replace(scenario, failures=failures)
    if args.serve:
        return _serve(scenario, args.port, args.job_label, speed)
    if args.out is None or args.events is None:
        raise ConfigError("simulate: give --out DUMP and --events EVENTS (or --serve)")
    check_output(args.out, args.events, args.jobs)
    write_dump(
        scenario, args.out, args.events, counter_names=args.counter_names, jobs_path=args.jobs
    )
    print(f"wrote {args.out} and {args.events}" + (f" and {args.jobs}" if args.jobs else ""))
    return 0


def _serve(scenario: Scenario, port: int, job_label: str | None = None, speed: float = 1.0) -> int:
    """Serve the simulated exporters until Ctrl-C or SIGTERM; print the plan of failures on
    stderr and a config that scrapes them on stdout. (serve() runs them in daemon threads:
    returning at once, as this did, ended them with the process.)"""
    try:
        exporters = serve(scenario, port=port, speed=speed)
    except OSError as exc:
        raise DetectorError(f"--port {port}: cannot listen: {exc.strerror or exc}") from None
    stop = threading.Event()
    previous = signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        print(
            f"serving {scenario.nodes} simulated nodes x {scenario.gpus} GPUs (dcgm-exporter "
            f"and node-exporter pages) at --speed {speed:g}; Ctrl-C stops.",
            file=sys.stderr,
        )
        for line in plan_lines(scenario, exporters.cluster.failures, speed, exporters.started_at):
            print(line, file=sys.stderr)
        print("On stdout, a config that scrapes them.", file=sys.stderr)
        sys.stderr.flush()
        job_of = {scenario.node_name(n): job for n, job in node_jobs(scenario).items()}
        print("targets:\n  static:")
        for node, (dcgm, node_exporter) in exporters.urls.items():
            job = job_of.get(node) if job_label is not None else None
            labels = f", labels: {{{job_label}: {job}}}" if job is not None else ""
            print(f"    - {{url: '{dcgm}', node: {node}, kind: dcgm{labels}}}")
            print(f"    - {{url: '{node_exporter}', node: {node}, kind: node{labels}}}")
        if job_label is not None:
            print(f"labels:\n  cohort_labels: [{job_label}]")
        sys.stdout.flush()
        stop.wait()  # until Ctrl-C or SIGTERM
        print("stopped", file=sys.stderr)
    except KeyboardInterrupt:  # the way to stop a server: not an error
        print("stopped", file=sys.stderr)
    finally:
        signal.signal(signal.SIGTERM, previous)
        exporters.close()
    return 0


def _cmd_check_config(args: argparse.Namespace) -> int:
    config = load_config(args.file)  # raises on an invalid config
    # 'valid' must mean `detector run` starts: the rules and calibration files the config
    # names are validated too (absent ones stay warnings in the summary: they may come later).
    for path, load in (
        (config.rules.signals, load_signal_rules),
        (config.rules.xid, load_xid_catalog),
        (config.calibration.path, load_calibration),
    ):
        if path is not None and path.exists():
            load(path)
    print(describe_config(config, args.file, os.environ))
    return 0


_CONFIG_ACTIONS: dict[str, Callable[[], str]] = {"reference": config_reference}


def _cmd_config(args: argparse.Namespace) -> int:
    sys.stdout.write(_CONFIG_ACTIONS[args.config_action]())
    return 0


def _cmd_rules(args: argparse.Namespace) -> int:
    config, calibration = _load(args)
    settings = RuleSettings.from_config(
        config.alerts, calibration, score_alerts=not args.no_score_alerts
    )
    sys.stdout.write(prometheus_rules(settings))
    return 0


def _cmd_export_selector(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    pattern = export_pattern(
        load_signal_rules(config.rules.signals),
        load_xid_catalog(config.rules.xid),
        extra=NFS_METRICS,  # what a storm's bottleneck is named from
    )
    # a job name as a literal in a PromQL regex string: regex metacharacters escaped with a
    # backslash, itself written twice inside the double-quoted string
    jobs = "|".join(re.sub(r"([.^$*+?()\[\]{}|\\])", r"\\\\\1", job) for job in args.job)
    selector = f'__name__=~"{pattern}"' + (f',job=~"{jobs}"' if jobs else "")
    print(pattern if args.regex else f"{{{selector}}}")
    return 0


def _cmd_run(args: argparse.Namespace) -> int:
    return main_run(args.config)


def _cmd_record(args: argparse.Namespace) -> int:
    if args.out.exists() and not args.out.is_dir():
        raise DetectorError(f"{args.out}: not a directory; record --out takes a directory")
    config = load_config(args.config)
    if config.scrapes_nothing():
        source = f"{args.config} names" if args.config else "without --config there are"
        raise ConfigError(
            f"record: nothing to record: {source} no targets (set targets.static or "
            "targets.file_sd, or mode: agent for this node's exporters)"
        )
    configure_logging(config.logging.level, config.logging.format)
    files = run_record(
        config,
        args.out,
        args.duration,
        rotate_bytes=int(args.rotate_mb * 2**20),
        rotate_s=args.rotate_minutes * 60.0,
    )
    for path in files:
        print(path)
    return 0


Command = Callable[[argparse.Namespace], int]
COMMANDS: dict[str, Command] = {
    "replay": _cmd_replay,
    "calibrate": _cmd_calibrate,
    "simulate": _cmd_simulate,
    "check-config": _cmd_check_config,
    "config": _cmd_config,
    "export-selector": _cmd_export_selector,
    "rules": _cmd_rules,
    "run": _cmd_run,
    "record": _cmd_record,
    "actions": cmd_actions,
}


def main(
    argv: Sequence[str] | None = None,
    *,
    commands: Mapping[str, Command] = COMMANDS,
    env: Mapping[str, str] | None = None,
) -> int:
    """Run one command; the exit codes are in the module docstring. ``commands`` and ``env``
    (default: os.environ) are seams for tests."""
    args = _parser().parse_args(argv)
    env = os.environ if env is None else env
    try:
        seed_cache(env)  # an image's compiled kernels, before any kernel runs
    except OSError as exc:
        print(
            f"detector: warning: cannot copy the compiled kernels of ${SEED_ENV} into "
            f"$NUMBA_CACHE_DIR ({exc}); they compile on first use",
            file=sys.stderr,
        )
    try:
        return commands[args.command](args)
    except DetectorError as exc:
        print(f"detector: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("detector: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `detector replay | head`: the reader left, nothing is wrong
        return 0
    except OSError as exc:
        if exc.filename is None:  # not about a path the user gave: a bug like any other
            return _internal_error(exc, env)
        # A path the user named cannot be read or written (permissions, missing directory).
        print(f"detector: error: {exc.filename}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # the one place a bug becomes a message
        return _internal_error(exc, env)


def _internal_error(exc: BaseException, env: Mapping[str, str]) -> int:
    """Exit 1 for a bug: one line and a request to report it, not a traceback to wade through
    (``DETECTOR_DEBUG=1`` prints it, for the report)."""
    debug = env.get("DETECTOR_DEBUG", "").strip() not in ("", "0")
    if debug:
        traceback.print_exception(exc, file=sys.stderr)
    hint = "" if debug else " and the traceback that DETECTOR_DEBUG=1 prints"
    print(
        f"detector: internal error: {type(exc).__name__}: {exc}\n"
        f"detector {__version__} hit a bug; please report it with the command line{hint}.",
        file=sys.stderr,
    )
    return 1
