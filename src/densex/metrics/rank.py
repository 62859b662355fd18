"""Rank metrics against gold passages (qrels): MRR@k, nDCG@k, recall@k, first gold rank.

`ranked` is one question's retrieved passage ids, best first; `qrels` maps the passage ids
that are relevant to a graded relevance (> 0; 0 or absent = not relevant), as TREC/BEIR
qrels do. Definitions follow trec_eval (and so pytrec_eval / ranx): nDCG uses the linear
gain `rel / log2(rank + 1)` and the ideal DCG of the top-k qrels; recall@k is the share of
relevant passages found in the top k; MRR@k is 1 / rank of the first relevant passage
within k (0 otherwise). Questions without any relevant passage are skipped by callers
(trec_eval ignores queries absent from the qrels).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence


def _relevant(qrels: Mapping[str, float]) -> dict[str, float]:
    return {d: float(r) for d, r in qrels.items() if float(r) > 0}


def first_relevant_rank(ranked: Sequence[str], qrels: Mapping[str, float]) -> int | None:
    """1-based rank of the first relevant passage in `ranked`, or None."""
    rel = _relevant(qrels)
    return next((i + 1 for i, d in enumerate(ranked) if d in rel), None)


def mrr_at_k(ranked: Sequence[str], qrels: Mapping[str, float], k: int) -> float:
    """Reciprocal rank of the first relevant passage within the top k (0 if none)."""
    r = first_relevant_rank(ranked[:k], qrels)
    return 0.0 if r is None else 1.0 / r


def ndcg_at_k(ranked: Sequence[str], qrels: Mapping[str, float], k: int) -> float:
    """nDCG@k with linear gains (trec_eval's `ndcg_cut_k`); 0 when nothing is relevant."""
    rel = _relevant(qrels)
    if not rel:
        return 0.0
    seen: set[str] = set()
    dcg = 0.0
    for i, d in enumerate(ranked[:k]):
        if d in rel and d not in seen:
            dcg += rel[d] / math.log2(i + 2)
        seen.add(d)
    ideal = sorted(rel.values(), reverse=True)[:k]
    idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
    return dcg / idcg


def recall_at_k(ranked: Sequence[str], qrels: Mapping[str, float], k: int) -> float:
    """Share of the relevant passages retrieved in the top k (0 when nothing is relevant)."""
    rel = _relevant(qrels)
    if not rel:
        return 0.0
    return len(set(ranked[:k]) & rel.keys()) / len(rel)


def gold_metrics(
    ranked: Sequence[Sequence[str]],
    qrels: Sequence[Mapping[str, float]],
    ks: Sequence[int] = (5, 20, 100),
    mrr_k: int = 10,
    ndcg_k: int = 10,
) -> dict[str, float]:
    """Mean `mrr@{mrr_k}`, `ndcg@{ndcg_k}` and `gold_recall@k` (percent) over the questions
    that have a relevant passage, plus `n_gold_questions`. `ranked[i]` and `qrels[i]` are
    aligned per question."""
    if len(ranked) != len(qrels):
        raise ValueError(f"{len(ranked)} rankings but {len(qrels)} qrels")
    pairs = [(r, q) for r, q in zip(ranked, qrels) if _relevant(q)]
    n = len(pairs)
    out: dict[str, float] = {"n_gold_questions": n}
    if not n:
        return out
    out[f"mrr@{mrr_k}"] = round(100.0 * sum(mrr_at_k(r, q, mrr_k) for r, q in pairs) / n, 4)
    out[f"ndcg@{ndcg_k}"] = round(100.0 * sum(ndcg_at_k(r, q, ndcg_k) for r, q in pairs) / n, 4)
    for k in ks:
        out[f"gold_recall@{k}"] = round(100.0 * sum(recall_at_k(r, q, k) for r, q in pairs) / n, 4)
    return out


def gold_columns(
    ranked: Sequence[Sequence[str]],
    qrels: Sequence[Mapping[str, float]],
    mrr_k: int = 10,
    ndcg_k: int = 10,
) -> dict[str, list]:
    """Per-question `gold_rank` (None = no relevant passage retrieved), `rr@{mrr_k}` and
    `ndcg@{ndcg_k}` (None where the question has no relevant passage)."""
    cols: dict[str, list] = {"gold_rank": [], f"rr@{mrr_k}": [], f"ndcg@{ndcg_k}": []}
    for r, q in zip(ranked, qrels):
        has = bool(_relevant(q))
        cols["gold_rank"].append(first_relevant_rank(r, q) if has else None)
        cols[f"rr@{mrr_k}"].append(round(mrr_at_k(r, q, mrr_k), 6) if has else None)
        cols[f"ndcg@{ndcg_k}"].append(round(ndcg_at_k(r, q, ndcg_k), 6) if has else None)
    return cols
