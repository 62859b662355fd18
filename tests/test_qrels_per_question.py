"""Gold-passage loaders (SQuAD spans, BEIR/TREC qrels, BEIR corpus/queries) and the
per-question win/loss analysis."""

from __future__ import annotations

import json

import numpy as np
import pytest

from densex.analysis.per_question import (
    answer_type,
    length_bucket,
    per_question_rows,
    popularity_bucket,
    win_loss,
)
from densex.corpus.beir import read_beir_corpus
from densex.data.beir import load_beir_queries
from densex.data.qrels import read_qrels, squad_qrels
from densex.utils.io import DataError


def test_squad_qrels_locate_the_answer_chunk(tmp_path):
    context = "Alpha one is first.  Beta two\nis second. Gamma three is third."
    squad = {
        "version": "1.1",
        "data": [
            {
                "title": "Art",
                "paragraphs": [
                    {
                        "context": context,
                        "qas": [
                            {"id": "q1", "answers": [{"text": "one", "answer_start": 6}]},
                            {"id": "q2", "answers": [{"text": "three", "answer_start": 47}]},
                            {
                                "id": "q3",
                                "answers": [
                                    {"text": "Beta", "answer_start": 21},
                                    {"text": "Gamma", "answer_start": 41},
                                ],
                            },
                        ],
                    }
                ],
            }
        ],
    }
    assert context[47:52] == "three" and context[41:46] == "Gamma" and context[21:25] == "Beta"
    path = tmp_path / "squad.json"
    path.write_text(json.dumps(squad))
    passages = [  # the paragraph's two chunks, re-joined by single spaces
        {"id": "Art#0-0", "text": "Alpha one is first. Beta two is second."},
        {"id": "Art#0-1", "text": "Gamma three is third."},
    ]
    got = squad_qrels(path, passages)
    assert got.qrels == {
        "q1": {"Art#0-0": 1.0},
        "q2": {"Art#0-1": 1.0},
        "q3": {"Art#0-0": 1.0, "Art#0-1": 1.0},
    }
    assert got.unaligned == 0
    # chunks that do not align with the paragraph: the whole paragraph is gold, counted
    edited = [{**passages[0], "text": "Something else."}, passages[1]]
    got = squad_qrels(path, edited)
    assert got.unaligned == 3 and got.qrels["q1"] == {"Art#0-0": 1.0, "Art#0-1": 1.0}


def test_squad_qrels_on_the_shared_benchmark(squad_open):
    from densex.metrics.answers import has_answer
    from densex.utils.io import read_jsonl

    passages = list(read_jsonl(squad_open / "passages.jsonl"))
    got = squad_qrels(squad_open / "squad-dev-v1.1.json", passages)
    assert len(got.qrels) == 7431 and got.unaligned == 0 and got.missing_paragraph == 0
    text = {p["id"]: p["text"] for p in passages}
    questions = {q["id"]: q for q in read_jsonl(squad_open / "questions.jsonl")}
    missing = sum(
        not any(has_answer(questions[q]["answers"], text[p]) for p in gold)
        for q, gold in got.qrels.items()
    )
    assert missing < 10  # the located chunk holds the answer string (token match) but rarely


def test_read_qrels_beir_and_trec(tmp_path):
    beir = tmp_path / "test.tsv"
    beir.write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\td2\t2\nq2\td3\t0\n")
    assert read_qrels(beir) == {"q1": {"d1": 1.0, "d2": 2.0}, "q2": {"d3": 0.0}}
    trec = tmp_path / "qrels.trec"
    trec.write_text("q1 0 d1 1\nq1 0 d2 0\n")
    assert read_qrels(trec) == {"q1": {"d1": 1.0, "d2": 0.0}}
    bad = tmp_path / "bad.tsv"
    bad.write_text("q1\td1\tx\n")
    with pytest.raises(DataError, match=r"bad.tsv:1.*score"):
        read_qrels(bad)


def test_beir_corpus_and_queries(tmp_path):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(
        json.dumps({"_id": "d1", "title": "T", "text": "Some text."})
        + "\n"
        + json.dumps({"_id": "d2", "text": ""})
        + "\n"
    )
    with pytest.raises(DataError, match=r"corpus.jsonl:2.*text"):
        read_beir_corpus(corpus)
    corpus.write_text(json.dumps({"_id": 7, "title": None, "text": "X y."}) + "\n")
    assert read_beir_corpus(corpus) == [{"id": "7", "title": "", "section": "", "text": "X y."}]
    queries = tmp_path / "queries.jsonl"
    queries.write_text("".join(json.dumps({"_id": q, "text": f"query {q}"}) + "\n" for q in "abc"))
    rows = load_beir_queries(queries, keep={"a", "c"})
    assert rows == [
        {"id": "a", "question": "query a", "answers": []},
        {"id": "c", "question": "query c", "answers": []},
    ]


@pytest.mark.parametrize(
    ("answers", "kind"),
    [
        (["October 1973"], "date"),
        (["1979"], "date"),
        (["the 18th century"], "date"),
        (["$12"], "number"),
        (["three"], "number"),
        (["3.5 million"], "number"),
        (["Organization of Arab Petroleum Exporting Countries"], "entity"),
        (["Nixon"], "entity"),
        (["rationing"], "other"),
        (["a sharp rise in prices"], "other"),
        ([], "other"),
    ],
)
def test_answer_type(answers, kind):
    assert answer_type(answers) == kind


def test_buckets():
    assert length_bucket("When did the oil crisis begin?") == "0-6 words"
    assert length_bucket(" ".join(["w"] * 20)) == "13+ words"
    assert popularity_bucket(0) == "pop 0" and popularity_bucket(350) == "pop 10^2-10^3"
    assert popularity_bucket(None) is None


def test_per_question_rows_and_win_loss():
    questions = [
        {"id": f"q{i}", "question": q, "answers": a}
        for i, (q, a) in enumerate(
            [("When?", ["1990"]), ("Who is it?", ["Nixon"]), ("How many?", ["3"]), ("Why?", ["x"])]
        )
    ]
    hits_a = np.array([[0, 1], [1, 0], [0, 0], [1, 1]], bool)
    hits_b = np.array([[0, 0], [0, 1], [0, 1], [1, 0]], bool)
    a = {r["id"]: r for r in per_question_rows(questions, hits_a, [1, 2])}
    b = {r["id"]: r for r in per_question_rows(questions, hits_b, [1, 2])}
    assert a["q0"]["first_hit_rank"] == 2 and a["q2"]["first_hit_rank"] is None
    assert [a[q]["hit@1"] for q in a] == [False, True, False, True]
    rows = win_loss(a, b, "hit@1", popularity={"q0": 5.0})
    overall = rows[0]
    assert (overall["bucket"], overall["wins"], overall["losses"]) == ("all", 1, 0)
    assert (overall["both"], overall["neither"]) == (1, 2)
    assert overall["win_examples"] == ["Who is it?"]
    by = {(r["bucketing"], r["bucket"]): r for r in rows}
    assert by[("answer type", "entity")]["wins"] == 1
    assert by[("answer type", "number")]["n"] == 1
    assert by[("entity popularity", "pop 10^0-10^1")]["n"] == 1
    rows2 = win_loss(a, b, "hit@2")
    assert (rows2[0]["wins"], rows2[0]["losses"], rows2[0]["both"]) == (1, 1, 2)
