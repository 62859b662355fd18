"""The embedded demo corpus (data/demo) is well-formed and keeps the promises its README makes.

The demo is the one corpus every checkout has, so its files are checked the way the pipeline
will read them: passages follow the paper's 100-word rule exactly, every passage has
decontextualised propositions, and every question is answerable (DPR has_answer) from exactly
the passage that holds its fact, in both the passage text and its propositions.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from pathlib import Path

import pytest
import spacy

from densex.corpus.segment import chunk_sentences, count_words
from densex.metrics.answers import has_answer
from densex.utils.io import read_jsonl
from helpers.config import compose_config

MAX_WORDS, MIN_TAIL_WORDS = 100, 50
PASSAGE_ID = re.compile(r"^(?P<title>[^#]+)#(?P<para>\d+)-(?P<chunk>\d+)$")
# words a decontextualised proposition never starts with (Figure 8, rule 3)
PRONOUNS = {"it", "its", "he", "his", "him", "she", "her", "they", "their", "them", "this", "that"}


@pytest.fixture(scope="module")
def demo_dir(repo_root: Path) -> Path:
    return repo_root / "data" / "demo"


@pytest.fixture(scope="module")
def passages(demo_dir: Path) -> list[dict]:
    return list(
        read_jsonl(demo_dir / "passages.jsonl", ("id", "title", "section", "text"), ("id", "text"))
    )


@pytest.fixture(scope="module")
def propositions(demo_dir: Path) -> list[dict]:
    return list(read_jsonl(demo_dir / "propositions.jsonl", ("id", "propositions"), ("id",)))


@pytest.fixture(scope="module")
def questions(demo_dir: Path) -> list[dict]:
    path = demo_dir / "questions.jsonl"
    return list(read_jsonl(path, ("id", "question", "answers"), ("id", "question", "answers")))


@pytest.fixture(scope="module")
def sentencizer() -> spacy.language.Language:
    """The splitter the demo passages were made with (spaCy's rule-based sentencizer)."""
    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    return nlp


def _sentences(text: str, nlp: spacy.language.Language) -> list[str]:
    return [s.text.strip() for s in nlp(text).sents if s.text.strip()]


def test_passage_records(passages):
    assert 40 <= len(passages) <= 70
    ids = [p["id"] for p in passages]
    assert len(ids) == len(set(ids)), "duplicate passage ids"
    for p in passages:
        m = PASSAGE_ID.match(p["id"])
        assert m, f"{p['id']!r} is not '<Title>#<paragraph>-<chunk>'"
        assert m["title"] == p["title"].replace(" ", "_"), p["id"]
        assert p["section"] == ""
        assert p["text"] == p["text"].strip() and "  " not in p["text"], p["id"]
    assert len({p["title"] for p in passages}) >= 12


def test_passage_lengths(passages, sentencizer):
    """<= 100 words, except one over-long sentence or a merged tail (< 50 words)."""
    for p in passages:
        n = count_words(p["text"])
        if n > MAX_WORDS:
            assert n < MAX_WORDS + MIN_TAIL_WORDS or len(_sentences(p["text"], sentencizer)) == 1
    words = [count_words(p["text"]) for p in passages]
    assert 60 <= sum(words) / len(words) <= 100


def test_passages_follow_the_greedy_rule(passages, sentencizer):
    """Re-chunk each paragraph's sentences with the paper's rule; the file must match exactly."""
    paragraphs: dict[tuple[str, int], list[tuple[int, str]]] = defaultdict(list)
    order: list[tuple[str, int]] = []
    for p in passages:
        m = PASSAGE_ID.match(p["id"])
        key = (m["title"], int(m["para"]))
        if key not in paragraphs:
            order.append(key)
        paragraphs[key].append((int(m["chunk"]), p["text"]))
    # paragraphs are contiguous, numbered 0..n-1 within each article, chunks 0..k-1
    by_title: dict[str, list[int]] = defaultdict(list)
    for title, para in order:
        by_title[title].append(para)
    assert len(order) == len(paragraphs), "a paragraph's chunks are not contiguous"
    for title, paras in by_title.items():
        assert paras == list(range(len(paras))), title
        assert 2 <= len(paras) <= 4, f"{title}: {len(paras)} paragraphs"
    multi = 0
    for key in order:
        chunks = paragraphs[key]
        assert [c for c, _ in chunks] == list(range(len(chunks))), key
        multi += len(chunks) > 1
        sentences = _sentences(" ".join(t for _, t in chunks), sentencizer)
        expected = [" ".join(c) for c in chunk_sentences(sentences, MAX_WORDS, MIN_TAIL_WORDS)]
        assert [t for _, t in chunks] == expected, f"{key} does not follow the 100-word rule"
    assert multi >= 5, "too few multi-chunk paragraphs to exercise the rule"


def test_propositions_cover_every_passage(passages, propositions, sentencizer):
    assert [r["id"] for r in propositions] == [p["id"] for p in passages]
    n_props, prop_words = 0, 0
    for row in propositions:
        props = row["propositions"]
        assert isinstance(props, list) and props, row["id"]
        assert all(isinstance(x, str) and x.strip() == x and x for x in props), row["id"]
        assert len(props) == len(set(props)), f"{row['id']}: repeated proposition"
        for x in props:
            assert x.split()[0].lower() not in PRONOUNS, f"{row['id']}: not decontextualised: {x}"
            assert x[-1] in ".!?\"'", f"{row['id']}: not a sentence: {x}"
        n_props += len(props)
        prop_words += sum(count_words(x) for x in props)
    n_sents = sum(len(_sentences(p["text"], sentencizer)) for p in passages)
    sent_words = sum(count_words(p["text"]) for p in passages)
    # propositions are finer than sentences: more of them, and shorter (paper, Table 1)
    assert n_props > 2 * n_sents
    assert prop_words / n_props < sent_words / n_sents


def test_questions_are_answerable_from_exactly_their_passage(passages, propositions, questions):
    assert 100 <= len(questions) <= 150
    ids = [q["id"] for q in questions]
    assert ids == [f"demo-{i}" for i in range(len(questions))]
    assert len({q["question"] for q in questions}) == len(questions)
    props = {r["id"]: r["propositions"] for r in propositions}
    for q in questions:
        assert q["question"].endswith("?"), q["id"]
        assert all(isinstance(a, str) and a.strip() for a in q["answers"]), q["id"]
        hits = [p for p in passages if has_answer(q["answers"], p["text"])]
        assert hits, f"{q['id']}: no passage contains any of {q['answers']}"
        # a specific answer, not one that matches everywhere ("1", "the", a frequent name)
        assert len(hits) == 1, f"{q['id']}: {q['answers']} match {[p['id'] for p in hits]}"
        # the fact is also stated by a proposition of that passage (propositions cover it)
        assert any(has_answer(q["answers"], x) for x in props[hits[0]["id"]]), q["id"]


def test_many_answers_sit_in_pronoun_sentences(passages, questions, sentencizer):
    """The demo is built so that resolving pronouns matters: many answers are only in sentences
    that refer to their entity as "it", "she", "its"..., which propositions spell out."""
    pronoun_only = 0
    for q in questions:
        for p in passages:
            if not has_answer(q["answers"], p["text"]):
                continue
            sents = [s for s in _sentences(p["text"], sentencizer) if has_answer(q["answers"], s)]
            if sents and all(s.split()[0].lower() in PRONOUNS for s in sents):
                pronoun_only += 1
    assert pronoun_only >= 30


def test_demo_configs_load_through_the_pipeline(repo_root, tmp_path, passages, questions):
    """corpus=demo and dataset=demo compose, resolve to the shipped files and load."""
    from helpers.typed import build_units, load_dataset_questions

    cfg = compose_config("evaluate", "corpus=demo", "dataset=demo")
    assert cfg.corpus.name == cfg.dataset.name == "demo"
    assert cfg.corpus.documents is None
    assert Path(cfg.corpus.passages).resolve() == (repo_root / "data/demo/passages.jsonl")
    assert Path(cfg.dataset.path).resolve() == (repo_root / "data/demo/questions.jsonl")
    loaded = load_dataset_questions(cfg.dataset)
    assert [q["answers"] for q in loaded] == [q["answers"] for q in questions]
    files = build_units(cfg.corpus, tmp_path / "units")
    n_props = sum(1 for _ in (tmp_path / "units" / "proposition.jsonl").open())
    assert files.counts["passage"] == len(passages)
    assert files.counts["proposition"] == n_props > files.counts["sentence"] > len(passages)
    assert json.loads(files.manifest.read_text())["skipped"]["total"] == 0
