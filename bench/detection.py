"""Detection figures on the simulated cluster over several seeds, with held-out calibration.

    python bench/detection.py --seeds 1 2 3 4 5 --days 3 --fp-per-day 1

For each seed: one replay of the demo-sized cluster (63 x 8, that seed's failures and
workload), scored once. Reported per seed:
- at the uncalibrated default threshold;
- at the threshold calibrated on the FIRST seed only (held-out for every other seed): the FP
  budget must hold on data the calibration never saw;
- at the seed's own calibrated threshold (in-sample, an optimistic bound);
- "held-out+w": threshold AND signal weights fitted on the first seed (``fitting.
  fit_calibration``: weights kept only if they did better there), each other seed replayed
  again with those weights (``--no-weights`` skips this; it costs one replay per seed).
``--jobs N`` replays N seeds at once, in processes (the figures are the same).
Then the planned failures (the simulator's ground truth) by kind and by precursor (shape, faint,
stopping before the XID, starting over an hour before it: sim/precursors.py draws them): how
many had a precursor, were caught before their XID, were caught at all, and end in an XID the
catalog counts as a failure. Held out: each seed at the threshold calibrated on the NEXT seed
of the list (the last seed on the first), so every failure counts once, judged at a threshold
fitted on other data. These tables describe; rules and scorers are not tuned to them.
The demo's own seed (7) is not used by default, so nothing here is tuned to the demo.

``--pairs`` then calibrates on EVERY seed and applies the threshold to every other one (n x
(n - 1) held-out pairs), once per tie rule of the calibration search: ties in catches and false
positives go to the threshold nearest the configured one (what ``detector calibrate`` does),
or to the highest (the former rule).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import multiprocessing
import statistics
import sys
import time
from collections.abc import Mapping
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from detector.config.load import load_config
from detector.loop import TickLoop, episode_params
from detector.loop.episodes import EpisodeParams
from detector.replay.fitting import Fitted, fit_calibration, fit_threshold
from detector.replay.run import ReplayResult, evaluate_at_threshold, run_replay, simulated_frames
from detector.series.index import SeriesIndex
from detector.series.labels import LabelRules
from detector.sim import KIND_SHAPES, SHAPES, Scenario, SimulatedCluster


def scenario_for(seed: int, days: float, nodes: int, **overrides: Any) -> Scenario:
    """The demo's cluster with another seed, span and size (and any other Scenario field)."""
    return dataclasses.replace(Scenario.demo(), seed=seed, days=days, nodes=nodes, **overrides)


def replay_seed(
    seed: int,
    days: float,
    nodes: int,
    weights: Mapping[str, float] | None = None,
    env: Mapping[str, str] | None = None,
    **overrides: Any,
) -> ReplayResult:
    """One recorded replay (scores kept for re-thresholding) of ``scenario_for``'s cluster;
    ``env``: DETECTOR_* settings over the default config."""
    cluster = SimulatedCluster(scenario_for(seed, days, nodes, **overrides))
    config = load_config(None, env=dict(env or {}))
    index = SeriesIndex(LabelRules.from_config(config.labels))  # as `detector replay` builds it
    loop = TickLoop.from_config(config, index, signal_weights=weights)
    return run_replay(
        loop, simulated_frames(cluster, index), events=cluster.events(), record_scores=True
    )


def row(label: str, seed: int, result: ReplayResult, params: EpisodeParams) -> dict[str, object]:
    s = evaluate_at_threshold(result, params, 3600.0, 300.0).summary
    return {
        "seed": seed,
        "setting": label,
        "threshold": params.threshold,
        "failures": s.failures,
        "detected": s.detected,
        "before": s.detected_before_failure,
        "fp": s.false_positives,
        "fp_day": s.fp_per_day,
        "lead_median_min": None if s.lead_time_s.median is None else s.lead_time_s.median / 60,
    }


@dataclasses.dataclass(frozen=True)
class Outcome:
    """One planned failure (the simulator's ground truth) and what the detector made of it."""

    seed: int
    kind: str
    shape: str  # sim.SHAPES or "none"
    amplitude: float
    gap: bool  # the precursor stopped before the XID
    onset_h: float  # hours before the XID it began (0: none)
    early: bool  # an alert matched it before its first XID
    caught: bool  # an alert matched it (at the XID at the latest)
    counted: bool  # its XID is one the catalog counts as a failure


def outcomes(
    seed: int, scenario: Scenario, result: ReplayResult, params: EpisodeParams
) -> list[Outcome]:
    """Every planned failure of ``scenario`` with its outcome at ``params`` (a kind whose XIDs
    the catalog does not count as failures, e.g. a straggler's 43/13, is never caught: any
    alert on it is a false positive)."""
    failures = evaluate_at_threshold(result, params, 3600.0, 300.0).failures
    counted = {(f.event.node, round(f.event.time)) for f in failures}
    caught = {(f.event.node, round(f.event.time)) for f in failures if f.detected}
    early = {
        (f.event.node, round(f.event.time))
        for f in failures
        if f.lead_time_s is not None and f.lead_time_s > 0
    }
    rows = []
    for f in SimulatedCluster(scenario).failures:
        key = (scenario.node_name(f.node), round(scenario.start + f.time))
        rows.append(
            Outcome(
                seed=seed,
                kind=f.kind,
                shape=f.shape,
                amplitude=f.amplitude,
                gap=0 < f.precursor_s < f.lead_s,
                onset_h=f.lead_s / 3600.0,
                early=key in early,
                caught=key in caught,
                counted=key in counted,
            )
        )
    return rows


def print_outcomes(title: str, groups: Mapping[str, list[Outcome]]) -> None:
    """One row per group: planned, with a precursor, caught before the XID, caught at all,
    XID counted as a failure."""
    print(
        f"| {title} | planned | with a precursor | caught before the XID | caught at all "
        "| XID counted as failure |"
    )
    print("|---|---|---|---|---|---|")
    for name, rows in groups.items():
        print(
            f"| {name} | {len(rows)} | {sum(r.shape != 'none' for r in rows)} | "
            f"{sum(r.early for r in rows)} | {sum(r.caught for r in rows)} | "
            f"{sum(r.counted for r in rows)} |"
        )


def print_kind_tables(rows: list[Outcome], thresholds: Mapping[int, tuple[int, float]]) -> None:
    """The per-kind and per-shape tables of the held-out outcomes."""
    used = ", ".join(f"seed {s} at {t:.3f} (from seed {c})" for s, (c, t) in thresholds.items())
    print(f"\nplanned failures, each seed at the threshold calibrated on the next seed: {used}\n")
    print_outcomes("kind", {k: [r for r in rows if r.kind == k] for k in sorted(KIND_SHAPES)})
    print()
    by_shape = {s: [r for r in rows if r.shape == s] for s in (*SHAPES, "none")}
    with_one = [r for r in rows if r.shape != "none"]
    by_shape["faint (amplitude < 0.5)"] = [r for r in with_one if r.amplitude < 0.5]
    by_shape["quiet gap before the XID"] = [r for r in with_one if r.gap]
    by_shape["onset > 1 h before the XID"] = [r for r in with_one if r.onset_h > 1.0]
    print_outcomes("precursor", by_shape)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4, 5])
    parser.add_argument("--days", type=float, default=3.0)
    parser.add_argument("--nodes", type=int, default=63)
    parser.add_argument("--fp-per-day", type=float, default=1.0)
    parser.add_argument("--no-weights", action="store_true", help="skip the held-out+w rows")
    parser.add_argument(
        "--pairs", action="store_true", help="every seed calibrated and applied to every other"
    )
    parser.add_argument(
        "--jobs", type=int, default=1, help="replay this many seeds at once (processes)"
    )
    args = parser.parse_args()
    config = load_config(None, env={})
    base = episode_params(config)
    rows: list[dict[str, object]] = []
    held_out: float | None = None
    began = time.perf_counter()
    results, fitted, weighted = replay_all(args, base)
    print(f"replays: {time.perf_counter() - began:.0f} s", file=sys.stderr)
    if fitted is not None:
        print(f"weights tried {fitted.tried_weights}; kept: {fitted.kept}", file=sys.stderr)
    fitted_at = {
        seed: fit_threshold(r, base, args.fp_per_day, 3600.0, 300.0).point.threshold
        for seed, r in results.items()
    }
    for seed, result in results.items():
        own = fitted_at[seed]
        if held_out is None:
            held_out = own
        rows.append(row("default", seed, result, base))
        rows.append(row("held-out", seed, result, dataclasses.replace(base, threshold=held_out)))
        rows.append(row("in-sample", seed, result, dataclasses.replace(base, threshold=own)))
        if fitted is not None:
            at = dataclasses.replace(base, threshold=fitted.threshold.point.threshold)
            rows.append(row("held-out+w", seed, weighted[seed], at))

    print(
        f"\n{args.nodes} nodes x 8 GPUs, {args.days:g} days per seed, FP budget "
        f"{args.fp_per_day:g}/day; held-out threshold fitted on seed {args.seeds[0]}\n"
    )
    columns = "seed setting threshold failures detected before-XID FP FP/day median-lead-min"
    print("| " + " | ".join(columns.split()) + " |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        lead = "-" if r["lead_median_min"] is None else f"{r['lead_median_min']:+.1f}"
        print(
            f"| {r['seed']} | {r['setting']} | {r['threshold']:.3f} | {r['failures']} | "
            f"{r['detected']} | {r['before']} | {r['fp']} | {r['fp_day']:.2f} | {lead} |"
        )
    print()
    for setting in ("default", "held-out", "in-sample", "held-out+w"):
        chosen = [r for r in rows if r["setting"] == setting]
        if setting.startswith("held-out"):
            chosen = chosen[1:]  # seed 1 is the calibration's own data
        if not chosen:
            continue
        failures = sum(int(r["failures"]) for r in chosen)  # type: ignore[call-overload]
        detected = sum(int(r["detected"]) for r in chosen)  # type: ignore[call-overload]
        before = sum(int(r["before"]) for r in chosen)  # type: ignore[call-overload]
        fp_day = statistics.median(float(r["fp_day"]) for r in chosen)  # type: ignore[arg-type]
        print(
            f"{setting:>9}: detected {detected}/{failures}, before the XID {before}/{failures}, "
            f"median FP/day {fp_day:.2f} over {len(chosen)} seeds"
        )
    print_kind_tables(*held_out_outcomes(results, fitted_at, base, args))
    if args.pairs:
        print_pairs(results, base, args.fp_per_day)
    return 0


def fit_first(seed: int, args: argparse.Namespace, base: EpisodeParams) -> Fitted:
    """Threshold and signal weights fitted on ``seed`` (its unweighted replay included)."""
    replay = functools.partial(replay_seed, seed, args.days, args.nodes)
    return fit_calibration(replay, base, args.fp_per_day, 3600.0, 300.0)


def replay_all(
    args: argparse.Namespace, base: EpisodeParams
) -> tuple[dict[int, ReplayResult], Fitted | None, dict[int, ReplayResult]]:
    """Every seed's replay (``--jobs`` at once), the weights fitted on the first seed (None
    with ``--no-weights``) and each seed replayed with them (the unweighted replay where the
    fit did not keep them)."""
    first, rest = args.seeds[0], args.seeds[1:]
    with ProcessPoolExecutor(args.jobs, mp_context=multiprocessing.get_context("fork")) as pool:
        fit = None if args.no_weights else pool.submit(fit_first, first, args, base)
        plain = {s: pool.submit(replay_seed, s, args.days, args.nodes) for s in rest}
        if fit is None:
            plain[first] = pool.submit(replay_seed, first, args.days, args.nodes)
        fitted = fit.result() if fit is not None else None
        results = {s: future.result() for s, future in plain.items()}
        if fitted is not None:
            results[first] = fitted.unweighted_result
        weighted = dict(results)
        if fitted is not None:
            weighted[first] = fitted.result
            if fitted.kept:
                again = {
                    s: pool.submit(replay_seed, s, args.days, args.nodes, fitted.signal_weights)
                    for s in rest
                }
                weighted.update({s: f.result() for s, f in again.items()})
    return {s: results[s] for s in args.seeds}, fitted, weighted


def held_out_outcomes(
    results: Mapping[int, ReplayResult],
    fitted: Mapping[int, float],
    base: EpisodeParams,
    args: argparse.Namespace,
) -> tuple[list[Outcome], dict[int, tuple[int, float]]]:
    """Each seed's planned failures at the threshold calibrated on the next seed of the list
    (the last on the first): every failure counted once, at a threshold fitted on data that
    did not hold it. One seed alone is evaluated at its own threshold (said in the output)."""
    seeds = list(results)
    fitted = {
        seed: fit_threshold(r, base, args.fp_per_day, 3600.0, 300.0).point.threshold
        for seed, r in results.items()
    }
    rows: list[Outcome] = []
    used: dict[int, tuple[int, float]] = {}
    for i, seed in enumerate(seeds):
        cal = seeds[(i + 1) % len(seeds)]
        params = dataclasses.replace(base, threshold=fitted[cal])
        used[seed] = (cal, fitted[cal])
        rows += outcomes(seed, scenario_for(seed, args.days, args.nodes), results[seed], params)
    return rows, used


def print_pairs(results: Mapping[int, ReplayResult], base: EpisodeParams, budget: float) -> None:
    """Each seed's calibrated threshold applied to every other seed, per tie rule."""
    print(f"\nheld-out pairs (calibrated on one seed, applied to each other), {budget:g} FP/day:\n")
    print(
        "| ties go to | thresholds by seed | pairs | before-XID | FP/day median / mean / max "
        "| over budget | median lead min |"
    )
    print("|---|---|---|---|---|---|---|")
    for rule, anchored in (("nearest the configured", True), ("highest", False)):
        fitted = {
            seed: fit_threshold(r, base, budget, 3600.0, 300.0, anchored=anchored).point.threshold
            for seed, r in results.items()
        }
        pairs = [
            row("pair", seed, results[seed], dataclasses.replace(base, threshold=fitted[cal]))
            for cal in results
            for seed in results
            if seed != cal
        ]
        fp = [float(r["fp_day"]) for r in pairs]  # type: ignore[arg-type]
        leads = [float(r["lead_median_min"]) for r in pairs if r["lead_median_min"] is not None]  # type: ignore[arg-type]
        before = sum(int(r["before"]) for r in pairs)  # type: ignore[call-overload]
        failures = sum(int(r["failures"]) for r in pairs)  # type: ignore[call-overload]
        shown = " ".join(f"{t:.3f}" for t in fitted.values())
        over = sum(f > budget + 1e-9 for f in fp)
        lead = f"{statistics.median(leads):+.1f}" if leads else "-"
        print(
            f"| {rule} | {shown} | {len(pairs)} | {before}/{failures} | "
            f"{statistics.median(fp):.2f} / {statistics.mean(fp):.2f} / {max(fp):.2f} | "
            f"{over} | {lead} |"
        )


if __name__ == "__main__":
    sys.exit(main())
