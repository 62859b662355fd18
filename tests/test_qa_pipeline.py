"""Issue 5 end to end: `evaluate.py` cells with a (tiny, local) reader add EM@l to their row,
and a budget sweep ends with the paper's Table 3 in the sweep dir."""

from __future__ import annotations

import csv
import json

import pytest

from densex.metrics.answers import exact_match
from densex.report.table2 import find_results
from densex.utils.io import read_json
from helpers.config import compose_config
from helpers.inproc import run_script


def test_budget_sweep_with_reader_writes_em_and_table3(
    repo_root, minilm_path, demo_cache_copy, tmp_path, capfd
):
    """`evaluate.py -m` run in this process (Hydra's multirun and its callbacks), on a copy of
    the demo sweep's encoded units (`demo_cache_copy`: nothing encoded again)."""
    sweep = tmp_path / "sweep"
    status = run_script(
        "evaluate.py",
        "-m",
        "corpus=demo",
        "dataset=demo",
        "retriever=minilm",
        "granularity=proposition",
        "reader=tiny",
        "budget=100,500",
        "limit_questions=24",
        "topk=[1,5,20]",
        "hydra.callbacks.aggregate.ks=[1,5]",
        "trainer.enable_progress_bar=false",
        f"paths.cache_dir={demo_cache_copy}",
        f"hydra.sweep.dir={sweep}",
    )
    assert status == 0, capfd.readouterr().err[-4000:]

    cells = [p.parent for p in find_results(sweep)]  # `0_budget=100,...`: in job order
    rows = [json.loads((cells[i] / "results.jsonl").read_text()) for i in range(2)]
    assert [r["budget"] for r in rows] == [100, 500]
    for row in rows:
        assert row["reader"] == "tiny" and row["n_questions"] == 24
        preds = (cells[rows.index(row)] / "reader_predictions.jsonl").read_text()
        preds = [json.loads(line) for line in preds.splitlines()]
        assert len(preds) == 24
        # EM@l: SQuAD EM of the written predictions against their gold answers, in percent
        em = [exact_match(p["prediction"], p["answers"]) for p in preds]
        assert row[f"em@{row['budget']}"] == pytest.approx(100.0 * sum(em) / 24, abs=1e-4)
        # the answer-recall curve of the cell: words 0..500, percent, non-decreasing
        with open(cells[rows.index(row)] / "answer_recall_by_words.csv") as f:
            curve = [(int(r["words"]), float(r["recall"])) for r in csv.DictReader(f)]
        assert curve[0] == (0, 0.0) and curve[-1][0] == 500
        assert all(a[1] <= b[1] for a, b in zip(curve, curve[1:]))
        assert curve[100][1] == row["answer_recall@100"]

    table3 = (sweep / "table3.md").read_text()
    assert "EM@100" in table3 and "EM@500" in table3
    with open(sweep / "table3.csv") as f:
        (line,) = list(csv.DictReader(f))
    assert line["granularity"] == "proposition"
    assert float(line["demo EM@100"]) == rows[0]["em@100"]
    assert float(line["demo EM@500"]) == rows[1]["em@500"]


def test_curated_regex_cell_counts_patterns_that_never_match(repo_root, shared_data, tmp_path):
    """CuratedTREC's answers are regexes; three of them break under DPR's NFD normalisation and
    never match (as in DPR). The cell keeps those questions and says how many there are."""

    from densex.pipelines.evaluate.run import run

    cfg = compose_config(
        "evaluate",
        "corpus=demo",
        "dataset=curated",
        f"dataset.path={shared_data}/qa/curated/curated-test.dpr.jsonl",
        "retriever=bm25",
        "granularity=passage",
        "limit_questions=200",  # lines 1-200 hold one such pattern (line 159)
        "topk=[1,5]",
        f"paths.cache_dir={tmp_path / 'cache'}",
        f"paths.output_dir={tmp_path / 'run'}",
    )
    run(cfg)
    row = json.loads((tmp_path / "run" / "results.jsonl").read_text())
    assert row["n_questions"] == 200
    assert row["n_unmatchable_answers"] == 1
    retrieval = read_json(tmp_path / "run" / "retrieval.json.gz")
    assert not any(c["has_answer"] for c in retrieval[158]["ctxs"])
