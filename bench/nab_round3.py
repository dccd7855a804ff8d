"""NAB round 3: the structural variants scored against the labels, each judged cross-validated.

    python bench/nab_round3.py --data PATH/TO/NAB --cache /tmp/nab-cv-cache [--diagnose]

``--diagnose`` prints the committed row's diagnosis instead (at its standard threshold: every
missed window with what the series does there and each component's peak inside it, ungated
and gated; the false-positive rows per file with the component behind each).

Each variant targets a mechanism of the committed row's misses or false positives (the
diagnosis in bench/RESULTS.md "## NAB", round 3) and is printed with its in-sample score (three
profiles, windows hit, FP rows), its standard score with only the thresholds cross-validated
(combined over the two held-out folds) and, on both fixed splits of bench/nab_cv.py, the
gate x holdoff selection replayed under cross-validation (``stitched``: NAB's threshold sweep
over all files, each scored by the pick made without it; ``combined``: thresholds from the
training fold too). The committed ``likelihoodContextSeasonal`` is the first row.

Variants (numbers continue the exposure ledger of RESULTS.md):
- 85 gate memory: the seasonal gate reads the largest seasonal score of the last 10 rows
  (the span Numenta's 10-sample average summarizes);
- 86 / 87 volatility shift: z of log(EW mean |dx| (half-life 10 obs) + 0.1 % of the running
  range) against its own long-run EW mean and variance (3000 obs), the collapse side or both
  sides, ungated (a dispersion change is never explained by a value's hour);
- 88 subsequence discord (KNN-CAD / DAMP's idea): distance of the z-normalized last 32 values
  to their nearest neighbour among the previous 2000 windows (trivial matches excluded), log,
  z against its own EW history, gated;
- 89 / 90 surprise-profile gate: per hour of day, the decayed maximum of the fused surprise on
  previous days; a surprise counts half only where it is within 2x what this hour showed
  (with the value gate: both must call it ordinary; or instead of it);
- 91 StuckRun (detector/scorers/stuck.py), ungated like range novelty;
- 92 per-stream tail recalibration of the fused z (``nab.recalibrate``, z0 = 3);
- 93 both 91 and 92.

Extra components are label-free scaled onto the likelihood's z like the context z (ratio of
99.9th percentiles over the corpus's rows after each file's first 15 %). Cached per file under
``--cache`` beside nab_cv's (discord ~40 s on 2 cores, the rest seconds); then ~40 s per
variant.
"""

from __future__ import annotations

import argparse
import math
import multiprocessing
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere

from bench import nab, nab_cv, nab_score
from bench.nab import Components, ContextConfig, FloatArray, NabFile, SeasonalConfig


def volatility_z(f: NabFile, short: float = 10.0, long: float = 3000.0) -> FloatArray:
    """Signed z of log(EW mean |dx| + 0.1 % of the running range) against its EW history
    (negative: the series went quieter than usual). Causal; first 100 rows learn only."""
    x = f.values
    out = np.zeros(x.shape[0])
    a_s, a_l = 1 - 0.5 ** (1 / short), 1 - 0.5 ** (1 / long)
    lo = hi = float(x[0])
    s = mean = var = 0.0
    for i in range(1, x.shape[0]):
        d = abs(float(x[i] - x[i - 1]))
        lo, hi = min(lo, float(x[i])), max(hi, float(x[i]))
        s = d if i == 1 else s + a_s * (d - s)
        y = math.log(s + 1e-3 * (hi - lo) + 1e-12)
        if i > 100:
            out[i] = (y - mean) / math.sqrt(max(var, 1e-4))
        r = y - mean
        if i == 1:
            mean, var = y, 0.0
        elif i > 100:
            mean, var = mean + a_l * r, (1 - a_l) * (var + a_l * r * r)
        else:
            mean, var = mean + r / i, var + (r * r - var) / i
    out[:32] = 0.0
    return out


def discord_z(f: NabFile, m: int = 32, memory: int = 2000, long: float = 3000.0) -> FloatArray:
    """z of the log nearest-neighbour distance of the z-normalized last ``m`` values among the
    previous ``memory`` windows (none overlapping it), against its own EW history (first 300
    distances learn only). Normalization floors the window's deviation at 5 % of the range."""
    x = f.values
    n = x.shape[0]
    out = np.zeros(n)
    windows = np.lib.stride_tricks.sliding_window_view(x, m)
    mu, sd = windows.mean(axis=1), windows.std(axis=1)
    hi, lo = np.maximum.accumulate(x), np.minimum.accumulate(x)
    a_l = 1 - 0.5 ** (1 / long)
    mean = var = 0.0
    count = 0
    for end in range(2 * m, n):
        j = end - m + 1
        floor = 0.05 * (hi[end] - lo[end]) + 1e-12
        q = (windows[j] - mu[j]) / max(float(sd[j]), floor)
        j0, j1 = max(0, j - m - memory), j - m
        if j1 <= j0:
            continue
        past = (windows[j0:j1] - mu[j0:j1, None]) / np.maximum(sd[j0:j1], floor)[:, None]
        y = math.log(math.sqrt(float(np.min(((past - q) ** 2).sum(axis=1))) / m) + 1e-3)
        if count > 300:
            out[end] = max(0.0, (y - mean) / math.sqrt(max(var, 1e-4)))
        count += 1
        r = y - mean
        if count <= 300:
            mean, var = mean + r / count, var + (r * r - var) / count
        else:
            mean, var = mean + a_l * r, (1 - a_l) * (var + a_l * r * r)
    out[:32] = 0.0
    return out


def surprise_envelope(f: NabFile, surprise: FloatArray, bins: int = 24) -> FloatArray:
    """Per row: the largest surprise its hour-of-day bin showed on previous visits (a visit
    starts half a day after the bin was last fed), decayed with SeasonalProfile's half-life
    of 4 days; +inf until the bin was visited twice."""
    period, half_life = 86400.0, 4 * 86400.0
    clock = nab.held_clock(f)
    envelope, committed = np.zeros(bins), np.zeros(bins)
    last, visits = np.full(bins, -np.inf), np.zeros(bins)
    out = np.full(clock.shape[0], np.inf)
    for i, t in enumerate(clock.tolist()):
        b = int((t % period) / period * bins) % bins
        fade = 2.0 ** (-(t - last[b]) / half_life) if last[b] > -np.inf else 1.0
        if t - last[b] > 0.5 * period:
            visits[b] += last[b] > -np.inf
            committed[b] = envelope[b] * fade
        if visits[b] >= 2:
            out[i] = committed[b]
        envelope[b] = max(envelope[b] * fade, float(surprise[i]))
        last[b] = t
    return out


EXTRAS: dict[str, Callable[[NabFile], FloatArray]] = {
    "volatility": volatility_z,
    "discord": discord_z,
}


def _extra(job: tuple[NabFile, str, Path | None]) -> FloatArray:
    f, kind, cache = job
    return nab_cv._cached(cache, f"r3-{kind}", f, lambda: EXTRAS[kind](f))


Variant = tuple[str, list[Components], SeasonalConfig]


def variants(corpus: list[NabFile], base: list[Components], cache: Path | None) -> list[Variant]:
    """The committed row, then variants 85-93 (module docstring)."""
    with multiprocessing.Pool(2) as pool:
        extra = {k: pool.map(_extra, [(f, k, cache) for f in corpus]) for k in EXTRAS}
    stuck = [nab_cv._series((f, "stuck", "", cache))[0] for f in corpus]
    weight = ContextConfig().context_weight

    def scaled(series: list[FloatArray]) -> list[FloatArray]:
        w = nab_cv.context_weight([p.likelihood for p in base], [p.range for p in base], series)
        return [w * z for z in series]

    def ungated(series: list[FloatArray]) -> list[Components]:
        return [replace(p, range=np.maximum(p.range, z)) for p, z in zip(base, series, strict=True)]

    def surprise_gate(keep_value_gate: bool) -> list[Components]:
        out = []
        for f, p in zip(corpus, base, strict=True):
            surprise = np.maximum(p.likelihood, weight * p.context)
            env = surprise_envelope(f, surprise)
            # as a seasonal score: the gate clip(s / 2, 0.5, 1) then reads ratio / 2
            ratio = np.where(np.isinf(env), np.inf, surprise / np.maximum(env, 1e-9))
            out.append(
                replace(p, seasonal=np.maximum(p.seasonal, ratio) if keep_value_gate else ratio)
            )
        return out

    cfg = SeasonalConfig()
    recal = replace(cfg, recalibrate_z=nab.ROUND3_RECALIBRATE_Z)
    with_stuck = [replace(p, stuck=z) for p, z in zip(base, stuck, strict=True)]
    return [
        ("committed likelihoodContextSeasonal", base, cfg),
        ("85 gate memory 10 rows", base, replace(cfg, gate_memory_rows=10)),
        (
            "86 volatility collapse, ungated",
            ungated(scaled([np.maximum(-z, 0) for z in extra["volatility"]])),
            cfg,
        ),
        (
            "87 volatility both sides, ungated",
            ungated(scaled([np.abs(z) for z in extra["volatility"]])),
            cfg,
        ),
        (
            "88 discord m=32, gated",
            [replace(p, extras=(z,)) for p, z in zip(base, scaled(extra["discord"]), strict=True)],
            cfg,
        ),
        ("89 value gate and surprise-profile gate", surprise_gate(True), cfg),
        ("90 surprise-profile gate instead", surprise_gate(False), cfg),
        ("91 + StuckRun, ungated", with_stuck, cfg),
        ("92 per-stream tail recalibration", base, recal),
        ("93 StuckRun + recalibration", with_stuck, recal),
    ]


RowsOf = Callable[[SeasonalConfig, list[int]], list[nab_score.FileRows]]


def _replay_selection(
    rows: RowsOf, grid: list[SeasonalConfig], idx: list[list[int]], std: nab_score.CostMatrix
) -> tuple[list[nab_score.FileRows], list[nab_score.CorpusResult], list[float]]:
    """For each fold held out: the grid's best on the other fold (standard), its held-out
    rows, its held-out result at the training threshold and the null's raw score there."""
    memo: dict[tuple[int, int], list[nab_score.FileRows]] = {}

    def fold_rows(g: int, k: int) -> list[nab_score.FileRows]:
        if (g, k) not in memo:
            memo[(g, k)] = rows(grid[g], idx[k])
        return memo[(g, k)]

    score = {
        (g, k): nab_score.best_threshold(fold_rows(g, k), std).normalized
        for g in range(len(grid))
        for k in (0, 1)
    }
    stitched: list[nab_score.FileRows] = []
    held, nulls = [], []
    for test in (0, 1):
        pick = max(range(len(grid)), key=lambda g: score[(g, 1 - test)])
        result, null = nab_cv.held_out(fold_rows(pick, 1 - test), fold_rows(pick, test), std)
        held.append(result)
        nulls.append(null)
        stitched += fold_rows(pick, test)
    return stitched, held, nulls


def committed_components(series: dict[tuple[str, str], list[Any]]) -> list[Components]:
    """Per file, the committed row's parts from nab_cv's cached series (base forecast,
    context L4O6, seasonal profile)."""
    return [
        Components(lik, rng, ctx[0], sea[0], raw)
        for (lik, rng, raw), ctx, sea in zip(
            series[("forecast", "base")],
            series[("context", "L4O6")],
            series[("seasonal", "")],
            strict=True,
        )
    ]


def judge(
    corpus: list[NabFile],
    parts: list[Components],
    cfg: SeasonalConfig,
    profiles: dict[str, nab_score.CostMatrix],
) -> list[str]:
    """Table cells: in-sample (3 profiles, windows, FP rows), thresholds CV'd (parity /
    blocks), gate x holdoff selection CV'd: stitched and combined standard, both splits."""
    weight = ContextConfig().context_weight
    names, std = list(profiles), profiles["standard"]

    def rows(c: SeasonalConfig, idx: list[int]) -> list[nab_score.FileRows]:
        return [
            nab_score.FileRows(
                corpus[i].name,
                nab.as_written(1.0 - np.exp(-nab.fuse(parts[i], c, weight) / c.score_scale)),
                corpus[i].windows,
            )
            for i in idx
        ]

    everything = rows(cfg, list(range(len(corpus))))
    fits = [nab_score.best_threshold(everything, profiles[p]) for p in names]
    cells = [
        " / ".join(f"{r.normalized:.2f}" for r in fits),
        f"{fits[0].detected_windows}",
        f"{fits[0].false_positive_rows}",
    ]
    fixed, stitched_cells, combined_cells = [], [], []
    grid = [
        replace(cfg, gate_z=gz, gate_floor=gf, holdoff_rows=h)
        for gz, gf in nab_cv.GATES
        for h in nab_cv.HOLDOFFS
    ]
    for split in ("parity", "blocks"):
        folds = nab_cv.fold_of([f.name for f in corpus], split)
        idx = [[i for i in range(len(corpus)) if folds[i] == k] for k in (0, 1)]
        by_name = {r.name: r for r in everything}
        by_fold = [[by_name[corpus[i].name] for i in idx[k]] for k in (0, 1)]
        pairs = [nab_cv.held_out(by_fold[1 - k], by_fold[k], std) for k in (0, 1)]
        fixed.append(nab_cv.combined([r for r, _ in pairs], [v for _, v in pairs], std))
        stitched, held, nulls = _replay_selection(rows, grid, idx, std)
        stitched_cells.append(f"{nab_score.best_threshold(stitched, std).normalized:.2f}")
        combined_cells.append(f"{nab_cv.combined(held, nulls, std):.2f}")
    cells.append(" / ".join(f"{v:.2f}" for v in fixed))
    cells.append(" / ".join(stitched_cells))
    cells.append(" / ".join(combined_cells))
    return cells


def diagnose(corpus: list[NabFile], base: list[Components], cost: nab_score.CostMatrix) -> str:
    """The committed row at its standard threshold: missed windows and FP rows per file."""
    cfg, weight = SeasonalConfig(), ContextConfig().context_weight
    files = [
        nab_score.FileRows(
            f.name, nab.as_written(1 - np.exp(-nab.fuse(p, cfg, weight) / 10)), f.windows
        )
        for f, p in zip(corpus, base, strict=True)
    ]
    best = nab_score.best_threshold(files, cost)
    z_threshold = -cfg.score_scale * math.log(1.0 - best.threshold)
    lines = [
        f"threshold {best.threshold:.6g} (z {z_threshold:.2f}): {best.normalized:.2f}, "
        f"{best.detected_windows}/{best.windows} windows, {best.false_positive_rows} FP rows",
        "missed windows (component peaks inside the window: gated, ungated in brackets):",
    ]
    fp_lines = []
    for f, p, rows in zip(corpus, base, files, strict=True):
        gate = np.clip(p.seasonal / cfg.gate_z, cfg.gate_floor, 1.0)
        parts = {
            "lik": (gate * p.likelihood, p.likelihood),
            "range": (p.range, p.range),
            "ctx": (weight * gate * p.context, weight * p.context),
        }
        value, window = nab_score.sweep_scores(rows.scores.shape[0], f.windows, cost)
        start = nab_score.probation_length(rows.scores.shape[0])
        for k, (a, b) in enumerate(f.windows):
            if np.any(rows.scores[a : b + 1] >= best.threshold):
                continue
            before, inside = f.values[max(start, a - 500) : a], f.values[a : b + 1]
            peaks = ", ".join(
                f"{n} {g[a : b + 1].max():.2f} ({u[a : b + 1].max():.2f})"
                for n, (g, u) in parts.items()
            )
            lines.append(
                f"  {f.name} w{k} rows {a}-{b}: before mean {before.mean():.3g} sd "
                f"{before.std():.3g}, inside mean {inside.mean():.3g} sd {inside.std():.3g} "
                f"[{inside.min():.3g}, {inside.max():.3g}]; {peaks}"
            )
        fp = np.flatnonzero((rows.scores >= best.threshold) & (window == nab_score.OUTSIDE))
        if fp.size:
            behind = [max(parts, key=lambda n: parts[n][0][i]) for i in fp.tolist()]
            counts = {n: behind.count(n) for n in parts if n in behind}
            runs = 1 + int(np.sum(np.diff(fp) > 1))
            fp_lines.append((float(value[fp].sum()), f.name, fp.size, runs, counts))
    lines.append("false positives per file (raw cost, rows, runs, component behind each row):")
    lines += [f"  {c:6.2f} {n}: {r} rows in {u} runs {k}" for c, n, r, u, k in sorted(fp_lines)]
    lines.append(f"  total raw cost {sum(x[0] for x in fp_lines):.2f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    nab.add_data_argument(parser)
    parser.add_argument("--cache", type=Path, default=None, help="cache of per-file z scores")
    parser.add_argument("--diagnose", action="store_true", help="the committed row's misses/FPs")
    args = parser.parse_args(argv)
    args.data = nab.require_corpus(args.data)
    corpus = nab.load_corpus(args.data)
    profiles = nab_score.load_profiles(args.data / "config" / "profiles.json")
    with multiprocessing.Pool(2) as pool:
        jobs = [("forecast", "base"), ("context", "L4O6"), ("seasonal", ""), ("stuck", "")]
        series = {j: pool.map(nab_cv._series, [(f, *j, args.cache) for f in corpus]) for j in jobs}
    base = committed_components(series)
    if args.diagnose:
        print(diagnose(corpus, base, profiles["standard"]))
        return 0
    print(
        "| # | variant | in-sample std / low-FP / low-FN | windows hit | FP rows "
        "| thresholds CV'd std, parity / blocks | selection CV'd, stitched std, parity / blocks "
        "| combined std, parity / blocks |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for label, parts, cfg in variants(corpus, base, args.cache):
        number, _, name = label.partition(" ")
        number, name = (number, name) if number.isdigit() else ("", label)
        print(
            f"| {number} | {name} | " + " | ".join(judge(corpus, parts, cfg, profiles)) + " |",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
