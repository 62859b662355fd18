"""Per-question retrieval scores of the validation loop and their paired comparison.

For one set of units (sentences or a model's propositions) of the validation passages:
the rank of the first retrieved passage holding an answer (DPR has_answer on the passage
text; passages ranked by their best unit, `retrieval.search.retrieve_passages`, as
`evaluate.py` ranks them) and the number of retrieved words needed to reach an answer
(`qa.answer_recall.first_answer_words` over the ranked units' words). From them:

- `R@k`: percent of questions with an answer passage among the top k;
- `AR@l`: percent of the *short* questions (shortest answer at most
  `sources.SHORT_ANSWER_WORDS` words: SQuAD train has one answer per question, often a
  clause, which a short unit cannot hold) with an answer within the first l retrieved words;
  `AR@l_all` over every question;
- paired tests of the propositions against the sentences on the same questions
  (`analysis.significance.paired_test`: bootstrap CI, randomization p) of R@1, R@5 and AR@l.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from densex.analysis.significance import N_RESAMPLES, paired_test
from densex.metrics.answers import has_answer
from densex.qa.answer_recall import first_answer_words
from densex.retrieval.faiss_index import build_index
from densex.retrieval.search import retrieve_passages
from densex.utils.records import Record

__all__ = ["QuestionScores", "paired_tests", "question_scores", "recall_metrics"]

PAIRED_KS = (1, 5)  # the recall cut-offs tested against the sentences


class MatrixSearcher:
    """Exact inner-product search over `vectors` for queries encoded ahead (`qvec`, by text)."""

    def __init__(self, vectors: np.ndarray, qvec: dict[str, np.ndarray]) -> None:
        self.index, self.qvec = build_index(vectors), qvec

    @property
    def ntotal(self) -> int:
        return self.index.ntotal

    def search(self, queries: Sequence[str], n: int) -> tuple[np.ndarray, np.ndarray]:
        return self.index.search(np.stack([self.qvec[q] for q in queries]), n)


@dataclass(frozen=True)
class QuestionScores:
    """Per question (aligned with the questions): `rank`, the 0-based rank of the first
    passage holding an answer (`depth` when none of the top `depth` does), and `words`, the
    retrieved words needed to reach an answer (`max_words + 1` when more)."""

    rank: np.ndarray
    words: np.ndarray
    depth: int
    max_words: int

    def hits(self, k: int) -> np.ndarray:
        """1.0 where an answer passage is among the top `k` (at most `depth`), else 0.0."""
        if k > self.depth:
            raise ValueError(f"recall@{k} needs passages ranked to depth {k}, not {self.depth}")
        return (self.rank < k).astype(np.float64)

    def answered(self, words: int) -> np.ndarray:
        """1.0 where an answer lies within the first `words` retrieved words, else 0.0."""
        return (self.words <= words).astype(np.float64)


def question_scores(
    unit_vectors: np.ndarray,
    units: tuple[Sequence[int], Sequence[str]],
    questions: Sequence[Record],
    qvec: dict[str, np.ndarray],
    passage_texts: Sequence[str],
    depth: int,
    max_words: int,
) -> QuestionScores:
    """`QuestionScores` of `questions` over units (`units`: each unit's passage index and
    text, aligned with `unit_vectors`). Every question fetches at least `max_words` units, so
    its ranked units reach `max_words` words whenever the index holds them."""
    owners, texts = units
    searcher = MatrixSearcher(np.ascontiguousarray(unit_vectors, dtype=np.float32), qvec)
    queries = [q["question"] for q in questions]
    found = retrieve_passages(searcher, queries, owners, depth, n_start=max(depth + 1, max_words))
    rank = np.full(len(questions), depth, dtype=np.int64)
    for i, (q, r) in enumerate(zip(questions, found)):
        hits = [has_answer(q["answers"], passage_texts[p]) for p in r.passage_rows.tolist()]
        rank[i] = hits.index(True) if True in hits else depth
    ranked = [[texts[u] for u in r.unit_rows.tolist()] for r in found]
    needed = first_answer_words(ranked, [q["answers"] for q in questions], max_words)
    words = np.array([max_words + 1 if n is None else n for n in needed], dtype=np.int64)
    return QuestionScores(rank, words, depth, max_words)


def recall_metrics(
    scores: QuestionScores, short: np.ndarray, ks: Sequence[int], prefix: str
) -> dict[str, float]:
    """`{prefix}R@k` for each k, `{prefix}AR@l` on the short questions and `{prefix}AR@l_all`
    on all (l = `scores.max_words`), in percent (0 for no question)."""
    out = {f"{prefix}R@{k}": _percent(scores.hits(k)) for k in ks}
    answered = scores.answered(scores.max_words)
    out[f"{prefix}AR@{scores.max_words}"] = _percent(answered[short])
    out[f"{prefix}AR@{scores.max_words}_all"] = _percent(answered)
    return out


def _percent(values: np.ndarray) -> float:
    return float(100.0 * values.mean()) if len(values) else 0.0


def paired_tests(
    props: QuestionScores,
    sentences: QuestionScores,
    short: np.ndarray,
    n_resamples: int = N_RESAMPLES,
    seed: int = 0,
) -> dict[str, dict[str, Any]]:
    """`{metric: paired_test(propositions, sentences).as_dict()}` for R@1, R@5 (every
    question; those within the ranked depth) and AR@l (the short questions), on the same
    questions."""
    ks = [k for k in PAIRED_KS if k <= props.depth]
    pairs = {f"R@{k}": (props.hits(k), sentences.hits(k)) for k in ks}
    words = props.max_words
    pairs[f"AR@{words}"] = (props.answered(words)[short], sentences.answered(words)[short])
    return {
        name: paired_test(a, b, n_resamples=n_resamples, seed=seed).as_dict()
        for name, (a, b) in pairs.items()
        if len(a)
    }
