"""MRR@k / nDCG@k / recall@k against gold passages: hand cases and pytrec_eval."""

from __future__ import annotations

import math

import numpy as np
import pytest

from densex.metrics.rank import (
    first_relevant_rank,
    gold_columns,
    gold_metrics,
    mrr_at_k,
    ndcg_at_k,
    recall_at_k,
)
from helpers.requires import require_module


def test_hand_computed():
    ranked = ["d3", "d1", "d7", "d2"]
    qrels = {"d1": 1, "d2": 2, "d9": 0}
    assert first_relevant_rank(ranked, qrels) == 2
    assert mrr_at_k(ranked, qrels, 10) == 0.5
    assert mrr_at_k(ranked, qrels, 1) == 0.0
    dcg = 1 / math.log2(3) + 2 / math.log2(5)
    idcg = 2 / math.log2(2) + 1 / math.log2(3)
    assert ndcg_at_k(ranked, qrels, 10) == pytest.approx(dcg / idcg)
    assert recall_at_k(ranked, qrels, 2) == 0.5
    assert recall_at_k(ranked, qrels, 4) == 1.0
    assert ndcg_at_k(ranked, {"x": 0}, 10) == 0.0


def test_gold_metrics_skip_questions_without_gold():
    m = gold_metrics([["a", "b"], ["c"]], [{"b": 1}, {}], ks=(1, 2))
    assert m == {
        "n_gold_questions": 1,
        "mrr@10": 50.0,
        "ndcg@10": pytest.approx(100 / math.log2(3), abs=1e-3),
        "gold_recall@1": 0.0,
        "gold_recall@2": 100.0,
    }
    cols = gold_columns([["a", "b"], ["c"]], [{"b": 1}, {}])
    assert cols["gold_rank"] == [2, None] and cols["rr@10"] == [0.5, None]


def test_against_pytrec_eval():
    pytrec_eval = require_module("pytrec_eval", "pytrec-eval-terrier>=0.5.6")
    rng = np.random.default_rng(0)
    docs = [f"d{i}" for i in range(60)]
    run, qrels, ranked, gold = {}, {}, [], []
    for q in range(40):
        order = rng.permutation(len(docs))[:30]
        ids = [docs[i] for i in order]
        # distinct descending scores so trec_eval's order is ours
        run[f"q{q}"] = {d: float(100 - r) for r, d in enumerate(ids)}
        rel = {docs[i]: int(rng.integers(1, 3)) for i in rng.choice(len(docs), 3, replace=False)}
        qrels[f"q{q}"] = rel
        ranked.append(ids)
        gold.append(rel)
    # recip_rank has no cut-off in trec_eval: give it the top-10 run for MRR@10
    top10 = {q: dict(list(r.items())[:10]) for q, r in run.items()}
    ev = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10", "recall.5,20"})
    rr = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank"}).evaluate(top10)
    res = ev.evaluate(run)
    for q, (r, g) in enumerate(zip(ranked, gold)):
        assert ndcg_at_k(r, g, 10) == pytest.approx(res[f"q{q}"]["ndcg_cut_10"], abs=1e-9)
        assert recall_at_k(r, g, 5) == pytest.approx(res[f"q{q}"]["recall_5"], abs=1e-9)
        assert recall_at_k(r, g, 20) == pytest.approx(res[f"q{q}"]["recall_20"], abs=1e-9)
        assert mrr_at_k(r, g, 10) == pytest.approx(rr[f"q{q}"]["recip_rank"], abs=1e-9)
    m = gold_metrics(ranked, gold, ks=(5, 20))
    mean_ndcg = np.mean([v["ndcg_cut_10"] for v in res.values()])
    assert m["ndcg@10"] == pytest.approx(100 * mean_ndcg, abs=1e-3)
    assert m["mrr@10"] == pytest.approx(
        100 * np.mean([v["recip_rank"] for v in rr.values()]), abs=1e-3
    )
