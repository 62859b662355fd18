"""A finished sweep's analysis: paired significance between its cells, win/loss by question
type, and the gold-passage rank metrics, written beside Table 2/3 (`analyze_sweep`).

Cells are compared within a block that shares everything but the granularity (corpus, index,
retriever, dataset; plus reader and budget for EM@l): every granularity against each of the
baselines `passage`, `sentence`, `proposition` that precedes it in the table's order, on the
per-question `hit@k` (Table 2's cut-offs), `em@l` and, with gold passages, `rr@10` (MRR@10).
Outputs in the sweep dir:
- `significance.csv`: one row per (block, a, b, metric): n, means, diff (points), 95% bootstrap
  CI, bootstrap and randomization p-values;
- `table2.md` / `table3.md` rewritten with markers (`†` better than passage, `‡` better than
  sentence at p < alpha by the randomization test; `*`/`**` on the Δ row: p < alpha / alpha/5)
  and the comparisons listed under the table;
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
    sweep_significance,
    table2_marks,
    table3_marks,
    write_significance,
)
from densex.analysis.sweep_winloss import sweep_winloss, write_winloss
from densex.report.table2 import find_results, load_results, table2_rows, write_table2
from densex.report.table3 import table3_rows, write_table3
from densex.utils.logging import get_logger

log = get_logger(__name__)


def analyze_sweep(
    sweep_dir: str | os.PathLike,
    ks: Sequence[int] = (5, 20),
    n_resamples: int = N_RESAMPLES,
    seed: int = 0,
    alpha: float = 0.05,
    popularity: str | os.PathLike | None = None,
) -> dict[str, Any]:
    """Write the sweep's significance, win/loss and gold tables, and Table 2/3 with markers."""

    sweep_dir = Path(sweep_dir)
    paths = find_results(sweep_dir)
    if not paths:
        log.warning("no results.jsonl under %s: nothing to analyse", sweep_dir)
        return {}
    rows = load_results(paths)
    # cut-offs some cell has: answer recall@k, or gold recall@k (no answer strings: BEIR)
    ks = [k for k in ks if any(f"recall@{k}" in r or f"gold_recall@{k}" in r for r in rows)]
    written: dict[str, Any] = {}
    sig = sweep_significance(rows, ks, n_resamples, seed)
    written["significance"] = write_significance(sig, sweep_dir)
    legend = (
        f"Paired tests on the same questions ({n_resamples:,} seeded resamples): Δ = A − B in "
        f"points, 95% paired-bootstrap CI, bootstrap and randomization p-values. Markers "
        f"(randomization test): † better than passage, ‡ better than sentence at p < {alpha}; "
        f"on the Δ row * p < {alpha}, ** p < {alpha / 5:g}. No correction for multiple "
        "comparisons.\n\n"
    )
    if ks:
        table = table2_rows(rows, ks)
        notes = comparisons_markdown(sig, alpha)
        write_table2(rows, sweep_dir, ks, table2_marks(sig, table, alpha),
                     legend + notes if notes else None)  # fmt: skip
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
