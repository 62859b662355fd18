"""EntityQuestions popularity (Figure 3): templates, BM25 mention counts, buckets, end to end."""

from __future__ import annotations

import csv
import json
import logging

import pytest

from densex.analysis.popularity import run_popularity
from densex.qa.entity_questions import TEMPLATES, extract_entity, load_eq_questions
from densex.qa.mentions import bm25_popularity
from densex.qa.popularity import bucket_edges, bucket_index, popularity_recall, retrieval_hits
from densex.utils.io import DataError
from helpers.inproc import run_script
from helpers.requires import missing


@pytest.fixture(scope="module")
def eq_dir(shared_data):
    path = shared_data / "qa" / "eq"
    if not list(path.glob("P*.test.json")):
        missing(f"EntityQuestions not found under {path}")
    return path


def test_templates_extract_every_question_of_all_24_relations(eq_dir):
    rows = load_eq_questions(eq_dir)
    relations = {r["relation"] for r in rows}
    assert relations == set(TEMPLATES) and len(relations) == 24
    assert len(rows) == 22075
    for r in rows:
        assert r["entity"], r
        # putting the entity back into the template gives the question, character for character
        assert TEMPLATES[r["relation"]].replace("[X]", r["entity"]) == r["question"].strip()
        # and without knowing the relation the same entity comes out
        assert extract_entity(r["question"]) == r["entity"]


def test_known_extractions():
    assert extract_entity("Where was Luke Prokopec born?", "P19") == "Luke Prokopec"
    assert extract_entity("Who is José Ruiz y Blasco's child?") == "José Ruiz y Blasco"
    assert extract_entity("What is the capital of Marin County?") == "Marin County"
    assert (
        extract_entity("Who is the author of Books Do Furnish a Room?") == "Books Do Furnish a Room"
    )
    assert extract_entity("Where was Luke born?", "P20") is None  # wrong relation
    assert extract_entity("How tall is Everest?") is None
    with pytest.raises(KeyError):
        extract_entity("Where was X born?", "P999")


def test_bm25_popularity_counts_mentions_in_a_hand_made_corpus():
    passages = [
        "Luke Prokopec pitched for the Dodgers. Prokopec was born in Blackwood.",
        "LUKE PROKOPEC and luke prokopec's arm: two mentions of Luke Prokopec, three in all.",
        "Lukeprokopec is not a mention; neither is Luke alone.",
        "The Dodgers play in Los Angeles.",
        "Marin County is in California. The capital of Marin County is San Rafael.",
    ]
    pops = bm25_popularity(
        ["Luke Prokopec", "Marin County", "Nowhere Land", "Luke Prokopec"], passages
    )
    assert pops == [4, 2, 0, 4]
    # top-k: with k=1 only the best BM25 passage is counted
    assert bm25_popularity(["Luke Prokopec"], passages, k=1)[0] in (1, 3)


def test_buckets():
    assert bucket_edges([0, 3, 45, 1200], "log") == [0.0, 1.0, 10.0, 100.0, 1000.0, 10000.0]
    edges = bucket_edges([0, 3, 45, 1200], "log")
    assert [bucket_index(v, edges) for v in (0, 1, 9, 10, 999, 1200)] == [0, 1, 1, 2, 3, 4]
    q = bucket_edges(list(range(100)), "quantile", n_buckets=4)
    assert len(q) == 5 and [bucket_index(v, q) for v in (0, 30, 60, 99)] == [0, 1, 2, 3]
    with pytest.raises(ValueError):
        bucket_edges([1], "linear")


def _retrieval(path, questions, hit_rank, ids=None, answers=None, n_ctxs=5):
    """A DPR-format retrieval.json where question i first has the answer at rank hit_rank[i]
    (records carry `ids[i]` and `answers[i]` when given)."""
    recs = []
    for i, (q, r) in enumerate(zip(questions, hit_rank)):
        ctxs = [
            {"id": str(j), "title": "", "text": "", "score": 1.0, "has_answer": j == r}
            for j in range(n_ctxs)
        ]
        rec = {"question": q, "answers": answers[i] if answers else ["x"], "ctxs": ctxs}
        if ids is not None:
            rec = {"id": ids[i], **rec}
        recs.append(rec)
    path.write_text(json.dumps(recs))
    return path


def test_popularity_recall_per_bucket(tmp_path):
    qs = [{"question": f"Where was E{i} born?", "entity": f"E{i}"} for i in range(4)]
    hits = {
        "passage": retrieval_hits(
            _retrieval(tmp_path / "p.json", [q["question"] for q in qs], [0, 9, 3, 1]), [1, 5]
        ),
        "proposition": retrieval_hits(
            _retrieval(tmp_path / "s.json", [q["question"] for q in qs], [0, 0, 0, 9]), [1, 5]
        ),
    }
    res = popularity_recall(qs, [0, 0, 50, 50], hits, ks=[1, 5], scheme="log")
    table = {(r["granularity"], r["label"]): r for r in res.table}
    assert table[("passage", "0")]["recall@1"] == 50.0 and table[("passage", "0")]["n"] == 2
    assert table[("passage", "10-99")]["recall@5"] == 100.0
    assert table[("passage", "10-99")]["recall@1"] == 0.0
    assert table[("proposition", "10-99")]["recall@1"] == 50.0
    assert table[("passage", "1-9")]["n"] == 0


def test_retrieval_json_errors_name_the_field(tmp_path):
    bad = tmp_path / "r.json"
    bad.write_text(json.dumps([{"question": "q", "ctxs": [{"id": "1"}]}]))
    with pytest.raises(DataError, match="has_answer"):
        retrieval_hits(bad, [1])


def test_run_popularity_end_to_end_and_cli(eq_dir, tmp_path, repo_root, capfd):
    data = json.loads((eq_dir / "P19.test.json").read_text())[:3]
    people = [extract_entity(d["question"], "P19") for d in data]
    passages = tmp_path / "passages.jsonl"
    with passages.open("w") as f:
        for i, text in enumerate(
            [
                f"{people[0]} was a pitcher. {people[0]} retired.",
                f"{people[1]} is a coach.",
                "Filler text.",
            ]
        ):
            f.write(json.dumps({"id": str(i), "title": "", "section": "", "text": text}) + "\n")
    retr = _retrieval(tmp_path / "retrieval.json", [d["question"] for d in data], [0, 7, 2])
    res = run_popularity(passages, eq_dir, {"passage": retr}, tmp_path / "out", ks=[1, 5])
    assert [q["popularity"] for q in res.questions] == [2, 1, 0]
    with (tmp_path / "out" / "popularity_recall.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert {r["label"]: r["n"] for r in rows} == {"0": "1", "1-9": "2"}
    assert (tmp_path / "out" / "popularity_recall.png").stat().st_size > 1000
    manifest = json.loads((tmp_path / "out" / "popularity_manifest.json").read_text())
    assert manifest["extraction_rate"] == 100.0 and manifest["questions_scored"] == 3

    # the script's CLI, run in this process (argv, its exit status, what it prints)
    capfd.readouterr()
    status = run_script(
        "scripts/entity_popularity.py",
        "--passages",
        str(passages),
        "--eq-dir",
        str(eq_dir),
        "--retrieval",
        f"passage={retr}",
        "--k",
        "1",
        "5",
        "--out-dir",
        str(tmp_path / "cli"),
    )
    out = capfd.readouterr()
    assert status == 0, out.err[-3000:]
    assert "recall@5" in out.out
    assert (tmp_path / "cli" / "question_popularity.csv").exists()


def test_duplicate_question_texts_are_joined_by_id(tmp_path):
    """Two questions share a text but not their answers: each keeps its own hits."""
    text = "Who owns Example Park?"
    qs = [
        {"id": "eq-P127-1", "question": text, "answers": ["Derry GAA"], "entity": "Example Park"},
        {"id": "eq-P127-2", "question": text, "answers": ["Celtic F.C."], "entity": "Example Park"},
        {"id": "eq-P127-3", "question": "Who owns Other?", "answers": ["A"], "entity": "Other"},
    ]
    path = _retrieval(
        tmp_path / "r.json",
        [q["question"] for q in qs],
        [0, 9, 0],
        ids=[q["id"] for q in qs],
        answers=[q["answers"] for q in qs],
    )
    hits = retrieval_hits(path, [1])
    assert hits.key == "id" and len(hits) == 3
    res = popularity_recall(qs, [5, 5, 50], {"passage": hits}, ks=[1])
    table = {r["label"]: r for r in res.table}
    # keyed by text, the second record overwrote the first: 0% of 2 instead of 50%
    assert table["1-9"]["n"] == 2 and table["1-9"]["recall@1"] == 50.0
    assert table["10-99"]["recall@1"] == 100.0


def test_text_keyed_retrievals_refuse_ambiguous_duplicates(tmp_path):
    text = "Who owns Example Park?"
    path = _retrieval(
        tmp_path / "r.json", [text, text], [0, 9], answers=[["Derry GAA"], ["Celtic F.C."]]
    )
    with pytest.raises(DataError, match="more than once"):
        retrieval_hits(path, [1])
    # the same question twice with the same answers and hits is not ambiguous
    same = _retrieval(tmp_path / "s.json", [text, text], [0, 0])
    hits = retrieval_hits(same, [1])
    assert hits.key == "question" and dict(hits) == {text: {1: True}}


def test_short_retrievals_warn_once_or_raise(tmp_path, caplog):
    path = _retrieval(tmp_path / "r.json", ["q1", "q2", "q3"], [9, 9, 0], n_ctxs=3)
    with caplog.at_level(logging.WARNING, logger="densex.qa.popularity"):
        hits = retrieval_hits(path, [1, 5])
    warnings = [r for r in caplog.records if "fewer than" in r.getMessage()]
    assert len(warnings) == 1
    assert "3 of 3 records hold fewer than 5 contexts (fewest 3)" in warnings[0].getMessage()
    assert hits.short == 3 and hits["q3"] == {1: True, 5: True}
    with pytest.raises(DataError, match="fewer than 5 contexts"):
        retrieval_hits(path, [1, 5], on_short="raise")
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="densex.qa.popularity"):
        assert retrieval_hits(path, [1, 3]).short == 0
    assert not [r for r in caplog.records if "fewer than" in r.getMessage()]


def test_eq_ids_match_the_dataset_config_loader(eq_dir, tmp_path):
    """popularity and evaluate (load_dataset_questions with conf/dataset/eq.yaml) agree on ids,
    whatever the directory is called."""
    from helpers.typed import load_dataset_questions

    link = tmp_path / "entity_questions"
    link.symlink_to(eq_dir, target_is_directory=True)
    cfg = {"name": "eq", "path": str(link), "format": "eq", "match": "string", "split": None}
    ours = load_eq_questions(link)
    theirs = load_dataset_questions(cfg)
    assert [q["id"] for q in ours] == [q["id"] for q in theirs]
    assert ours[0]["id"].startswith("eq-P")


def test_run_popularity_on_real_duplicate_eq_questions(eq_dir, tmp_path):
    """EQ holds the same question text with different answers (eq-P127-73 / eq-P127-728)."""
    by_id = {q["id"]: q for q in load_eq_questions(eq_dir)}
    a, b = by_id["eq-P127-73"], by_id["eq-P127-728"]
    assert a["question"] == b["question"] and a["answers"] != b["answers"]
    passages = tmp_path / "passages.jsonl"
    passages.write_text(json.dumps({"id": "0", "title": "", "text": "Filler."}) + "\n")
    qs = [a, b]
    retr = _retrieval(
        tmp_path / "retrieval.json",
        [q["question"] for q in qs],
        [0, 9],
        ids=[q["id"] for q in qs],
        answers=[q["answers"] for q in qs],
    )
    res = run_popularity(passages, eq_dir, {"passage": retr}, tmp_path / "out", ks=[1])
    assert sorted(q["id"] for q in res.questions) == ["eq-P127-728", "eq-P127-73"]
    assert [(r["n"], r["recall@1"]) for r in res.table] == [(2, 50.0)]
    manifest = json.loads((tmp_path / "out" / "popularity_manifest.json").read_text())
    assert manifest["joined_by"] == {"passage": "id"}

    # without ids the two cannot be told apart: an error, not a silently wrong recall
    no_ids = _retrieval(tmp_path / "no_ids.json", [a["question"]], [0], answers=[a["answers"]])
    with pytest.raises(DataError, match="different answers"):
        run_popularity(passages, eq_dir, {"passage": no_ids}, tmp_path / "out2", ks=[1])
    # an id whose text is another question's (wrong prefix/split) is refused too
    wrong = _retrieval(tmp_path / "wrong.json", [a["question"]], [0], ids=["eq-P19-0"])
    with pytest.raises(DataError, match="in EntityQuestions"):
        run_popularity(passages, eq_dir, {"passage": wrong}, tmp_path / "out3", ks=[1])
    other = _retrieval(tmp_path / "other.json", [a["question"]], [0], ids=["entq-P127-73"])
    with pytest.raises(DataError, match="not EntityQuestions ids"):
        run_popularity(passages, eq_dir, {"passage": other}, tmp_path / "out4", ks=[1])
