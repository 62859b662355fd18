"""Figure 3: retrieval recall by entity popularity on EntityQuestions.

    python scripts/entity_popularity.py \
        --passages ../shared/data/squad-open/passages.jsonl --eq-dir ../shared/data/qa/eq \
        --retrieval passage=logs/evaluate/multiruns/X/0/retrieval.json \
        --retrieval proposition=logs/evaluate/multiruns/X/2/retrieval.json \
        --k 5 20 --scheme log --out-dir reports/popularity

A `--retrieval` without `name=` takes its granularity from the job's results.jsonl. Records
join questions by id (`eq-P19-0`: --id-prefix is the dataset config's name, `eq`); files
without ids fall back to question text and fail on ambiguous duplicate questions.
Writes question_popularity.csv, popularity_recall.csv/.png and a manifest to --out-dir.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def _parse_retrieval(spec: str) -> tuple[str, str]:
    if "=" in spec:
        name, path = spec.split("=", 1)
        return name, path
    from densex.report.plots import job_labels

    return job_labels(Path(spec).parent)["granularity"], spec


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--passages", required=True, help="passages JSONL (id, title, text) for BM25")
    p.add_argument("--eq-dir", required=True, help="directory of EntityQuestions P*.test.json")
    p.add_argument("--retrieval", action="append", default=[], metavar="[NAME=]RETRIEVAL_JSON")
    p.add_argument("--k", type=int, nargs="+", default=[20], help="recall@k cut-offs")
    p.add_argument("--bm25-k", type=int, default=1000, help="passages counted per entity")
    p.add_argument("--bm25-k1", type=float, default=1.5, help="BM25 k1 (bm25s default)")
    p.add_argument("--bm25-b", type=float, default=0.75, help="BM25 b (bm25s default)")
    p.add_argument("--scheme", choices=["log", "quantile"], default="log")
    p.add_argument("--buckets", type=int, default=5, help="bucket count for --scheme quantile")
    p.add_argument("--base", type=float, default=10.0, help="bucket ratio for --scheme log")
    p.add_argument(
        "--id-prefix",
        default="eq",
        help="question id prefix: the dataset config name the retrievals were run with",
    )
    p.add_argument(
        "--on-short",
        choices=["warn", "raise"],
        default="warn",
        help="a retrieval with fewer contexts than max --k: warn (counted as misses) or fail",
    )
    p.add_argument("--out-dir", required=True)
    args = p.parse_args(argv)

    from rich.console import Console
    from rich.table import Table

    from densex.analysis.popularity import run_popularity

    retrievals = dict(_parse_retrieval(s) for s in args.retrieval)
    result = run_popularity(
        args.passages,
        args.eq_dir,
        retrievals,
        args.out_dir,
        args.k,
        args.bm25_k,
        args.scheme,
        args.buckets,
        args.base,
        id_prefix=args.id_prefix,
        on_short=args.on_short,
        bm25_k1=args.bm25_k1,
        bm25_b=args.bm25_b,
    )
    table = Table(title=f"EntityQuestions recall by popularity ({len(result.questions)} questions)")
    for col in ["granularity", "label", "n", *[f"recall@{k}" for k in args.k]]:
        table.add_column(col)
    for row in result.table:
        table.add_row(
            *[str(row[c]) for c in ["granularity", "label", "n"]],
            *[f"{row[f'recall@{k}']:.1f}" for k in args.k],
        )
    Console().print(table)
    print(f"wrote {args.out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
