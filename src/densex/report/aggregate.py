"""A finished evaluate sweep turned into the paper's tables (`aggregate_sweep`).

Each job of `python evaluate.py -m ...` writes one `results.jsonl` row in its own subdir of the
sweep dir; at the end of the multirun (`pipelines.callbacks.AggregateResults`, a Hydra
callback) `aggregate_sweep` reads them all and writes, into the sweep dir:
`table2.md`/`table2.csv` (recall by retriever x granularity x dataset), Table 3 (EM@l) when
rows carry EM, and the answer-recall-vs-words plot. It works the same with any launcher
(basic, joblib, submitit) because it only reads files.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from densex.report.table2 import (
    find_results,
    full_metrics,
    load_results,
    print_table2,
    table2_rows,
    write_table2,
)
from densex.report.table3 import write_table3
from densex.report.wandb_log import init_run, log_files, log_table

log = logging.getLogger(__name__)


def aggregate_sweep(
    sweep_dir: str | Path,
    wandb: dict[str, Any] | None = None,
    ks: Sequence[int] | None = None,
) -> dict[str, Any]:
    """Write every table of a sweep dir; return what was written (paths, the table rows).

    `ks` are Table 2's recall cut-offs (None: every cut-off the jobs computed, R@1 first; the
    paper shows 5 and 20); `wandb` the `logger.wandb`
    settings as plain values (`pipelines.edge.wandb_settings`): the tables are logged to a W&B
    run too; None: no W&B.
    """
    sweep_dir = Path(sweep_dir)
    paths = find_results(sweep_dir)
    if not paths:
        log.warning("no results.jsonl under %s: nothing to aggregate", sweep_dir)
        return {"rows": [], "table2": []}
    rows = load_results(paths)
    # cut-offs no job computed (e.g. topk=[1,5] and ks=[5,20]) are left out, not an error
    # (answer recall@k, or gold recall@k for a dataset without answer strings)
    if ks is not None:
        ks = [k for k in ks if any(f"recall@{k}" in r or f"gold_recall@{k}" in r for r in rows)]
    ks = ks or None
    table = write_table2(rows, sweep_dir, ks)
    log.info("sweep %s: %d results rows", sweep_dir, len(rows))
    print_table2(table)
    full = table2_rows(rows, metrics=full_metrics(rows))
    print_table2(full, title="Every cut-off: R@k, AR@l words (or nDCG@10, MRR@10, gR@k), %")
    written: dict[str, Any] = {"rows": rows, "table2": table, "table2_md": sweep_dir / "table2.md"}

    if any(k.startswith("em@") for row in rows for k in row):
        written["table3"] = write_table3(rows, sweep_dir)
    job_dirs = [Path(r["job_dir"]) for r in rows]
    curve_dirs = [d for d in dict.fromkeys(job_dirs) if (d / "answer_recall_by_words.csv").exists()]
    if curve_dirs:
        # lazy: plots pulls matplotlib and qa.cell (torch, transformers: ~10 s) per sweep end
        from densex.report.plots import plot_answer_recall

        budgets = sorted({100, 500, *(int(r["budget"]) for r in rows if r.get("budget"))})
        written["plot"] = plot_answer_recall(
            curve_dirs, sweep_dir / "answer_recall_by_words.png", budgets=budgets
        )

    if wandb is not None:
        run = init_run(wandb, save_dir=sweep_dir, name="table2", job_type="aggregate")
        if run is not None:
            log_table(run, "table2", table)
            log_table(run, "table2_full", full)
            table3 = written.get("table3")
            log_files(
                run,
                images={"answer_recall_by_words": written.get("plot")},
                csvs={"table3": table3.with_suffix(".csv") if table3 else None},
            )
            run.finish()
    log.info("wrote %s (%d results rows)", sweep_dir / "table2.md", len(rows))
    return written
