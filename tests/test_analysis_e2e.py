"""Fused cells, per-question files, gold metrics and the sweep analysis, end to end on one real
SQuAD-open article (MiniLM); and a BEIR-layout fixture written from the same data."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from helpers.config import compose_config

ARTICLE = "1973_oil_crisis"


@pytest.fixture(scope="module")
def article(
    squad_open: Path, squad_open_article: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Path]:
    """One article's passages, propositions and (every other) question; a BEIR copy of them.
    The passages, propositions and cache are the session's `squad_open_article` (conftest):
    the units and embeddings `tests/test_pipelines.py` builds for it are read here."""
    out = tmp_path_factory.mktemp("article")
    passages = [json.loads(line) for line in squad_open_article["P"].read_text().splitlines()]
    assert {p["id"].split("#")[0] for p in passages} == {ARTICLE}
    questions = [json.loads(line) for line in squad_open_article["R"].read_text().splitlines()]
    questions = questions[:30]  # every other question of the article, the first 30
    files = {
        "passages": squad_open_article["P"],
        "propositions": squad_open_article["Q"],
        "questions": out / "questions.jsonl",
    }
    files["questions"].write_text("".join(json.dumps(r) + "\n" for r in questions))
    files["squad"] = squad_open / "squad-dev-v1.1.json"
    files["cache"] = squad_open_article["cache"]
    # the same corpus in BEIR's layout, gold passages from the SQuAD spans
    from densex.data.qrels import squad_qrels

    beir = out / "beir"
    (beir / "qrels").mkdir(parents=True)
    (beir / "corpus.jsonl").write_text(
        "".join(
            json.dumps({"_id": p["id"], "title": p["title"], "text": p["text"]}) + "\n"
            for p in passages
        )
    )
    (beir / "queries.jsonl").write_text(
        "".join(json.dumps({"_id": q["id"], "text": q["question"]}) + "\n" for q in questions)
        + json.dumps({"_id": "not-in-test", "text": "an unjudged query"})
        + "\n"
    )
    qrels = squad_qrels(files["squad"], passages).qrels
    lines = ["query-id\tcorpus-id\tscore"] + [
        f"{q['id']}\t{pid}\t{int(r)}" for q in questions for pid, r in qrels[q["id"]].items()
    ]
    (beir / "qrels" / "test.tsv").write_text("\n".join(lines) + "\n")
    files["beir"] = beir
    return files


def _cfg(repo_root: Path, overrides: list[str]):
    return compose_config("evaluate", *overrides)


def _squad_cell(a: dict[str, Path], out: Path, *extra: str) -> list[str]:
    return [
        "corpus=squad-open",
        f"corpus.passages={a['passages']}",
        f"corpus.propositions={a['propositions']}",
        "dataset=squad-open",
        f"dataset.path={a['questions']}",
        f"dataset.qrels.path={a['squad']}",
        "retriever=minilm",
        "topk=[1,5,20]",
        "retrieval_text=false",
        "trainer=cpu",
        "trainer.enable_progress_bar=false",
        f"paths.cache_dir={a['cache']}",
        f"paths.output_dir={out}",
        *extra,
    ]


@pytest.fixture(scope="module")
def sweep(repo_root, article, minilm_path, tmp_path_factory) -> Path:
    from densex.pipelines.evaluate.run import run

    root = tmp_path_factory.mktemp("sweep")
    cells = [
        ["granularity=passage"],
        ["granularity=sentence"],
        ["granularity=proposition"],
        ["granularity=mixed"],
        ["fusion=rrf"],
        ["fusion=hybrid", "granularity=proposition"],
    ]
    for i, extra in enumerate(cells):
        run(_cfg(repo_root, _squad_cell(article, root / str(i), *extra)))
    return root


def _row(d: Path) -> dict:
    return json.loads((d / "results.jsonl").read_text())


def _per_q(d: Path) -> list[dict]:
    return [json.loads(line) for line in (d / "per_question.jsonl").read_text().splitlines()]


# The README's "Beyond the paper" table, on this article's 30 questions (measured; MiniLM fp32,
# exact search, BM25 and RRF deterministic): R@1, R@5, R@20, MRR@10 and nDCG@10 against the
# gold chunk, answer recall within 100 words, per cell in the sweep's order
BEYOND_THE_PAPER = {
    "passage": (63.33, 96.67, 100.0, 71.62, 78.57, 63.33),
    "sentence": (90.0, 100.0, 100.0, 86.42, 89.71, 100.0),
    "proposition": (83.33, 96.67, 100.0, 88.15, 91.08, 86.67),
    "mixed": (93.33, 96.67, 100.0, 92.25, 94.07, 93.33),
    "rrf": (86.67, 100.0, 100.0, 87.22, 90.41, 86.67),
    "hybrid, proposition": (93.33, 100.0, 100.0, 95.0, 96.31, 86.67),
}
# paired bootstrap against passage (2,000 seeded resamples): (diff, 95% CI low, high)
BEYOND_THE_PAPER_DELTAS = {
    ("proposition", "hit@1"): (20.0, 3.33, 36.67),
    ("proposition", "rr@10"): (16.53, 4.13, 28.67),
    ("mixed", "hit@1"): (30.0, 10.0, 50.0),
    ("mixed", "rr@10"): (20.63, 7.08, 34.27),
}
CELL_NAMES = tuple(BEYOND_THE_PAPER)


def test_beyond_the_paper_table_on_one_article(sweep):
    """Mixed, RRF and hybrid cells beside the three granularities, and the paired CIs: the
    figures the README reports on all of squad-open (`slow`), pinned on one article."""
    from densex.analysis.sweep_significance import sweep_significance
    from densex.report.table2 import find_results, load_results

    cols = ("recall@1", "recall@5", "recall@20", "mrr@10", "ndcg@10", "answer_recall@100")
    got = {
        name: tuple(round(_row(sweep / str(i))[c], 2) for c in cols)
        for i, name in enumerate(CELL_NAMES)
    }
    for name, values in BEYOND_THE_PAPER.items():
        assert got[name] == pytest.approx(values, abs=0.01), (name, got[name])
    rows = [r for r in load_results(find_results(sweep)) if r.get("fusion") is None]
    sig = sweep_significance(rows, ks=(1, 5), n_resamples=2000, seed=0)
    deltas = {
        (r["a"], r["metric"]): (round(r["diff"], 2), round(r["ci_low"], 2), round(r["ci_high"], 2))
        for r in sig
        if r["b"] == "passage"
    }
    for key, values in BEYOND_THE_PAPER_DELTAS.items():
        assert deltas[key] == pytest.approx(values, abs=0.01), (key, deltas[key])


def test_cells_write_per_question_and_gold_metrics(sweep):
    rows = [_row(sweep / str(i)) for i in range(6)]
    assert [r["granularity"] for r in rows] == [
        "passage", "sentence", "proposition", "mixed", "rrf:passage+sentence+proposition",
        "proposition",
    ]  # fmt: skip
    assert rows[5]["retriever"] == "minilm+bm25" and rows[5]["fusion"] == "hybrid"
    assert rows[4]["fusion"] == "rrf" and "fusion" not in rows[0]
    assert rows[3]["n_units"] == sum(r["n_units"] for r in rows[:3])
    for i, r in enumerate(rows):
        pq = _per_q(sweep / str(i))
        assert len(pq) == r["n_questions"] == 30
        for k in (1, 5, 20):  # the per-question hits add up to the cell's recall
            assert 100 * sum(q[f"hit@{k}"] for q in pq) / 30 == pytest.approx(r[f"recall@{k}"])
        assert {"id", "question", "answers", "first_hit_rank", "words_to_answer"} <= set(pq[0])
        assert r["n_gold_questions"] == 30
        assert 0 < r["mrr@10"] <= 100 and 0 < r["ndcg@10"] <= 100
        assert r["gold_recall@5"] <= r["gold_recall@20"] <= 100
        rr = [q["rr@10"] for q in pq]
        assert 100 * sum(rr) / 30 == pytest.approx(r["mrr@10"], abs=1e-3)
        for q in pq:  # a gold passage is an answer-bearing one for these questions
            if q["gold_rank"] is not None and q["gold_rank"] <= 20:
                assert q["first_hit_rank"] is not None
        # the answer-recall curve read per question
        within = [q["words_to_answer"] for q in pq if q["words_to_answer"] is not None]
        assert 100 * sum(w <= 100 for w in within) / 30 == pytest.approx(r["answer_recall@100"])


def test_rrf_cell_is_the_fusion_of_the_granularity_cells(sweep, article):
    """Recompute RRF's top passages from the three member cells' retrieval files."""
    from densex.analysis.fusion import rrf_fuse
    from densex.utils.io import read_json

    # gzip-compressed by default since the retrieval files lost their text
    ctxs = [read_json(sweep / str(i) / "retrieval.json.gz") for i in range(3)]
    fused = read_json(sweep / "4" / "retrieval.json.gz")
    ids = {}
    for q in range(5):
        rankings = []
        for cell in ctxs:
            rankings.append([ids.setdefault(c["id"], len(ids)) for c in cell[q]["ctxs"]])
        # members ranked 100 passages, the files hold the top 20: compare the head only
        items, _ = rrf_fuse(rankings, k=60, top=3)
        back = {v: k for k, v in ids.items()}
        got = [c["id"] for c in fused[q]["ctxs"][:3]]
        assert got[:1] == [back[int(items[0])]]


def test_analyze_sweep_writes_significance_and_winloss(sweep):
    from densex.analysis.sweep import analyze_sweep
    from densex.report.aggregate import aggregate_sweep

    aggregate_sweep(sweep, ks=(5, 20))
    written = analyze_sweep(sweep, ks=(5, 20), n_resamples=2000, seed=0)
    sig = list(csv.DictReader((sweep / "significance.csv").read_text().splitlines()))
    pairs = {(r["a"], r["b"], r["metric"]) for r in sig}
    # every reported metric is tested (R@k, AR@l, MRR@10, nDCG@10), named as the tables name it
    assert ("proposition", "passage", "R@5") in pairs
    assert ("proposition", "sentence", "R@20") in pairs
    assert ("mixed", "passage", "MRR@10") in pairs and ("mixed", "passage", "nDCG@10") in pairs
    assert ("proposition", "passage", "AR@100") in pairs
    for r in sig:
        assert float(r["ci_low"]) <= float(r["diff"]) <= float(r["ci_high"])
        assert 0 < float(r["p_randomization"]) <= 1
        assert (
            r["randomization_resamples"] in ("exact", "2000") and r["bootstrap_resamples"] == "2000"
        )
        assert r["significant"] == str(float(r["p_randomization"]) < 0.05)
    assert "reader" not in sig[0] and "budget" not in sig[0]  # no EM@l compared: no QA columns
    md = (sweep / "table2.md").read_text()
    assert "Decision rule: " in md and "proposition vs passage" in md
    assert "| mixed |" in md  # fused cells are ordinary rows
    wl = (sweep / "winloss.md").read_text()
    assert "answer type" in wl and "question length" in wl
    rows = list(csv.DictReader((sweep / "winloss.csv").read_text().splitlines()))
    for r in rows:
        assert int(r["wins"]) + int(r["losses"]) + int(r["both"]) + int(r["neither"]) == int(r["n"])
    gold = (sweep / "gold_metrics.md").read_text()
    assert "MRR@10" in gold and "nDCG@10" in gold
    assert written["gold"].exists()


def test_beir_fixture_end_to_end(repo_root, article, sweep, minilm_path, tmp_path):
    """The BEIR copy of the corpus: the same ranking, so the same gold metrics as the SQuAD run
    (whose passage units hash the same, so the second run reuses the embeddings). The SQuAD
    run is the module sweep's passage cell (`sweep/0`: the same overrides), not run again."""
    from densex.pipelines.evaluate.run import run

    squad_run = sweep / "0"  # _squad_cell(article, sweep / "0", "granularity=passage")
    assert _row(squad_run)["granularity"] == "passage"
    out = tmp_path / "beir"
    run(
        _cfg(
            repo_root,
            [
                "corpus=beir",
                f"corpus.dir={article['beir']}",
                "dataset=beir",
                "granularity=passage",
                "retriever=minilm",
                "topk=[1,5,20]",
                "retrieval_text=false",
                "trainer=cpu",
                "trainer.enable_progress_bar=false",
                f"paths.cache_dir={article['cache']}",
                f"paths.output_dir={out}",
            ],
        )
    )
    beir, squad = _row(out), _row(squad_run)
    assert beir["n_questions"] == 30  # the unjudged query is not evaluated
    # BEIR queries carry no answer strings: answer-based metrics are undefined, not zero
    assert not [k for k in beir if k.startswith(("recall@", "answer_recall@", "em@"))]
    assert [k for k in beir if "@" in k][:2] == ["ndcg@10", "mrr@10"]
    for key in ("mrr@10", "ndcg@10", "gold_recall@5", "gold_recall@20"):
        assert beir[key] == pytest.approx(squad[key]), key
    pq = _per_q(out)
    assert len(pq) == 30 and all(q["answers"] == [] and "hit@5" not in q for q in pq)
    squad_pq = {q["id"]: q for q in _per_q(squad_run)}
    assert all(q["gold_rank"] == squad_pq[q["id"]]["gold_rank"] for q in pq)


def _fake_cell(d: Path, granularity: str, hits: list[list[bool]], answers: list[str]) -> None:
    from densex.analysis.per_question import per_question_rows, write_per_question

    d.mkdir(parents=True)
    questions = [
        {"id": f"q{i}", "question": f"Who wrote book number {i}?", "answers": [a]}
        for i, a in enumerate(answers)
    ]
    import numpy as np

    h = np.array(hits, bool)
    write_per_question(d, per_question_rows(questions, h, [5, 20]))
    cum = np.logical_or.accumulate(h, axis=1).mean(axis=0)
    row = {
        "corpus": "c", "retriever": "minilm", "granularity": granularity, "dataset": "d",
        "reader": "none", "index": "flat", "budget": 100,
        "recall@5": 100 * cum[4], "recall@20": 100 * cum[19],
    }  # fmt: skip
    (d / "results.jsonl").write_text(json.dumps(row) + "\n")


def test_analyze_sweep_marks_significant_gains(tmp_path):
    """Synthetic cells: proposition finds a hit at rank 1 where passage needs rank 10 for 60
    of 200 questions: R@5 gains 30 points (significant), R@20 is equal (not)."""
    import numpy as np

    from densex.analysis.sweep import analyze_sweep

    rng = np.random.default_rng(0)
    base = rng.random(200) < 0.5
    late = np.zeros((200, 20), bool)
    late[base, 9] = True
    early = late.copy()
    moved = np.flatnonzero(base)[:60]
    early[moved, 9], early[moved, 0] = False, True
    answers = ["1990"] * 100 + ["Jane Austen"] * 100
    _fake_cell(tmp_path / "0", "passage", late.tolist(), answers)
    _fake_cell(tmp_path / "1", "proposition", early.tolist(), answers)
    analyze_sweep(tmp_path, ks=(5, 20), n_resamples=2000, seed=0)
    sig = {
        (r["a"], r["b"], r["metric"]): r
        for r in csv.DictReader((tmp_path / "significance.csv").read_text().splitlines())
    }
    r5, r20 = sig[("proposition", "passage", "R@5")], sig[("proposition", "passage", "R@20")]
    assert float(r5["diff"]) == pytest.approx(30.0) and float(r5["p_randomization"]) < 0.001
    assert float(r20["diff"]) == 0.0 and float(r20["p_randomization"]) == 1.0
    md = (tmp_path / "table2.md").read_text()
    psg = next(x for x in md.splitlines() if x.startswith("| ") and "passage" in x)
    assert "†" not in psg and "| 0.0 | 44.0 |" in psg
    line = next(x for x in md.splitlines() if x.startswith("| ") and "proposition" in x)
    assert "†" in line.split("|")[3] and "†" not in line.split("|")[4]
    gain = next(x for x in md.splitlines() if "Δ prop − psg" in x)
    assert "+30.0**" in gain
    wl = list(csv.DictReader((tmp_path / "winloss.csv").read_text().splitlines()))
    overall = next(r for r in wl if r["bucket"] == "all" and r["metric"] == "R@5")
    assert (int(overall["wins"]), int(overall["losses"])) == (60, 0)
    by_type = {
        r["bucket"]: r for r in wl if r["bucketing"] == "answer type" and r["metric"] == "R@5"
    }
    assert int(by_type["date"]["n"]) == 100 and int(by_type["entity"]["n"]) == 100
