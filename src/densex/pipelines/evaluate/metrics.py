"""The metrics of one evaluate cell beyond the retrieval files: recall@k from the has_answer
matrix, gold-passage ranking metrics (datasets with qrels) and QA under the word budget.

Contract: metrics are percentages, as in the paper's tables; per-question columns go into the
`per_q` dict the caller passes (for `per_question.jsonl`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from omegaconf import DictConfig

from densex.data.qrels import load_dataset_qrels
from densex.metrics.rank import gold_columns, gold_metrics
from densex.pipelines.edge import build_reader, dataset_spec
from densex.pipelines.evaluate.cell import Cell
from densex.qa.cell import qa_metrics


def recall_at_each_k(hits: np.ndarray) -> np.ndarray:
    """recall@k for k = 1..K from a [n_questions, K] has_answer matrix (rank order)."""
    if hits.size == 0:
        return np.zeros(hits.shape[1] if hits.ndim == 2 else 0)
    return np.logical_or.accumulate(hits, axis=1).mean(axis=0)


def cell_gold_metrics(cfg, passages, questions, results, topk, per_q) -> dict[str, Any]:
    """MRR@10, nDCG@10, gold_recall@k (percent) against the dataset's `qrels` (when it has
    any); per-question gold rank / rr@10 / ndcg@10 go into `per_q`."""

    qrels = load_dataset_qrels(dataset_spec(cfg.dataset), list(passages.iter_rows(("id", "text"))))
    if qrels is None:
        return {}
    ranked = [passages.take("id", r.passage_rows) for r in results]
    gold = [qrels.get(str(q.get("id")), {}) for q in questions]
    per_q.update(gold_columns(ranked, gold))
    return gold_metrics(ranked, gold, ks=topk)


def cell_qa_metrics(
    cfg: DictConfig, cell: Cell, questions, results, out_dir: Path, per_q
) -> dict[str, Any]:
    """Answer recall by words and (with a reader) EM@budget over each question's ranked units,
    also on the short-answer questions (`dataset.short_answer_words`); only the units within
    the words QA reads are fetched."""

    budget, max_words = int(cfg.budget), int(cfg.get("recall_curve_max_words", 500))
    need = max(budget, max_words)
    ranked_unit_texts = []
    for r in results:
        rows = r.unit_rows
        covered = np.cumsum(cell.unit_words[rows]) if len(rows) else np.zeros(0, np.int64)
        keep = int(np.searchsorted(covered, need, side="left")) + 1  # through the unit reaching it
        ranked_unit_texts.append(cell.units.take("text", rows[:keep]))
    qa = qa_metrics(
        questions,
        ranked_unit_texts,
        build_reader(cfg.get("reader")),
        budget,
        max_words,
        out_dir,
        match_type=str(cfg.dataset.match),
        per_question=per_q,
        short_answer_words=dataset_spec(cfg.dataset).short_answer_words,
    )
    return qa or {}
