"""The one BM25 construction (bm25s): a tokenizer, an index over texts, top-k search.

Both BM25s of densex are built here, each caller stating its parameters explicitly: the sparse
retriever (`retrieval.bm25`, pyserini's k1=0.9, b=0.4, its `conf/retriever/bm25.yaml`
settings) and the entity-popularity counts of Figure 3 (`qa.mentions`, bm25s' k1=1.5,
b=0.75). `allow_empty` is bm25s' empty-token rule: with it (the retriever) a text without an
indexed term becomes the empty token `""`; without it (popularity) such a text has no tokens,
and a query without an indexed term is not searched (its row scores 0).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import bm25s
import numpy as np
from bm25s.tokenization import Tokenizer

__all__ = ["bm25_index", "bm25_search", "bm25_tokenizer"]


def bm25_tokenizer(
    *, lower: bool, stopwords: str | Sequence[str], stemmer: Callable[..., Any] | None
) -> Tokenizer:
    """A bm25s `Tokenizer` (words of 2+ word characters) with the given case folding, stopwords
    (a bm25s language name such as "en", or a list) and stemmer (None: no stemming)."""
    return Tokenizer(lower=lower, stopwords=stopwords, stemmer=stemmer)


def bm25_index(
    texts: Sequence[str],
    tokenizer: Tokenizer,
    *,
    k1: float,
    b: float,
    method: str,
    allow_empty: bool,
    show_progress: bool = False,
) -> bm25s.BM25:
    """A bm25s index over `texts` (row i = texts[i]), scored by `method` with `k1`/`b`; the
    tokenizer's vocabulary is built from `texts` (it must be fresh)."""
    corpus = tokenizer.tokenize(
        list(texts), return_as="tuple", show_progress=show_progress, allow_empty=allow_empty
    )
    model = bm25s.BM25(k1=k1, b=b, method=method)
    model.index(corpus, show_progress=show_progress)
    return model


def bm25_search(
    model: bm25s.BM25,
    tokenizer: Tokenizer,
    queries: Sequence[str],
    k: int,
    *,
    allow_empty: bool,
    show_progress: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """(rows [nq, k], scores [nq, k]) of each query's top `k` texts, best first (k <= the
    index's size; scores 0 for texts that share no term). Query tokens outside the index's
    vocabulary are dropped; without `allow_empty` a query left without tokens is not searched
    (row 0, score 0)."""
    ids = tokenizer.tokenize(
        list(queries), update_vocab=False, show_progress=show_progress, allow_empty=allow_empty
    )
    if allow_empty:
        return model.retrieve(ids, k=k, show_progress=show_progress, n_threads=1)
    rows = np.zeros((len(ids), k), dtype=np.int64)
    scores = np.zeros((len(ids), k), dtype=np.float32)
    live = [i for i, q in enumerate(ids) if q]
    if live:
        docs, s = model.retrieve(
            [ids[i] for i in live], k=k, show_progress=show_progress, n_threads=1
        )
        rows[live], scores[live] = docs, s
    return rows, scores
