"""Metrics that exist only when defined (issue 24): a dataset without answer strings (BEIR)
has no recall@k / answer recall / EM; Table 2, the significance markers and win/loss use the
metrics the cells have, and say which. Synthetic rows and per-question files (milliseconds)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest

from densex.analysis.per_question import per_question_rows, read_per_question, write_per_question
from densex.analysis.sweep import analyze_sweep
from densex.analysis.sweep_winloss import winloss_metrics
from densex.report.table2 import table2_rows, write_table2
from densex.report.table2_metrics import table2_metrics
from densex.utils.io import DataError


def _answer_row(g: str, r5: float, r20: float) -> dict:
    return {"corpus": "c", "retriever": "bm25", "granularity": g, "dataset": "nq",
            "recall@5": r5, "recall@20": r20, "ndcg@10": 1.0, "mrr@10": 1.0}  # fmt: skip


def _gold_row(g: str, ndcg: float, mrr: float) -> dict:
    return {"corpus": "c", "retriever": "bm25", "granularity": g, "dataset": "beir",
            "ndcg@10": ndcg, "mrr@10": mrr, "gold_recall@5": 50.0, "gold_recall@20": 70.0}  # fmt: skip


ROWS = [
    _answer_row("passage", 40.0, 60.0),
    _answer_row("proposition", 50.0, 65.0),
    _gold_row("passage", 30.0, 25.0),
    _gold_row("proposition", 36.0, 31.0),
]


def test_each_dataset_gets_the_metrics_its_cells_have():
    metrics = table2_metrics(ROWS, (5, 20))
    assert metrics["nq"] == [("R@5", "recall@5"), ("R@20", "recall@20")]  # qrels too: recall
    assert metrics["beir"] == [("nDCG@10", "ndcg@10"), ("MRR@10", "mrr@10"),
                               ("gR@5", "gold_recall@5"), ("gR@20", "gold_recall@20")]  # fmt: skip
    table = table2_rows(ROWS)
    passage, proposition, gain = table
    assert passage["beir nDCG@10"] == 30.0 and "beir R@5" not in passage
    assert passage["nq R@5"] == 40.0 and "nq nDCG@10" not in passage
    assert gain["beir MRR@10"] == pytest.approx(6.0) and gain["nq R@20"] == pytest.approx(5.0)
    assert not [c for c in passage if c.startswith("Avg ")]  # no metric both datasets have


def test_a_row_missing_its_datasets_metric_is_an_error():
    bad = [*ROWS, {**_gold_row("sentence", 1.0, 1.0), "mrr@10": None}]
    bad[-1].pop("mrr@10")
    with pytest.raises(DataError, match="mrr@10"):
        table2_rows(bad)


def test_table2_md_says_which_metrics(tmp_path: Path):
    write_table2(ROWS, tmp_path)
    text = (tmp_path / "table2.md").read_text(encoding="utf-8")
    first = text.splitlines()[0]
    assert "beir (no answer strings): nDCG@10, MRR@10" in first
    assert "| NQ R@5 | NQ R@20 | beir nDCG@10 | beir MRR@10 | beir gR@5 | beir gR@20 |" in text
    assert "| Bm25 |" not in text and "| 30.0 | 25.0 |" in text


def test_per_question_rows_without_answers_have_no_hit_columns():
    qs = [
        {"id": "a", "question": "x?", "answers": []},
        {"id": "b", "question": "y?", "answers": []},
    ]
    rows = per_question_rows(qs, None, [5, 20], {"rr@10": [1.0, 0.0]})
    assert rows == [
        {"id": "a", "question": "x?", "answers": [], "rr@10": 1.0},
        {"id": "b", "question": "y?", "answers": [], "rr@10": 0.0},
    ]


def _cell(d: Path, granularity: str, rr: list[float]) -> None:
    d.mkdir(parents=True)
    qs = [{"id": f"q{i}", "question": f"Query number {i}", "answers": []} for i in range(len(rr))]
    write_per_question(d, per_question_rows(qs, None, [5, 20], {"rr@10": rr}))
    row = {**_gold_row(granularity, 100 * float(np.mean(rr)), 100 * float(np.mean(rr))),
           "reader": "none", "index": "flat", "budget": 100}  # fmt: skip
    (d / "results.jsonl").write_text(json.dumps(row) + "\n")


def test_answerless_sweep_tests_and_compares_mrr(tmp_path: Path):
    """BEIR-like cells: the significance test, Table 2's markers and win/loss run on MRR@10
    (`rr@10`), the metric the cells have; no hit@k row appears anywhere."""
    rng = np.random.default_rng(0)
    base = (rng.random(200) < 0.4).astype(float) * 0.5
    better = base.copy()
    better[np.flatnonzero(base == 0)[:60]] = 1.0  # 60 more questions find gold at rank 1
    _cell(tmp_path / "0", "passage", base.tolist())
    _cell(tmp_path / "1", "proposition", better.tolist())
    assert winloss_metrics(read_per_question(tmp_path / "0"), (5, 20)) == ["rr@10"]
    analyze_sweep(tmp_path, ks=(5, 20), n_resamples=2000, seed=0)
    with open(tmp_path / "significance.csv", encoding="utf-8") as f:
        sig = list(csv.DictReader(f))
    # the report vocabulary (densex.report.naming): MRR@10, as the tables name it
    assert [r["metric"] for r in sig] == ["MRR@10"] and float(sig[0]["diff"]) == 30.0
    table = (tmp_path / "table2.md").read_text(encoding="utf-8")
    assert "| proposition | " in table and "†" in table  # MRR@10 above passage, marked
    winloss = (tmp_path / "winloss.csv").read_text(encoding="utf-8")
    assert (
        ",MRR@10," in winloss and "hit@" not in winloss and "R@" not in winloss.replace("MRR@", "")
    )


def test_no_answers_and_no_qrels_fails_in_preflight(tmp_path: Path):
    """Queries without answer strings and a dataset without qrels: no metric is defined, so
    preflight stops the cell before any work, naming the file and the fix."""
    from densex.pipelines.preflight.hub import PreflightError
    from densex.pipelines.preflight.run import preflight
    from helpers.config import compose_config

    (tmp_path / "corpus.jsonl").write_text('{"_id": "d1", "title": "T", "text": "A fact."}\n')
    (tmp_path / "queries.jsonl").write_text('{"_id": "q1", "text": "Which fact?"}\n')
    cfg = compose_config("evaluate", "corpus=beir", "dataset=beir", f"corpus.dir={tmp_path}",
                         "dataset.qrels.path=null", "retriever=bm25")  # fmt: skip
    with pytest.raises(PreflightError, match=r"queries\.jsonl: the questions have no answer"
                       r" strings and the dataset no qrels.*dataset\.qrels\.path=FILE"):  # fmt: skip
        preflight(cfg, "evaluate")
