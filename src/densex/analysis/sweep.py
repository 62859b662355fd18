"""A finished sweep's analysis: paired significance between its cells, win/loss by question
type, and the gold-passage rank metrics, written beside Table 2/3 (`analyze_sweep`).

Cells are compared within a block that shares everything but the granularity (corpus, index,
retriever, dataset; plus reader and budget for EM@l): every granularity against each of the
baselines `passage`, `sentence`, `proposition` that precedes it in the table's order, on every
metric the tables report (`sweep_significance`: R@k at every cut-off, AR@l, MRR@10, nDCG@10,
EM@l), under one decision rule (`sweep_significance.decision_rule`: the paired randomization
test decides, the bootstrap CI is shown beside it). Outputs in the sweep dir, every one in the
report vocabulary of `report.naming`:
- `significance.csv`: one row per (block, a, b, metric): n, means, diff (points), 95% bootstrap
  CI, the randomization p-value (exact or resampled), `significant`;
- `table2.md` / `table3.md` rewritten with markers (`†` better than passage, `‡` better than
  sentence; `*`/`**` on the Δ row: p < alpha / alpha/5), the rule and the comparisons under the
  table;
- `winloss.csv` / `winloss.md`: wins/losses of a vs b per bucket (question length, answer type,
  entity popularity) with example questions;
- `gold_metrics.md` / `.csv` when cells carry MRR@10 / nDCG@10 (datasets with qrels).
Each output has its module (`cells`, `sweep_significance`, `sweep_winloss`, `gold_table`); this
one runs them in order.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from densex.analysis.gold_table import write_gold_table
from densex.analysis.per_question import load_popularity
from densex.analysis.significance import N_RESAMPLES
from densex.analysis.sweep_significance import (
    comparisons_markdown,
    decision_rule,
    sweep_significance,
    table2_marks,
    table3_marks,
    write_significance,
)
from densex.analysis.sweep_winloss import sweep_winloss, write_winloss
from densex.report.naming import answer_recall_metrics
from densex.report.table2 import find_results, load_results, table2_rows, write_table2
from densex.report.table2_metrics import full_metrics
from densex.report.table3 import table3_rows, write_table3
from densex.utils.logging import get_logger

log = get_logger(__name__)


def analyze_sweep(
    sweep_dir: str | os.PathLike,
    ks: Sequence[int] | None = None,
    n_resamples: int = N_RESAMPLES,
    seed: int = 0,
    alpha: float = 0.05,
    popularity: str | os.PathLike | None = None,
) -> dict[str, Any]:
    """Write the sweep's significance, win/loss and gold tables, and Table 2/3 with markers.
    `ks`: Table 2's cut-offs (None: every cut-off the cells computed)."""

    sweep_dir = Path(sweep_dir)
    paths = find_results(sweep_dir)
    if not paths:
        log.warning("no results.jsonl under %s: nothing to analyse", sweep_dir)
        return {}
    rows = load_results(paths)
    # cut-offs some cell has: answer recall@k, or gold recall@k (no answer strings: BEIR)
    found = sorted({int(k.split("@")[1]) for r in rows for k in r
                    if k.startswith(("recall@", "gold_recall@"))})  # fmt: skip
    shown = None if ks is None else [k for k in ks if k in found]  # Table 2's cut-offs
    ks = [k for k in (found if ks is None else ks) if k in found]
    full = table2_rows(rows, metrics=full_metrics(rows))  # reads AR@l from the cells' curves
    ar = answer_recall_metrics(full[0] if full else {})
    words = [int(m[3:]) for m in ar if m[3:].isdigit()]  # AR@l on all questions
    short = [m for m in ar if not m[3:].isdigit()]  # ... and on the short-answer questions
    written: dict[str, Any] = {}
    sig = sweep_significance(rows, ks, n_resamples, seed, words=words, answer_metrics=short)
    written["significance"] = write_significance(sig, sweep_dir, alpha)
    legend = decision_rule(alpha, n_resamples)
    if ks:
        table = table2_rows(rows, shown)
        notes = comparisons_markdown(sig, alpha)
        marks = {**table2_marks(sig, table, alpha), **table2_marks(sig, full, alpha)}
        write_table2(rows, sweep_dir, shown, marks, legend + notes if notes else None)
        written["table2"] = sweep_dir / "table2.md"
    if any(str(k).startswith("em@") for r in rows for k in r):
        header, _ = table3_rows(rows)
        notes = comparisons_markdown(sig, alpha, ("em@",))
        written["table3"] = write_table3(
            rows, sweep_dir, table3_marks(sig, header, alpha), legend + notes if notes else None
        )
    pop = load_popularity(popularity) if popularity else None
    wl = sweep_winloss(rows, ks, pop)
    if wl:
        written["winloss"] = write_winloss(wl, sweep_dir)
    gold = write_gold_table(rows, sweep_dir)
    if gold:
        written["gold"] = gold
    log.info("analysis: %d paired tests, %d win/loss rows in %s", len(sig), len(wl), sweep_dir)
    return written
