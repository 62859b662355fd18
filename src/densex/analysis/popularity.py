"""Figure 3 end to end (EntityQuestions recall by entity popularity): the computation of
`densex.qa.entity_questions`, `.mentions` and `.popularity`, written out as CSVs, a plot
(`densex.report.plots`) and a manifest. Layer: analysis, as it joins `qa` with `report`; CLI
`scripts/entity_popularity.py`."""

from __future__ import annotations

import csv
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from densex.qa.entity_questions import EQ_ID_PREFIX, load_eq_questions
from densex.qa.mentions import BM25_B, BM25_K1, bm25_popularity, load_passage_texts
from densex.qa.popularity import (
    PopularityResult,
    RetrievalHits,
    check_join,
    popularity_recall,
    retrieval_hits,
)
from densex.report.plots import plot_popularity
from densex.utils.cache import hash_file
from densex.utils.io import DataError, atomic_open, write_manifest

__all__ = ["run_popularity"]


def _scored_questions(
    questions: list[dict[str, Any]],
    hits: Mapping[str, RetrievalHits],
    retrievals: Mapping[str, str | os.PathLike],
) -> list[dict[str, Any]]:
    """The questions with an entity that occur in some retrieval (all of them without one)."""
    if hits:
        questions = [q for q in questions if any(h.lookup(q) is not None for h in hits.values())]
        if not questions:
            raise DataError(
                next(iter(retrievals.values())),
                None,
                "question",
                "no EntityQuestions question found",
            )
    return [q for q in questions if q["entity"] is not None]


def _write_tables(result: PopularityResult, out: Path, ks: Sequence[int]) -> None:
    """`question_popularity.csv`, and with a table `popularity_recall.csv` and `.png`."""
    with atomic_open(out / "question_popularity.csv") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["id", "relation", "question", "entity", "popularity", "bucket"])
        for q in result.questions:
            w.writerow(
                [q["id"], q["relation"], q["question"], q["entity"], q["popularity"], q["bucket"]]
            )
    if result.table:
        with atomic_open(out / "popularity_recall.csv") as f:
            w = csv.DictWriter(f, fieldnames=list(result.table[0]), lineterminator="\n")
            w.writeheader()
            w.writerows(result.table)
        plot_popularity(result.table, out / "popularity_recall.png", k=max(ks))


def run_popularity(
    passages_path: str | os.PathLike,
    eq_dir: str | os.PathLike,
    retrievals: Mapping[str, str | os.PathLike],
    out_dir: str | os.PathLike,
    ks: Sequence[int] = (20,),
    bm25_k: int = 1000,
    scheme: str = "log",
    n_buckets: int = 5,
    base: float = 10.0,
    id_prefix: str = EQ_ID_PREFIX,
    on_short: str = "warn",
    bm25_k1: float = BM25_K1,
    bm25_b: float = BM25_B,
) -> PopularityResult:
    """Figure 3 end to end: popularity per question, recall@k per bucket, CSVs, PNG, manifest.

    `retrievals` maps a granularity label to its DPR-format retrieval.json; only questions
    that occur in at least one of them are scored (all EQ questions when it is empty). Records
    join questions by id (`{id_prefix}-{relation}-{index}`, the dataset config's name as the
    prefix), by question text only for files without ids.
    """
    out = Path(out_dir)
    questions = load_eq_questions(eq_dir, id_prefix=id_prefix)
    total, extracted = len(questions), sum(q["entity"] is not None for q in questions)
    hits = {g: retrieval_hits(p, ks, on_short=on_short) for g, p in retrievals.items()}
    check_join(questions, hits)
    questions = _scored_questions(questions, hits, retrievals)
    popularity = bm25_popularity(
        [q["entity"] for q in questions],
        load_passage_texts(passages_path),
        bm25_k,
        k1=bm25_k1,
        b=bm25_b,
    )
    result = popularity_recall(questions, popularity, hits, ks, scheme, n_buckets, base)

    _write_tables(result, out, ks)
    write_manifest(
        out / "popularity_manifest.json",
        passages=str(passages_path),
        passages_sha256=hash_file(passages_path),
        eq_dir=str(eq_dir),
        extraction_rate=round(100.0 * extracted / total, 3),
        questions_scored=len(result.questions),
        retrievals={g: str(p) for g, p in retrievals.items()},
        joined_by={g: h.key for g, h in hits.items()},
        short_retrievals={g: h.short for g, h in hits.items()},
        id_prefix=id_prefix,
        ks=list(ks),
        bm25_k=bm25_k,
        bm25_k1=bm25_k1,
        bm25_b=bm25_b,
        scheme=scheme,
        edges=result.edges,
    )
    return result
