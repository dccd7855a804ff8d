"""How often and how high the two changepoint scorers fire on NAB, label-free.

    python bench/nab_score_spread.py --data PATH/TO/NAB   # ~1 min

The z units (before the holdoff and the score map) of ``projectChangepoint`` (ChangePoint)
and ``projectBocpd`` (BayesianChangePoint), configured as bench/nab.py streams them. Printed:
per NAB category the mean over its files of the share of rows at z >= 3, and over the whole
corpus the percentiles of the nonzero scores. Reads no label: it says how each scorer's
scores are spread, not which are right (bench/RESULTS.md "The Bayesian changepoint on NAB").
"""

from __future__ import annotations

import argparse
from collections import defaultdict

import numpy as np
from nab import add_data_argument, bocpd_z, load_corpus, project_z, require_corpus

PERCENTILES = (50, 90, 99, 99.9, 100)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_data_argument(parser)
    args = parser.parse_args(argv)
    args.data = require_corpus(args.data)
    share: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    nonzero: dict[str, list[np.ndarray]] = defaultdict(list)
    for f in load_corpus(args.data):
        scores = {"changepoint": project_z(f)[1], "bocpd": bocpd_z(f)}
        for name, z in scores.items():
            share[f.name.split("/")[0]][name].append(float((z >= 3.0).mean()))
            nonzero[name].append(z[z > 0.0])
    print("| category | changepoint: rows z >= 3 | bocpd: rows z >= 3 |")
    print("|---|---|---|")
    for category, by_name in share.items():
        cp, bo = (np.mean(by_name[n]) for n in ("changepoint", "bocpd"))
        print(f"| {category} | {cp:.1%} | {bo:.1%} |")
    print()
    print(f"| scorer | nonzero rows | percentiles {' / '.join(map(str, PERCENTILES))} |")
    print("|---|---|---|")
    for name, parts in nonzero.items():
        z = np.concatenate(parts)
        values = " / ".join(f"{v:.1f}" for v in np.percentile(z, PERCENTILES))
        print(f"| {name} | {z.size} | {values} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
