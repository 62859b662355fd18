"""`gold_metrics.md` / `.csv`: a sweep's answer-string recall beside its gold-passage rank
metrics (MRR@10, nDCG@10, gold recall@k), for datasets with qrels."""

from __future__ import annotations

import csv
import os
from collections.abc import Sequence
from pathlib import Path

from densex.analysis.cells import BLOCK_FIELDS, cell_label
from densex.report.naming import labelled, metric_label
from densex.utils.io import atomic_open
from densex.utils.records import Record

GOLD_COLUMNS = ("recall@5", "recall@20", "gold_recall@5", "gold_recall@20", "mrr@10", "ndcg@10")


def write_gold_table(rows: Sequence[Record], out_dir: str | os.PathLike) -> Path | None:
    """`gold_metrics.md` / `.csv`: answer-string recall beside the gold-passage metrics, one
    line per cell with `mrr@10`; None when no cell has gold passages."""
    cells = [r for r in rows if r.get("mrr@10") is not None]
    if not cells:
        return None
    seen, lines = set(), []
    for r in cells:
        key = tuple(cell_label(r.get(f)) for f in (*BLOCK_FIELDS, "granularity"))
        if key not in seen:
            seen.add(key)
            lines.append(r)
    cols = [c for c in GOLD_COLUMNS if any(c in r for r in lines)]
    out = Path(out_dir)
    names = ("retriever", "granularity", "dataset")
    with atomic_open(out / "gold_metrics.csv") as f:  # the report vocabulary (naming)
        w = csv.writer(f, lineterminator="\n")
        w.writerow([*names, *(metric_label(c) for c in cols)])
        for r in lines:
            shown = labelled({n: r[n] for n in names})
            w.writerow([*shown.values(), *(r.get(c, "") for c in cols)])
    md = [
        "Answer-string recall R@k (DPR has_answer) beside rank metrics against the gold"
        " passages (gR@k: gold recall, MRR@10, nDCG@10), in %.\n",
        "| Retriever | Granularity | Dataset | " + " | ".join(metric_label(c) for c in cols) + " |",
        "|---|---|---|" + "---:|" * len(cols),
    ]
    for r in lines:
        x = labelled({n: r[n] for n in names})
        vals = [f"{float(r[c]):.1f}" if r.get(c) is not None else "–" for c in cols]
        md.append(f"| {x['retriever']} | {x['granularity']} | {x['dataset']} | "
                  + " | ".join(vals) + " |")  # fmt: skip
    with atomic_open(out / "gold_metrics.md") as f:
        f.write("\n".join(md) + "\n")
    return out / "gold_metrics.md"
