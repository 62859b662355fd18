"""Tables and analysis of one or more finished evaluate sweeps (what the sweep callbacks write).

    python scripts/analyze_sweep.py logs/squad-open/multiruns/X [--ks 5 20] \
        [--resamples 10000] [--seed 0] [--alpha 0.05] [--popularity question_popularity.csv]

Reads every `results.jsonl` (and `per_question.jsonl`) under DIR, at any depth, so several
sweeps (e.g. granularities, `fusion=rrf`, `fusion=hybrid`) collected under one folder are
compared together. Writes into DIR: table2.md/.csv (with significance markers), table3 when
cells have EM, significance.csv, winloss.md/.csv, gold_metrics.md/.csv. `--popularity` takes
`scripts/entity_popularity.py`'s question_popularity.csv (EntityQuestions).
"""

from __future__ import annotations

import argparse
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("sweep_dir", type=Path)
    p.add_argument("--ks", type=int, nargs="+", default=[5, 20])
    p.add_argument("--resamples", type=int, default=10_000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--alpha", type=float, default=0.05)
    p.add_argument("--popularity", type=Path, default=None)
    args = p.parse_args(argv)

    from densex.analysis.sweep import analyze_sweep
    from densex.report.aggregate import aggregate_sweep

    aggregate_sweep(args.sweep_dir, None, args.ks)
    written = analyze_sweep(
        args.sweep_dir, args.ks, args.resamples, args.seed, args.alpha, args.popularity
    )
    for name, path in written.items():
        print(f"{name}: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
