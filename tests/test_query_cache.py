"""Query embeddings cached like unit embeddings (`retrieval.query_cache`): a cell's questions
are encoded once per (question texts, query side of the retriever), every later cell and every
doubling round of `retrieve_passages` reads them; a damaged file is rebuilt or refused."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from densex.analysis.fusion import UnionSearcher
from densex.retrieval.encoders import DenseRetriever
from densex.retrieval.query_cache import cache_query_vectors, key_inputs, queries_dir
from densex.retrieval.search import retrieve_passages
from densex.retrieval.spec import RetrieverSpec
from densex.utils import integrity
from densex.utils.integrity import DamagedArtifact
from densex.utils.io import write_jsonl
from helpers.config import compose_config
from helpers.typed import load_or_build_searcher

torch.set_num_threads(1)

CPU = {"accelerator": "cpu", "devices": 1, "enable_progress_bar": False}
WORDS = [
    "river",
    "bridge",
    "castle",
    "market",
    "harbour",
    "tower",
    "garden",
    "mill",
    "forest",
    "chapel",
]
QUESTIONS = [f"Where is the {w} of town {i}?" for i, w in enumerate(WORDS * 2)]


@pytest.fixture(scope="module")
def tiny(tiny_bert_dir) -> dict:
    """The tiny random BERT as a mean-pooling retriever config."""
    return {"name": "tiny", "query_model": str(tiny_bert_dir), "pooling": "mean",
            "max_length": 64, "batch_size": 4, "device": "cpu"}  # fmt: skip


def _units(path: Path, per_passage: int) -> tuple[Path, np.ndarray]:
    """Ten passages of `per_passage` units each; (units file, unit -> passage row)."""
    rows = [
        {"id": f"p{p}-{u}", "passage_id": f"p{p}", "title": w, "text": f"The {w} stands {u}."}
        for p, w in enumerate(WORDS)
        for u in range(per_passage)
    ]
    write_jsonl(path, rows)
    return path, np.repeat(np.arange(len(WORDS)), per_passage)


@pytest.fixture(scope="module")
def cells(tiny, tmp_path_factory) -> dict:
    """Two granularities of one corpus (1 and 6 units per passage) and their unit caches."""
    root = tmp_path_factory.mktemp("cells")
    out = {"cache": root / "units-cache", "spec": tiny}
    for name, per in (("passage", 1), ("sentence", 6)):
        path, owners = _units(root / f"{name}.jsonl", per)
        load_or_build_searcher(path, tiny, None, out["cache"], CPU)  # encode units once
        out[name] = (path, owners)
    return out


def _searcher(cells: dict, granularity: str):
    return load_or_build_searcher(cells[granularity][0], cells["spec"], None, cells["cache"], CPU)


@pytest.fixture
def spy(monkeypatch) -> list[int]:
    """Questions encoded, per `DenseRetriever.encode_queries` call."""
    calls: list[int] = []
    original = DenseRetriever.encode_queries

    def counted(self, texts, batch_size=None):
        calls.append(len(texts))
        return original(self, texts, batch_size)

    monkeypatch.setattr(DenseRetriever, "encode_queries", counted)
    return calls


def _rankings(searcher, owners: np.ndarray, k: int = 3) -> list[tuple[list, list]]:
    found = retrieve_passages(searcher, QUESTIONS, owners, k)
    return [(r.passage_rows.tolist(), r.passage_scores.tolist()) for r in found]


def test_a_second_cell_encodes_nothing_and_ranks_the_same(cells, spy, tmp_path) -> None:
    cache = tmp_path / "cache"
    live = _rankings(_searcher(cells, "sentence"), cells["sentence"][1])
    assert spy[0] == len(QUESTIONS) and len(spy) > 1  # no cache: each round encodes again
    spy.clear()
    first = _searcher(cells, "sentence")
    assert cache_query_vectors(first, QUESTIONS, cache) == len(QUESTIONS)
    ranked = _rankings(first, cells["sentence"][1])
    assert spy == [len(QUESTIONS)]  # encoded once, into the cache; the search read it
    assert [p for p, _ in ranked] == [p for p, _ in live]
    np.testing.assert_allclose([s for _, s in ranked], [s for _, s in live], atol=1e-5)
    # the next cell (a new process: new searcher objects), another granularity: nothing encoded
    spy.clear()
    other = _searcher(cells, "passage")
    assert cache_query_vectors(other, QUESTIONS, cache) == 0
    _rankings(other, cells["passage"][1])
    again = _searcher(cells, "sentence")
    assert cache_query_vectors(again, QUESTIONS, cache) == 0
    assert _rankings(again, cells["sentence"][1]) == ranked  # the same vectors: identical
    # a mixed cell (a union of both): its members share the cached questions too
    union = UnionSearcher([_searcher(cells, "passage"), _searcher(cells, "sentence")])
    assert cache_query_vectors(union, QUESTIONS, cache) == 0
    owners = np.concatenate([cells["passage"][1], cells["sentence"][1]])
    retrieve_passages(union, QUESTIONS, owners, 3)
    assert spy == []
    # texts outside the cached list (a serve query) are encoded as before
    assert again.search(["What stands by the river?"], 2)[1].shape == (1, 2)
    assert spy == [1]


def test_the_rounds_of_retrieve_passages_encode_once(cells, spy, tmp_path) -> None:
    searcher = _searcher(cells, "sentence")
    owners = cells["sentence"][1]
    rounds: list[int] = []
    index_search = searcher.index.search
    searcher.index.search = lambda q, n: (rounds.append(n), index_search(q, n))[1]
    cache_query_vectors(searcher, QUESTIONS, tmp_path / "cache")
    retrieve_passages(searcher, QUESTIONS, owners, k=4, n_start=2)  # 6 units a passage
    assert len(set(rounds)) > 2  # n doubled: several rounds...
    assert spy == [len(QUESTIONS)]  # ...and the questions were encoded once, before them


def test_key_follows_the_texts_and_the_query_side_only(tiny, tmp_path) -> None:
    spec = RetrieverSpec.from_cfg(tiny)

    def key(texts=QUESTIONS, **changes) -> str:
        s = dataclasses.replace(spec, **changes)
        return queries_dir("/c", s, key_inputs(texts, s)).name

    base = key()
    assert key(QUESTIONS[:-1]) != base and key(QUESTIONS[::-1]) != base
    assert key([*QUESTIONS[:-1], QUESTIONS[-1] + " "]) != base
    for query_side in ({"query_prefix": "query: "}, {"query_max_length": 16},
                       {"pooling": "cls"}, {"similarity": "cos"}, {"precision": "bf16-mixed"},
                       {"query_model": "org/another-model"}):  # fmt: skip
        assert key(**query_side) != base, query_side
    # the document side, runtime settings and late chunking leave the questions' vectors alone
    for doc_side in ({"max_length": 32}, {"doc_prefix": "passage: "}, {"title": "none"},
                     {"dtype": "float16"}, {"doc_model": "/other"}, {"late_chunking": True},
                     {"batch_size": 1}, {"device": "cuda"}):  # fmt: skip
        assert key(**doc_side) == base, doc_side
    # the query model's weights, not only its path: a checkpoint changed in place
    model = shutil.copytree(tiny["query_model"], tmp_path / "model")
    before = key(query_model=str(model))
    with (model / "config.json").open("a") as f:
        f.write("\n")
    assert key(query_model=str(model)) != before


@pytest.mark.parametrize("damage", ["flip", "truncate"])
def test_a_damaged_file_is_reencoded_or_refused(cells, spy, tmp_path, damage) -> None:
    cache = tmp_path / "cache"
    searcher = _searcher(cells, "passage")
    cache_query_vectors(searcher, QUESTIONS, cache)
    good = _rankings(searcher, cells["passage"][1])
    (vectors,) = cache.glob("queries/tiny/*/vectors.npy")
    data = bytearray(vectors.read_bytes())
    if damage == "flip":
        data[-5] ^= 0xFF  # same size, changed bytes
    vectors.write_bytes(bytes(data if damage == "flip" else data[:-8]))
    try:
        integrity.configure(on_damaged="refuse")
        with pytest.raises(DamagedArtifact, match="damaged query embeddings"):
            cache_query_vectors(_searcher(cells, "passage"), QUESTIONS, cache)
    finally:
        integrity.reset()
    assert vectors.exists()  # refused: left as it was, for a person to look at
    spy.clear()
    again = _searcher(cells, "passage")
    assert cache_query_vectors(again, QUESTIONS, cache) == len(QUESTIONS)  # rebuilt
    assert _rankings(again, cells["passage"][1]) == good
    assert cache_query_vectors(_searcher(cells, "passage"), QUESTIONS, cache) == 0


def test_an_evaluate_cell_reads_the_cache(demo_cache_copy, minilm_path, spy) -> None:
    """Two demo cells (passage, then sentence) through `search_cell`: the second encodes no
    question, and the first rerun gives the same rankings. On a copy of the demo sweep's
    encoded units (`demo_cache_copy`: units and embeddings, no question vectors)."""
    from densex.pipelines.evaluate.cell import load_questions, open_cell, search_cell

    def cell(granularity: str) -> list:
        cfg = compose_config("evaluate", "experiment=demo", f"granularity={granularity}",
                             f"paths.cache_dir={demo_cache_copy}", "limit_questions=12",
                             "trainer.enable_progress_bar=false")  # fmt: skip
        questions, _ = load_questions(cfg)
        found = search_cell(cfg, open_cell(cfg, {}), questions, 5, {})
        return [(r.passage_rows.tolist(), r.unit_rows.tolist()) for r in found]

    first = cell("passage")
    assert sum(spy) == 12
    spy.clear()
    cell("sentence")
    assert cell("passage") == first and spy == []
