"""NAB: how much the whole file's value range is worth (a look-ahead our rules exclude).

    python bench/nab_lookahead.py --data PATH/TO/NAB --cache /tmp/nab-cv-cache

NAB's detector base class hands every detector ``inputMin`` and ``inputMax``, the smallest
and largest value of the WHOLE file, before the first row is streamed. The published leaders
quantize against them: CAD OSE (69.9) and ARTime (74.85: ``init(dmin, dmax, dlength)``
normalizes every value by them and discretizes into 80 levels, in markNZed/ARTimeNAB.jl),
and Numenta's HTM (70.1) sizes its encoder from them. The issue behind bench/nab.py rules
look-ahead out, so the project's context novelty quantizes against the range seen *so far*
(a value beyond it is its own "above/below the range" symbol). This script measures what the
excluded information is worth to our own scorers, and nothing else: it is a diagnosis of the
comparison with the scoreboard, not a candidate for the NAB row (a detector on a live GPU
stream cannot know the range of values it has not seen yet).

Variants, continuing the label-exposure ledger of bench/RESULTS.md "## NAB" (104 before):

- 105 ``contextNovelty`` (the committed L4O6 context alone, holdoff 300 as in bench/nab.py)
  with every file's context quantized against [file min, file max] from the first row;
- 106 ``likelihoodContextSeasonal`` with that context in place of the causal one, its weight
  recomputed by ContextConfig's label-free 99.9th-percentile rule.

Both are printed beside the same rows with the causal context (the committed figures,
re-scored from the same cache: no new exposure). The file-range context is cached per file
under ``--cache`` (``lookahead-context-L4O6``, ~1 min on 2 cores the first time).
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere

from bench import nab, nab_cv, nab_round3, nab_score
from bench.nab import Components, ContextConfig, FloatArray, NabFile, SeasonalConfig

CONTEXT = "L4O6"  # the committed context (4 levels x 6 orders)


def file_range_context_z(f: NabFile) -> FloatArray:
    """The committed ContextNovelty streamed over ``f`` with its range fixed in advance to the
    file's [min, max] (NAB's inputMin / inputMax) instead of the range seen so far."""
    c = nab_cv.CONTEXTS[CONTEXT]
    c = replace(c, table_bits=nab_cv.table_bits(c.levels, c.orders))  # as nab_cv streams it
    scorer = nab.context_scorer(c)
    finite = f.values[np.isfinite(f.values)]
    state = scorer.state_dict()  # empty arrays with the right dtypes and row shapes
    state.update(
        low=np.array([finite.min()]),
        high=np.array([finite.max()]),
        count=np.zeros(1),
        code=np.zeros(1, dtype=np.int64),
        weight=np.zeros(1),
        hits=np.zeros((1, scorer.orders)),
        memory=np.zeros((1, scorer.table_bits // 64), dtype=np.uint64),
    )
    scorer.load_state_dict(state)
    return nab.stream(scorer, f, nab.row_clock(f), c.cadence_rows)


def _file_range(job: tuple[NabFile, Path | None]) -> FloatArray:
    f, cache = job
    return nab_cv._cached(cache, f"lookahead-context-{CONTEXT}", f, lambda: file_range_context_z(f))


def context_alone(
    corpus: list[NabFile], ctx: list[FloatArray], profiles: dict[str, nab_score.CostMatrix]
) -> str:
    """bench/nab.py's ``contextNovelty`` row for these context z series: three profiles,
    windows hit and FP rows at the standard threshold."""
    cfg = ContextConfig()
    files = [
        nab_score.FileRows(
            f.name,
            nab.as_written(nab.anomaly_scores({"c": z}, cfg.holdoff_rows, cfg.score_scale)["c"]),
            f.windows,
        )
        for f, z in zip(corpus, ctx, strict=True)
    ]
    fits = [nab_score.best_threshold(files, cost) for cost in profiles.values()]
    scores = " / ".join(f"{r.normalized:.2f}" for r in fits)
    return f"{scores} | {fits[0].detected_windows} | {fits[0].false_positive_rows}"


def with_context(base: list[Components], ctx: list[FloatArray]) -> list[Components]:
    """The committed parts with ``ctx`` as their context, rescaled so that ``nab.fuse``'s fixed
    weight (2.67) times it equals the label-free rule's weight for ``ctx`` times it."""
    rule = nab_cv.context_weight([p.likelihood for p in base], [p.range for p in base], ctx)
    ratio = rule / ContextConfig().context_weight
    return [replace(p, context=ratio * z) for p, z in zip(base, ctx, strict=True)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    nab.add_data_argument(parser)
    parser.add_argument("--cache", type=Path, default=None, help="cache of per-file z scores")
    args = parser.parse_args(argv)
    args.data = nab.require_corpus(args.data)
    corpus = nab.load_corpus(args.data)
    profiles = nab_score.load_profiles(args.data / "config" / "profiles.json")
    with multiprocessing.Pool(2) as pool:
        jobs = [("forecast", "base"), ("context", CONTEXT), ("seasonal", "")]
        series = {j: pool.map(nab_cv._series, [(f, *j, args.cache) for f in corpus]) for j in jobs}
        ahead = pool.map(_file_range, [(f, args.cache) for f in corpus])
    base = nab_round3.committed_components(series)
    causal = [p.context for p in base]
    weight = nab_cv.context_weight([p.likelihood for p in base], [p.range for p in base], ahead)
    print(f"label-free context weight with the file's range: {weight:.3f} (causal: 2.67)")
    print("| # | context novelty alone | in-sample std / low-FP / low-FN | windows hit | FP rows |")
    print("|---|---|---|---|---|")
    print(f"| | range seen so far (committed) | {context_alone(corpus, causal, profiles)} |")
    print(f"| 105 | whole file's range (look-ahead) | {context_alone(corpus, ahead, profiles)} |")
    print()
    print(
        "| # | likelihoodContextSeasonal | in-sample std / low-FP / low-FN | windows hit "
        "| FP rows | thresholds CV'd std, parity / blocks | selection CV'd, stitched std, "
        "parity / blocks | combined std, parity / blocks |"
    )
    print("|---|---|---|---|---|---|---|---|")
    cfg = SeasonalConfig()
    for number, label, parts in (
        ("", "range seen so far (committed)", base),
        ("106", "whole file's range (look-ahead)", with_context(base, ahead)),
    ):
        cells = nab_round3.judge(corpus, parts, cfg, profiles)
        print(f"| {number} | {label} | " + " | ".join(cells) + " |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
