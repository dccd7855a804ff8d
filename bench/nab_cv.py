"""NAB, cross-validated: how much of the best row's score survives choosing it on other files.

    python bench/nab_cv.py --data PATH/TO/NAB [--cache /tmp/nab-cv-cache]

The fused NAB detectors were picked by their score on the whole corpus (bench/RESULTS.md
"## NAB" counts the variants), so their corpus score is optimistic. This script replays the
*selection itself* under 2-fold cross-validation over files:

- split (``--split``): within each NAB category the files, sorted by name, go to fold
  ``position % 2`` (``parity``, the default: 29 + 29 files) or ``(position // 2) % 2``
  (``blocks``, a second fixed split to see how much the estimate depends on the split); both
  label-free and stratified by category;
- candidates: the variants of ``bench/nab.py``'s fused detector (``fuse``) that its config
  dataclasses produce: no context or one of the context variants scored when ContextConfig was
  chosen (``--contexts``; each put on the likelihood's scale by ContextConfig's label-free
  99.9th-percentile rule, computed here), no seasonal gate or gate (threshold, floor) in
  ``GATES``, holdoff in ``HOLDOFFS``; optionally several forecast variants (``--forecasts``),
  severity ladders (``--severity``), context agreement (``--agreement``), per-stream tail
  recalibration (``--recalibrate``), StuckRun (``--stuck``) and round 4's shape z
  (``--shape``, ``nab.with_shape``): 360 by default;
- for each fold: the candidate with the best *standard* score on the training files (its
  threshold per profile also chosen on the training files) is scored on the held-out files at
  those thresholds. A subset's score is NAB's formula over that subset's windows.

Printed rows: per fold the pick, its training score and held-out scores (three profiles);
"combined": both held-out raw totals added and normalized over all windows (null and perfect
add too); "stitched": every file scored by the pick made without its labels, then NAB's own
threshold sweep over all 58 files (the protocol behind the published scoreboard, which sweeps
the threshold for every detector: only the configuration choice is kept honest); for each
``--reference`` candidate its in-sample score and its score with only the thresholds
cross-validated. Scores are taken ``as_written`` (12 significant digits), like result files.
Per-file z scores are cached under ``--cache`` (the first run streams every file: ~3 min on
2 cores for the default 8 context variants; then ~35 s).
"""

from __future__ import annotations

import argparse
import math
import multiprocessing
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere

from bench import nab, nab_score
from bench.nab import (
    Components,
    ContextConfig,
    FloatArray,
    LikelihoodConfig,
    NabFile,
    SeasonalConfig,
)

HOLDOFFS = (0, 10, 40, 80, 150, 300, 600, 1200)
GATES = ((2.0, 1.0), (2.0, 0.5), (2.0, 0.25), (2.0, 0.0), (3.0, 0.5))  # floor 1.0: no gate

# Forecast variants (the likelihood's inner predictor); "base" is LikelihoodConfig().
FORECASTS: dict[str, LikelihoodConfig] = {
    "base": LikelihoodConfig(),
    "seasonal": LikelihoodConfig(season_period_s=86400.0),  # ForecastError's daily twins
    "slow": LikelihoodConfig(slow_half_life=35.0),  # + likelihood of a 10x longer average
    "seasonalSlow": LikelihoodConfig(season_period_s=86400.0, slow_half_life=35.0),
}
# Context variants scored in the sessions that chose ContextConfig (levels, orders, rate
# half-life); 2 levels is left out: its label-free weight is undefined (99.9th pct 0).
CONTEXTS: dict[str, ContextConfig] = {
    f"L{levels}O{orders}" + ("r1000" if rate != 3000.0 else ""): ContextConfig(
        levels=levels, orders=orders, rate_half_life=rate, table_bits=0
    )
    for levels, orders, rate in (
        (4, 6, 3000.0),
        (8, 4, 3000.0),
        (16, 4, 3000.0),
        (8, 6, 3000.0),
        (8, 4, 1000.0),
        (4, 4, 3000.0),
        (6, 4, 3000.0),
        (3, 4, 3000.0),
    )
}

# Ladders of context resolutions, averaged (unweighted z) instead of picking one: an ensemble
# over the quantization (x2 levels per step at CAD's 4 orders), weighted by the same rule.
CONTEXT_LADDERS: dict[str, tuple[str, ...]] = {"L4-8-16O4": ("L4O4", "L8O4", "L16O4")}


def table_bits(levels: int, orders: int) -> int:
    """Smallest power of two holding every context key (collision-free), at most 2**21."""
    keys = sum((levels + 2) ** k for k in range(1, orders + 1))
    return int(min(2 ** math.ceil(math.log2(max(keys, 64))), 2**21))


@dataclass(frozen=True, slots=True)
class Candidate:
    """One fused detector: forecast variant, context variant ("" = none), gate, holdoff."""

    forecast: str
    context: str
    cfg: SeasonalConfig
    stuck: bool = False  # + StuckRun (round 3)
    shape: bool = False  # + PhaseShapeMemory's z, nab.with_shape (round 4)

    @property
    def name(self) -> str:
        gate = (
            "nogate"
            if self.cfg.gate_floor >= 1.0
            else f"g{self.cfg.gate_z:g}/{self.cfg.gate_floor:g}"
        )
        name = f"{self.forecast}:{self.context or 'noctx'}:{gate}:h{self.cfg.holdoff_rows}"
        name += f":s{self.cfg.severity_ratio:g}" if self.cfg.severity_ratio > 1 else ""
        name += f":r{self.cfg.recalibrate_z:g}" if self.cfg.recalibrate_z > 0 else ""
        name += ":stuck" if self.stuck else ""
        name += ":shape" if self.shape else ""
        return name + (
            f":a{self.cfg.context_agreement_z:g}" if self.cfg.context_agreement_z else ""
        )


def candidates(
    forecasts: tuple[str, ...],
    contexts: tuple[str, ...],
    severities: tuple[float, ...] = (1.0,),
    agreements: tuple[float, ...] = (0.0,),
    recalibrations: tuple[float, ...] = (0.0,),
    stucks: tuple[bool, ...] = (False,),
    shapes: tuple[bool, ...] = (False,),
) -> list[Candidate]:
    """The grid the selection chooses from (see module docstring)."""
    base = SeasonalConfig()
    return [
        Candidate(
            fc,
            ctx,
            replace(
                base,
                gate_z=gz,
                gate_floor=gf,
                holdoff_rows=h,
                severity_ratio=r,
                context_agreement_z=a,
                recalibrate_z=z0,
            ),
            stuck,
            shape,
        )
        for fc in forecasts
        for ctx in ("", *contexts)
        for gz, gf in GATES
        for h in HOLDOFFS
        for r in severities
        for a in (agreements if ctx else (0.0,))
        for z0 in recalibrations
        for stuck in stucks
        for shape in shapes
    ]


def fold_of(names: list[str], split: str = "parity") -> list[int]:
    """Fold (0 or 1) of each file from its position among its category's sorted files:
    ``parity`` (the default) position % 2, ``blocks`` (position // 2) % 2 (files 0, 1 | 2, 3
    | ...: a second fixed split, to see how much the estimate depends on the split), ``halves``
    the first half of the category's files (rounded up) against the rest (a third, round 4)."""
    if split not in ("parity", "blocks", "halves"):
        raise ValueError(f"unknown split {split!r}: parity, blocks or halves")
    position: dict[str, int] = {}
    seen: dict[str, int] = {}
    for name in sorted(names):
        category = name.split("/")[0]
        position[name] = seen.get(category, 0)
        seen[category] = position[name] + 1
    if split == "halves":  # the first half of each category's sorted files | the rest
        return [int(2 * position[name] >= seen[name.split("/")[0]]) for name in names]
    step = 1 if split == "parity" else 2
    return [(position[name] // step) % 2 for name in names]


def _cached(
    cache: Path | None, kind: str, f: NabFile, make: Callable[[], FloatArray]
) -> FloatArray:
    """One z-score series of one file, from ``cache/<kind>/`` when there (else computed)."""
    path = None if cache is None else cache / kind / (f.name.replace("/", "__") + ".npy")
    if path is not None and path.exists():
        return np.asarray(np.load(path), dtype=np.float64)
    z = make()
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        np.save(path, z)
    return z


def _series(job: tuple[NabFile, str, str, Path | None]) -> tuple[FloatArray, ...]:
    """(likelihood, range, raw forecast) for a forecast variant, (context,) for a context
    variant, (seasonal,) for kind "seasonal" or (stuck,) for kind "stuck"."""
    f, kind, variant, cache = job
    if kind == "forecast":
        cfg = FORECASTS[variant]
        both: list[FloatArray] = []

        def make(i: int) -> Callable[[], FloatArray]:
            def run() -> FloatArray:
                if not both:
                    raw, lik, rng = nab.predictive_z(f, cfg)
                    both.extend((lik, rng, raw))
                return both[i]

            return run

        return tuple(
            _cached(cache, f"{kind}-{variant}-{k}", f, make(i))
            for i, k in enumerate(("lik", "rng", "raw"))
        )
    if kind == "context" and variant in CONTEXT_LADDERS:
        members = [_series((f, kind, m, cache))[0] for m in CONTEXT_LADDERS[variant]]
        return (np.mean(members, axis=0),)
    if kind == "context":
        c = CONTEXTS[variant]
        c = replace(c, table_bits=table_bits(c.levels, c.orders))
        return (_cached(cache, f"context-{variant}", f, lambda: nab.context_z(f, c)),)
    if kind == "stuck":
        return (_cached(cache, "stuck", f, lambda: nab.stuck_z(f)),)
    if kind == "shape":
        return (_cached(cache, "r4-shape", f, lambda: nab.shape_z(f)),)
    return (_cached(cache, "seasonal", f, lambda: nab.seasonal_z(f)),)


def context_weight(lik: list[FloatArray], rng: list[FloatArray], ctx: list[FloatArray]) -> float:
    """Label-free scale of a context z: ratio of the 99.9th percentiles of max(likelihood,
    range) and of the context z over every file's rows after its first 15 % (ContextConfig)."""

    def tail(series: list[FloatArray]) -> float:
        rows = np.concatenate([z[int(0.15 * z.shape[0]) :] for z in series])
        return float(np.percentile(rows, 99.9))

    return tail([np.maximum(a, b) for a, b in zip(lik, rng, strict=True)]) / tail(ctx)


def scores(parts: Components, cand: Candidate, weight: float) -> FloatArray:
    """The candidate's anomaly scores for one file, as a result file would hold them."""
    z = nab.fuse(parts, cand.cfg, weight if cand.context else 0.0)
    return nab.as_written(1.0 - np.exp(-z / cand.cfg.score_scale))


def combined(
    results: list[nab_score.CorpusResult], nulls: list[float], cost: nab_score.CostMatrix
) -> float:
    """Normalized score of several disjoint subsets scored separately (raw totals add)."""
    raw = sum(r.raw for r in results)
    null = sum(nulls)
    perfect = cost.tp * sum(r.windows for r in results)
    return 100.0 * (raw - null) / (perfect - null)


def held_out(
    train: list[nab_score.FileRows], test: list[nab_score.FileRows], cost: nab_score.CostMatrix
) -> tuple[nab_score.CorpusResult, float]:
    """``test`` scored at the threshold NAB's sweep picks on ``train``, and the null detector's
    raw score on ``test`` (what ``combined`` needs)."""
    threshold = nab_score.best_threshold(train, cost).threshold
    return nab_score.score_at(test, cost, threshold), nab_score.score_at(test, cost, math.inf).raw


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    nab.add_data_argument(parser)
    parser.add_argument("--cache", type=Path, default=None, help="cache of per-file z scores")
    parser.add_argument("--forecasts", default="base", help=f"comma list of {list(FORECASTS)}")
    parser.add_argument(
        "--contexts", default=",".join(CONTEXTS), help=f"of {[*CONTEXTS, *CONTEXT_LADDERS]}"
    )
    parser.add_argument(
        "--severity", default="1", help="comma list of severity ladder ratios (1: no ladder)"
    )
    parser.add_argument(
        "--agreement", default="0", help="comma list of context_agreement_z values (0: off)"
    )
    parser.add_argument(
        "--recalibrate", default="0", help="comma list of recalibrate_z values (0: off)"
    )
    parser.add_argument("--stuck", default="0", help="comma list of 0 (without) / 1 (+ StuckRun)")
    parser.add_argument(
        "--shape", default="0", help="comma list of 0 (without) / 1 (+ shape z, round 4)"
    )
    parser.add_argument("--split", default="parity", choices=("parity", "blocks", "halves"))
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument(
        "--reference",
        default="base:L4O6:g2/0.5:h80",
        help="candidate whose in-sample score is printed beside the CV",
    )
    args = parser.parse_args(argv)
    args.data = nab.require_corpus(args.data)

    corpus = nab.load_corpus(args.data)
    profiles = nab_score.load_profiles(args.data / "config" / "profiles.json")
    names = list(profiles)
    folds = fold_of([f.name for f in corpus], args.split)
    forecasts = tuple(v for v in args.forecasts.split(",") if v)
    contexts = tuple(v for v in args.contexts.split(",") if v)
    started = time.perf_counter()
    series: dict[tuple[str, str], list[tuple[FloatArray, ...]]] = {}
    jobs = [("forecast", v) for v in forecasts] + [("context", v) for v in contexts]
    with multiprocessing.Pool(args.jobs) as pool:
        for kind, variant in [*jobs, ("seasonal", ""), ("stuck", ""), ("shape", "")]:
            series[(kind, variant)] = pool.map(
                _series, [(f, kind, variant, args.cache) for f in corpus]
            )
    print(f"components: {time.perf_counter() - started:.1f} s", file=sys.stderr)

    seasonal = [z[0] for z in series[("seasonal", "")]]
    weights = {
        (fc, ctx): context_weight(
            [z[0] for z in series[("forecast", fc)]],
            [z[1] for z in series[("forecast", fc)]],
            [z[0] for z in series[("context", ctx)]],
        )
        for fc in forecasts
        for ctx in contexts
    }
    for (fc, ctx), w in weights.items():
        print(f"context weight {fc}:{ctx} = {w:.3f}", file=sys.stderr)

    severities = tuple(float(v) for v in args.severity.split(",") if v)
    agreements = tuple(float(v) for v in args.agreement.split(",") if v)
    recalibrations = tuple(float(v) for v in args.recalibrate.split(",") if v)
    stucks = tuple(v == "1" for v in args.stuck.split(",") if v)
    shapes = tuple(v == "1" for v in args.shape.split(",") if v)
    grid = candidates(forecasts, contexts, severities, agreements, recalibrations, stucks, shapes)
    shape = [z[0] for z in series[("shape", "")]]
    stuck = [z[0] for z in series[("stuck", "")]]
    std = profiles[names[0]]

    def rows(cand: Candidate, fold: int) -> list[nab_score.FileRows]:
        out = []
        for i, f in enumerate(corpus):
            if folds[i] != fold:
                continue
            lik, rng, raw = series[("forecast", cand.forecast)][i]
            ctx = series[("context", cand.context)][i][0] if cand.context else np.zeros_like(lik)
            weight = weights.get((cand.forecast, cand.context), 0.0)
            parts = Components(lik, rng, ctx, seasonal[i], raw, stuck[i] if cand.stuck else None)
            if cand.shape:
                parts = nab.with_shape(parts, f, shape[i], nab.SHAPE_CLOSE_WEIGHT)
            out.append(nab_score.FileRows(f.name, scores(parts, cand, weight), f.windows))
        return out

    # training fit of every candidate on each fold (standard profile); rows are not kept
    fits = {(c.name, k): nab_score.best_threshold(rows(c, k), std) for c in grid for k in (0, 1)}
    print(f"candidates: {len(grid)}, {time.perf_counter() - started:.1f} s", file=sys.stderr)

    lines = [
        "| held-out fold | chosen on the other fold | train std | "
        + " | ".join(f"held-out {p}" for p in names)
        + " |",
        "|---|---|---|" + "---|" * len(names),
    ]
    held: dict[str, list[nab_score.CorpusResult]] = {p: [] for p in names}
    nulls: dict[str, list[float]] = {p: [] for p in names}
    stitched: list[nab_score.FileRows] = []  # every file scored by the pick made without it
    for test in (0, 1):
        train = 1 - test
        best = max(grid, key=lambda c: fits[(c.name, train)].normalized)  # first on ties
        train_rows, test_rows = rows(best, train), rows(best, test)
        stitched += test_rows
        cells = []
        for p in names:
            result, null = held_out(train_rows, test_rows, profiles[p])
            held[p].append(result)
            nulls[p].append(null)
            cells.append(f"{result.normalized:.2f}")
        train_std = fits[(best.name, train)].normalized
        lines.append(f"| {test} | {best.name} | {train_std:.2f} | " + " | ".join(cells) + " |")
    cells = [f"{combined(held[p], nulls[p], profiles[p]):.2f}" for p in names]
    lines.append("| both (combined) | | | " + " | ".join(cells) + " |")
    cells = [f"{nab_score.best_threshold(stitched, profiles[p]).normalized:.2f}" for p in names]
    lines.append("| both, NAB's threshold sweep (stitched) | | | " + " | ".join(cells) + " |")
    for ref in (c for c in grid if c.name in args.reference.split(",")):
        by_fold = (rows(ref, 0), rows(ref, 1))
        cells = [
            f"{nab_score.best_threshold(by_fold[0] + by_fold[1], profiles[p]).normalized:.2f}"
            for p in names
        ]
        lines.append(f"| in-sample, all files | {ref.name} | | " + " | ".join(cells) + " |")
        # the same fixed detector, only its thresholds cross-validated
        cells = []
        for p in names:
            pairs = [held_out(by_fold[1 - test], by_fold[test], profiles[p]) for test in (0, 1)]
            results, null_raw = [r for r, _ in pairs], [v for _, v in pairs]
            cells.append(f"{combined(results, null_raw, profiles[p]):.2f}")
        lines.append(
            f"| fixed, thresholds from the other fold | {ref.name} | | " + " | ".join(cells) + " |"
        )
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
