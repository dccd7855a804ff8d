"""The ``detector`` command line's arguments: commands, flags, help texts and examples.

Numeric flags are checked here, by argparse types (a whole number >= 1 or >= 0, a finite
number > 0), so a bad value is an argument error (exit 2, with usage) naming the flag, before
any work. ``tests/test_cli_polish.py`` parses every help example with this parser.
"""

from __future__ import annotations

import argparse
import getpass
import math
from collections.abc import Callable, Sequence
from pathlib import Path

from .. import __version__
from ..sim import FailureCue, Scenario, parse_cue

EXAMPLES = {
    "replay": """examples:
  detector replay                                   # the built-in simulated cluster (demo)
  detector replay --html report.html                # the demo, with an HTML report
  detector replay dump.om.gz --events xids.jsonl --report-json report.json
  detector replay query_range/*.json --calibration calibration.json --scores-out scores.csv""",
    "calibrate": """examples:
  detector calibrate history.om --events xids.jsonl --fp-per-day 1 --out calibration.json
  detector calibrate healthy-week.om --fp-per-day 0.5 --out calibration.json""",
    "simulate": """examples:
  detector simulate --nodes 63 --gpus 8 --days 3 --seed 7 --out sim.om.gz --events sim.jsonl
  detector simulate --nodes 8 --days 1 --failures 3 --out hist.om.gz --events hist.jsonl
  detector simulate --serve --nodes 4 --port 9400  # live exporters; prints a config for them
  detector simulate --serve --nodes 4 --speed 60 --failure-at 2m:79  # a GPU falls off the bus
  detector simulate --serve --speed 60 --failure-at 5m:79@node-03/2 --failure-at 20m:94""",
    "check-config": """examples:
  detector check-config /etc/detector/config.yaml""",
    "config": """examples:
  detector config reference     # every key as Markdown; docs/configuration.md is its output""",
    "rules": """examples:
  detector rules prometheus         # the shipped rules/prometheus/detector.rules.yaml
  detector rules prometheus --config config.yaml --calibration calibration.json
  detector rules prometheus --config config.yaml --no-score-alerts  # daemon alerts only""",
    "export-selector": """examples:
  detector export-selector --job dcgm-exporter --job node-exporter --job kube-state-metrics
  detector export-selector --config /etc/detector/config.yaml --regex""",
    "run": """examples:
  detector run --config /etc/detector/config.yaml        # fleet or agent mode, per the config
  NODE_NAME=gpu-017 DETECTOR_MODE=agent detector run     # agent: this node's local exporters""",
    "actions": """examples:
  detector actions --config /etc/detector/config.yaml          # what is excluded and why
  detector actions --config /etc/detector/config.yaml release gpu-017
  detector actions --config /etc/detector/config.yaml close-breaker""",
    "record": """examples:
  detector record --config fleet.yaml --out /var/lib/detector/dumps --duration 3600
  detector record --config fleet.yaml --out dumps/ --rotate-mb 256 --rotate-minutes 60""",
}


def _count(text: str) -> int:
    """argparse type: a whole number >= 1 (nodes, GPUs)."""
    value = _whole(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1 (got {text})")
    return value


def _seed(text: str) -> int:
    """argparse type: a seed, a whole number >= 0 (numpy refuses negative seeds)."""
    value = _whole(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0 (got {text})")
    return value


def _whole(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None


def _positive(text: str) -> float:
    """argparse type: a finite number > 0 (days, seconds)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a number > 0 (got {text})")
    return value


def _cue(text: str) -> FailureCue:
    """argparse type: a ``--failure-at`` cue, OFFSET:XID[@NODE[/GPU]] (detector/sim/cues.py)."""
    try:
        return parse_cue(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


Add = Callable[..., argparse.ArgumentParser]  # build_parser's ``add``: one subcommand's parser


def build_parser() -> argparse.ArgumentParser:
    """The ``detector`` argument parser: every command, flag, help text and example."""
    parser = argparse.ArgumentParser(
        prog="detector",
        description="Real-time multi-signal GPU failure detector.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"detector {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(
        name: str,
        help_text: str,
        description: str | None = None,
        parents: Sequence[argparse.ArgumentParser] = (),
    ) -> argparse.ArgumentParser:
        return sub.add_parser(
            name,
            parents=list(parents),
            help=help_text,
            description=description or help_text,
            epilog=EXAMPLES.get(name),
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )

    common = _common_options()
    _replay_command(add, common)
    _calibrate_command(add, common)
    _simulate_command(add)
    _config_commands(add)
    _run_and_record_commands(add)
    _actions_command(add)
    return parser


def _common_options() -> argparse.ArgumentParser:
    """Options of ``replay`` and ``calibrate``: the dump or the built-in cluster, config, events."""
    demo = Scenario.demo()
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "dump",
        nargs="*",
        type=Path,
        metavar="DUMP",
        help="dump files or directories (OpenMetrics, Prometheus JSON, promtool tsdb dump; "
        ".gz ok); none: the built-in simulated cluster",
    )
    common.add_argument(
        "--config",
        type=Path,
        metavar="FILE",
        help="daemon config YAML (DETECTOR_* env vars override)",
    )
    common.add_argument(
        "--events",
        type=Path,
        action="append",
        default=[],
        metavar="FILE",
        help="failure events: JSONL, a kernel log export with NVRM Xid lines, or a directory "
        "of them (repeatable)",
    )
    common.add_argument(
        "--step",
        type=_positive,
        metavar="SECONDS",
        help="tick length of a DUMP replay (default: the dump's scrape interval)",
    )
    common.add_argument(
        "--seed",
        type=_seed,
        default=None,
        help=f"built-in cluster only: simulator seed ({demo.seed})",
    )
    common.add_argument(
        "--days",
        type=_positive,
        default=None,
        help=f"built-in cluster only: simulated days ({demo.days:g})",
    )
    common.add_argument(
        "--nodes",
        type=_count,
        default=None,
        help=f"built-in cluster only: simulated nodes ({demo.nodes})",
    )
    common.add_argument("--quiet", action="store_true", help="no progress bar")
    return common


def _replay_command(add: Add, common: argparse.ArgumentParser) -> None:
    """``detector replay``."""
    rp = add(
        "replay",
        "replay a recorded dump (or the built-in simulated cluster)",
        "Drive a recorded dump through the detection pipeline and report.",
        [common],
    )
    rp.add_argument(
        "--calibration",
        type=Path,
        metavar="FILE",
        help="calibration file written by 'detector calibrate' (default: the config's "
        "calibration.path)",
    )
    rp.add_argument("--report-json", type=Path, metavar="FILE", help="write the report JSON here")
    rp.add_argument(
        "--scores-out",
        type=Path,
        metavar="FILE",
        help="write fused scores (time,node,gpu,score CSV) here",
    )
    rp.add_argument(
        "--html",
        type=Path,
        metavar="FILE",
        help="write a self-contained HTML report (charts, tables) here",
    )
    rp.add_argument(
        "--jobs",
        type=Path,
        metavar="FILE",
        help="job attempts JSONL (job, attempt, start, end, exit_status, nodes, automatic) for "
        "the report's retry-chain analysis (docs/recovery.md); the built-in cluster uses its "
        "simulated jobs",
    )


def _calibrate_command(add: Add, common: argparse.ArgumentParser) -> None:
    """``detector calibrate``."""
    cp = add(
        "calibrate",
        "fit alert thresholds under a false-positives-per-day budget",
        "Fit the threshold that catches the most failures within an FP/day budget.",
        [common],
    )
    cp.add_argument(
        "--fp-per-day",
        type=float,
        required=True,
        metavar="X",
        help="false positives per day allowed (whole dump)",
    )
    cp.add_argument(
        "--out", type=Path, required=True, metavar="FILE", help="calibration file to write"
    )
    cp.add_argument(
        "--no-signal-weights",
        action="store_true",
        help="fit the threshold only (by default, with failures to learn from, signal weights "
        "are fitted too and kept when they do better; this replays the history twice)",
    )


def _simulate_command(add: Add) -> None:
    """``detector simulate``: a dump and events, or live exporters."""
    sp = add("simulate", "simulate a GPU cluster: write a dump + events, or serve live exporters")
    sp.add_argument("--nodes", type=_count, default=63, help="nodes (default: %(default)s)")
    sp.add_argument("--gpus", type=_count, default=8, help="GPUs per node (default: %(default)s)")
    sp.add_argument("--days", type=_positive, default=3.0, help="days (default: %(default)s)")
    sp.add_argument("--seed", type=_seed, default=7, help="random seed (default: %(default)s)")
    planted = sp.add_mutually_exclusive_group()  # cues replace the drawn failures
    planted.add_argument(
        "--failures",
        type=_seed,  # a whole number >= 0
        metavar="N",
        help="plant N failures (one that would hit a node still in repair past the end is "
        "dropped; default: drawn at the real trace's rate, 0.0018 per node-day, so a 63-node, "
        "3-day history most likely holds none)",
    )
    sp.add_argument(
        "--step",
        type=_positive,
        default=30.0,
        metavar="SECONDS",
        help="seconds between samples (default: %(default)s)",
    )
    sp.add_argument(
        "--out",
        type=Path,
        metavar="FILE",
        help="dump file to write (OpenMetrics with timestamps; .gz ok)",
    )
    sp.add_argument(
        "--events", type=Path, metavar="FILE", help="events JSONL to write (ground truth)"
    )
    sp.add_argument(
        "--jobs",
        type=Path,
        metavar="FILE",
        help="also write the jobs' attempts here (JSONL: restarts after failures; replay "
        "--jobs reads it)",
    )
    sp.add_argument(
        "--job-label",
        metavar="NAME",
        help="name each node's job in label NAME on its node-exporter series (with --serve: on "
        "its targets in the printed config, which then sets labels.cohort_labels: [NAME]), as "
        "relabelling from a scheduler would; replay such a dump with that cohort label",
    )
    sp.add_argument(
        "--shared-nodes",
        type=int,
        default=0,
        metavar="N",
        help="on N nodes the last 2 GPUs run short jobs of their own (pods of other workloads "
        "on a partly used node; default: %(default)s)",
    )
    sp.add_argument(
        "--pod-per-gpu",
        action="store_true",
        help="jobs run one pod per GPU (<job>-worker-<rank>) instead of one per node",
    )
    sp.add_argument(
        "--dcgm-fields",
        choices=("default", "all"),
        default="default",
        help="dcgm-exporter's fields: 'default' as its default-counters.csv ships them (ECC, "
        "NVLink-error and throttle-violation counters off), 'all' with those on too, as in "
        "the built-in cluster of replay (default: %(default)s)",
    )
    planted.add_argument(
        "--failure-at",
        type=_cue,
        action="append",
        default=[],
        metavar="OFFSET:XID[@NODE[/GPU]]",
        help="plant a failure that ends in XID at OFFSET (s, m or h) after the start: with "
        "--serve wall time, the plan (node, GPU, XID, precursor onset and fault times) goes to "
        "stderr; node and GPU default to a choice fixed by --seed; repeatable, replaces "
        "--failures (e.g. 2m:79 or 5m:79@node-03/2)",
    )
    sp.add_argument(
        "--counter-names",
        choices=("exporters", "bare", "openmetrics"),
        default="exporters",
        help="how the dump spells counters: as the exporters do (dcgm-exporter's bare, "
        "node-exporter's with _total), all 'bare', or strict 'openmetrics' (# TYPE X counter, "
        "X_total samples); replay reads all three alike (default: %(default)s)",
    )
    sp.add_argument("--serve", action="store_true", help="serve live exporters over HTTP instead")
    sp.add_argument(
        "--speed",
        type=_positive,
        default=None,
        metavar="X",
        help="with --serve: simulated seconds per wall second (default: 1; 60 turns an hour "
        "of the cluster into a minute)",
    )
    sp.add_argument(
        "--port",
        type=int,
        default=9400,
        help="port to serve on, paths /<node>/dcgm and /<node>/node (default: %(default)s; "
        "0 picks a free one)",
    )


def _config_commands(add: Add) -> None:
    """``detector check-config``, ``config`` and ``export-selector``."""
    cc = add("check-config", "validate a config file and print what it resolves to")
    cc.add_argument("file", type=Path, metavar="FILE", help="config YAML to validate")

    cf = add(
        "config",
        "configuration tools: the reference of every key",
        "Configuration tools. 'reference' prints every section and key of the config file with "
        "its type, default, environment variable and meaning, as Markdown.",
    )
    actions = cf.add_subparsers(dest="config_action", required=True, metavar="ACTION")
    actions.add_parser(
        "reference",
        help="print the configuration reference (Markdown) generated from the schema",
        description="Print the configuration reference generated from the schema: every "
        "section and key with its type, default, environment variable and meaning (Markdown; "
        "docs/configuration.md is this output).",
    )

    rp = add(
        "rules",
        "print the Prometheus rules that fire on the daemon's threshold and severities",
        "Alert rules for other tools, generated from the config and calibration the daemon "
        "alerts with. 'prometheus' prints the rule file on the detector's /metrics "
        "(rules/prometheus/detector.rules.yaml is its output with no config): the score "
        "alerts fire at the threshold in force (alerts.threshold, else the calibration's, else "
        "0.6), warning after alerts.min_duration_s, critical after alerts.page_after_s more.",
    )
    kinds = rp.add_subparsers(dest="rules_kind", required=True, metavar="KIND")
    prom = kinds.add_parser(
        "prometheus",
        help="print the Prometheus rule file (YAML) for this config and calibration",
        description="Print the Prometheus recording and alerting rules (YAML) on the "
        "detector's /metrics for this config and calibration; docs/deploy.md 'Alert paths' "
        "says when to load them.",
    )
    prom.add_argument(
        "--config", type=Path, metavar="FILE", help="config YAML (default: built-in defaults)"
    )
    prom.add_argument(
        "--calibration",
        type=Path,
        metavar="FILE",
        help="calibration file whose threshold and FP budget the rules take (default: the "
        "config's calibration.path)",
    )
    prom.add_argument(
        "--no-score-alerts",
        action="store_true",
        help="leave out the *ScoreHigh alerts: recording and detector-health rules only (the "
        "daemon posts the failure alerts itself)",
    )

    es = add(
        "export-selector",
        "print the series selector of the metrics a replay reads (for exporting history)",
        "Print the PromQL series selector of every metric the rules read, for promtool tsdb "
        "dump --match or a query_range export (docs/evaluate.md): node-exporter's series no "
        "rule reads are left out.",
    )
    es.add_argument(
        "--config", type=Path, metavar="FILE", help="config YAML naming the rules files"
    )
    es.add_argument(
        "--job",
        action="append",
        default=[],
        metavar="NAME",
        help="keep only this scrape job's series (repeatable): other jobs' up and scrape "
        "series would name hosts that are no GPU nodes",
    )
    es.add_argument("--regex", action="store_true", help="print the bare __name__ regex")


def _run_and_record_commands(add: Add) -> None:
    """``detector run`` and ``detector record``."""
    rn = add("run", "run the live daemon: scrape, score, alert, export /metrics")
    rn.add_argument(
        "--config", type=Path, metavar="FILE", help="config YAML (DETECTOR_* env vars override)"
    )

    rc = add("record", "scrape the configured targets into dump files replay can read")
    rc.add_argument("--config", type=Path, metavar="FILE", help="config YAML naming the targets")
    rc.add_argument(
        "--out", type=Path, required=True, metavar="DIR", help="directory for the dump files"
    )
    rc.add_argument(
        "--duration",
        type=_positive,
        metavar="SECONDS",
        help="seconds to record (default: until Ctrl-C or SIGTERM)",
    )
    rc.add_argument(
        "--rotate-mb",
        type=_positive,
        default=256.0,
        metavar="MB",
        help="start a new file past this size (default: %(default)g)",
    )
    rc.add_argument(
        "--rotate-minutes",
        type=_positive,
        default=60.0,
        metavar="MINUTES",
        help="start a new file this often (default: %(default)g)",
    )


def _actions_command(add: Add) -> None:
    """``detector actions``: list, release, close the breaker."""
    ac = add(
        "actions",
        "list the nodes the detector excluded and why; release one; close the breaker",
        "List the nodes the detector has excluded (or, in dry-run, would have) and why, from "
        "the daemon's state file; release one (in the scheduler at once, then recorded for the "
        "daemon); close an open action breaker (docs/actions.md).",
    )
    ac.add_argument("--config", type=Path, metavar="FILE", help="config YAML (state.path)")
    ac.add_argument("--state", type=Path, metavar="FILE", help="state file (default: state.path)")
    ac.add_argument("--by", default=_user(), metavar="NAME", help="who (default: %(default)s)")
    acs = ac.add_subparsers(dest="actions_command", metavar="ACTION")
    rel = acs.add_parser("release", help="release NODE: undo its exclusion")
    rel.add_argument("node", metavar="NODE")
    acs.add_parser("close-breaker", help="close the action breaker (exclusions resume)")


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"
