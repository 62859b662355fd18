"""BM25 (bm25s): Lucene scores by hand, -1 for non-matching units, caching, real recall."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from tests.helpers.config import group_config

from densex.retrieval.bm25 import BM25Searcher
from densex.retrieval.spec import BM25Spec
from densex.utils.io import read_jsonl, write_jsonl
from helpers.requires import require_module
from helpers.typed import load_or_build_searcher

DOCS = [
    {"id": "a", "title": "", "text": "red apple red fruit"},
    {"id": "b", "title": "", "text": "green apple"},
    {"id": "c", "title": "", "text": "yellow banana fruit bowl basket"},
    {"id": "d", "title": "", "text": "quantum chromodynamics"},
]


@pytest.fixture()
def tiny_units(tmp_path: Path) -> Path:
    path = tmp_path / "units.jsonl"
    write_jsonl(path, DOCS)
    return path


def _lucene(query: list[str], k1: float = 0.9, b: float = 0.4) -> np.ndarray:
    docs = [d["text"].split() for d in DOCS]
    avg = sum(map(len, docs)) / len(docs)
    out = np.zeros(len(docs))
    for term in query:
        df = sum(term in d for d in docs)
        idf = math.log(1 + (len(docs) - df + 0.5) / (df + 0.5))
        for i, d in enumerate(docs):
            tf = d.count(term)
            out[i] += idf * tf / (tf + k1 * (1 - b + b * len(d) / avg))
    return out


def test_scores_match_lucene_formula_and_nonmatches_are_minus_one(tiny_units: Path) -> None:
    s = BM25Searcher.build(tiny_units, BM25Spec.from_cfg({"name": "bm25", "type": "sparse"}))
    scores, rows = s.search(["red fruit", "apple", "zzzunknown"], 6)
    want = _lucene(["red", "fruit"])
    assert rows[0].tolist() == [0, 2, -1, -1, -1, -1]
    np.testing.assert_allclose(scores[0, :2], want[[0, 2]], rtol=1e-5)
    want = _lucene(["apple"])
    assert rows[1, :2].tolist() == [1, 0]  # shorter doc wins with equal tf
    np.testing.assert_allclose(scores[1, :2], want[[1, 0]], rtol=1e-5)
    assert (rows[2] == -1).all() and np.isneginf(scores[2]).all()
    assert s.ntotal == 4 and s.unit_ids == ["a", "b", "c", "d"]


def test_settings_validate() -> None:
    assert BM25Spec.from_cfg({"name": "bm25"}).k1 == 0.9
    with pytest.raises(ValueError, match="unknown config keys"):
        BM25Spec.from_cfg({"name": "bm25", "k": 1.0})


def test_cached_bm25_searcher_round_trip(tiny_units: Path, tmp_path: Path, repo_root) -> None:
    cfg = group_config("retriever", "bm25")
    first = load_or_build_searcher(tiny_units, cfg, None, tmp_path / "cache")
    second = load_or_build_searcher(tiny_units, cfg, None, tmp_path / "cache")
    assert first.info["index_built"] and not second.info["index_built"]
    for a, b in zip(first.search(["banana fruit"], 3), second.search(["banana fruit"], 3)):
        np.testing.assert_array_equal(a, b)
    assert second.search(["banana fruit"], 3)[1][0].tolist() == [2, 0, -1]


def test_bm25_recall_on_squad_open(squad_open: Path, tmp_path: Path, repo_root) -> None:
    """SQuAD questions share words with their passage: BM25 must find most answers in top 20."""
    cfg = group_config("retriever", "bm25")
    s = load_or_build_searcher(squad_open / "passages.jsonl", cfg, None, tmp_path)
    assert s.ntotal == 2203
    texts = [p["text"].lower() for p in read_jsonl(squad_open / "passages.jsonl")]
    qs = [q for _, q in zip(range(200), read_jsonl(squad_open / "questions.jsonl"))]
    _, rows = s.search([q["question"] for q in qs], 20)
    hit = np.array(
        [
            [r >= 0 and any(a.lower() in texts[r] for a in q["answers"]) for r in row]
            for q, row in zip(qs, rows)
        ]
    )
    found = {k: int(hit[:, :k].any(axis=1).sum()) for k in (1, 5, 20)}  # questions of 200
    # deterministic (bm25s, pyserini's k1 0.9 / b 0.4): the measured figures, to one question
    assert found == pytest.approx({1: 172, 5: 188, 20: 197}, abs=1), found


def test_stemmer_english_matches_word_forms(tiny_units: Path) -> None:
    """`stemmer: english` (PyStemmer, stemmed one word at a time as bm25s asks): "apples" and
    "fruits" find the units that say "apple" and "fruit"; without stemming they find none."""
    require_module("Stemmer", "PyStemmer>=2.2")
    query = ["apples fruits"]
    plain = BM25Searcher.build(tiny_units, BM25Spec(name="bm25"))
    assert (plain.search(query, 2)[1] == -1).all()
    stemmed = BM25Searcher.build(tiny_units, BM25Spec(name="bm25", stemmer="english"))
    scores, rows = stemmed.search(query, 4)
    assert set(rows[0][:3].tolist()) == {0, 1, 2}
    assert rows[0][0] == 0  # "red apple red fruit": both stems
    assert rows[0][3] == -1  # "quantum chromodynamics": no stem in common
