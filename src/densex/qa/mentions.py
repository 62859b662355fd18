"""Entity popularity: how often a surface form occurs in the passages BM25 retrieves for it.

Popularity (the paper's Figure 3 and Appendix E) is the number of case-insensitive,
whole-word occurrences of an entity's surface form in the BM25 top-k passages retrieved with
the form as the query (`bm25_popularity`; the index is `utils.bm25`'s, with this module's
k1/b).
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence

from densex.utils.bm25 import bm25_index, bm25_search, bm25_tokenizer
from densex.utils.io import read_jsonl

# BM25 for popularity counts: bm25s' defaults (the Figure 3 numbers so far were counted with
# them). The retrieval baseline (`conf/retriever/bm25.yaml`) uses pyserini's k1=0.9, b=0.4:
# `scripts/entity_popularity.py --bm25-k1 0.9 --bm25-b 0.4` counts with those instead.
BM25_K1, BM25_B = 1.5, 0.75


def _mention_pattern(surface: str) -> re.Pattern[str]:
    """Whole-word, case-insensitive occurrences of a surface form."""
    left = r"(?<!\w)" if surface[:1].isalnum() else ""
    right = r"(?!\w)" if surface[-1:].isalnum() else ""
    return re.compile(left + re.escape(surface) + right, re.IGNORECASE)


def bm25_popularity(
    entities: Sequence[str],
    passages: Sequence[str],
    k: int = 1000,
    show_progress: bool = False,
    k1: float = BM25_K1,
    b: float = BM25_B,
) -> list[int]:
    """Occurrences of each surface form in its BM25 top-k passages (bm25s Lucene scoring with
    `k1`/`b`, English stopwords, lowercased, no stemming).

    A passage BM25 scores 0 shares no query term with the form, so it cannot contain the
    form; only positive-score passages of the top k are scanned, which is exact and fast.
    """
    if not passages:
        return [0] * len(entities)
    uniq = sorted({e for e in entities})
    # no empty token: a passage of stopwords only has length 0, as bm25s.tokenize counted it
    tokenizer = bm25_tokenizer(lower=True, stopwords="en", stemmer=None)
    index = bm25_index(
        passages,
        tokenizer,
        k1=k1,
        b=b,
        method="lucene",
        allow_empty=False,
        show_progress=show_progress,
    )
    k = min(k, len(passages))
    # a form with only stopwords (or only unindexed words) retrieves nothing: popularity 0
    docs, scores = bm25_search(
        index, tokenizer, uniq, k, allow_empty=False, show_progress=show_progress
    )
    lowered = [p.lower() for p in passages]
    counts: dict[str, int] = {}
    for i, e in enumerate(uniq):
        pattern = _mention_pattern(e.lower())
        hits = docs[i][scores[i] > 0]
        counts[e] = sum(len(pattern.findall(lowered[d])) for d in hits)
    return [counts[e] for e in entities]


def load_passage_texts(path: str | os.PathLike) -> list[str]:
    """Passage texts (title prepended, as BM25 baselines index Wikipedia) from passages JSONL."""
    return [
        (f"{r['title']} {r['text']}" if r.get("title") else r["text"])
        for r in read_jsonl(path, required=("id",), nonempty=("text",))
    ]
