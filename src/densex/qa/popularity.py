"""Recall by entity popularity on EntityQuestions (the paper's Figure 3 and Appendix E).

Questions are bucketed by their entity's popularity (`qa.mentions.bm25_popularity`) and
recall@k is compared per bucket and granularity, from each granularity's DPR-format
retrieval.json (`retrieval_hits`, joined to the questions by id): the paper finds
propositions help most on rare (long-tail) entities.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from densex.utils.io import DataError, read_json
from densex.utils.logging import get_logger
from densex.utils.records import Record

log = get_logger(__name__)


def bucket_edges(
    values: Sequence[float], scheme: str = "log", n_buckets: int = 5, base: float = 10.0
) -> list[float]:
    """Bucket boundaries: `log` = [0, 1, base, base^2, ...] (zero gets its own bucket);
    `quantile` = equal-count buckets (ties merged). Bucket b holds edges[b] <= v < edges[b+1]."""
    v = np.asarray(values, dtype=float)
    top = float(v.max()) if v.size else 0.0
    if scheme == "log":
        edges = [0.0, 1.0]
        while edges[-1] <= top:
            edges.append(edges[-1] * base)
        return edges
    if scheme == "quantile":
        qs = np.quantile(v, np.linspace(0, 1, n_buckets + 1)) if v.size else np.zeros(2)
        edges = sorted(set(float(x) for x in qs[:-1]))
        return edges + [top + 1.0]
    raise ValueError(f"bucket scheme must be 'log' or 'quantile', got {scheme!r}")


def bucket_index(value: float, edges: Sequence[float]) -> int:
    """Index b with edges[b] <= value < edges[b+1] (values past the ends are clamped)."""
    b = int(np.searchsorted(np.asarray(edges), value, side="right")) - 1
    return min(max(b, 0), len(edges) - 2)


def bucket_label(lo: float, hi: float) -> str:
    """`0`, `1-9`, `10-99`, ...: integer ranges people read at a glance."""
    lo_i, hi_i = int(math.ceil(lo)), int(math.ceil(hi)) - 1
    return str(lo_i) if hi_i <= lo_i else f"{lo_i}-{hi_i}"


class RetrievalHits(dict):
    """Question key -> {k: any has_answer in the top k}, from one retrieval.json.

    `key` is `"id"` (every record has an id) or `"question"` (the stripped question text, the
    fallback for files without ids); `texts` maps each key to its question text; `short` counts
    the records holding fewer than max(k) contexts.
    """

    def __init__(self, path: str | os.PathLike, key: str) -> None:
        super().__init__()
        self.path, self.key = Path(path), key
        self.texts: dict[str, str] = {}
        self.short = 0

    def key_of(self, question: Record) -> str | None:
        """The key a question row is looked up by (None: it has no id in an id-keyed file)."""
        if self.key == "id":
            qid = question.get("id")
            return None if qid is None else str(qid)
        return str(question["question"]).strip()

    def lookup(self, question: Record) -> dict[int, bool] | None:
        key = self.key_of(question)
        return None if key is None else self.get(key)


def retrieval_hits(
    path: str | os.PathLike, ks: Iterable[int], on_short: str = "warn"
) -> RetrievalHits:
    """Hits per question from a DPR-format retrieval.json, keyed by question id.

    Files whose records lack ids are keyed by question text; a text that occurs more than once
    with different answers or different hits is ambiguous and raises a `DataError`. A record
    with fewer than max(k) contexts makes recall@k count a miss past its last context:
    `on_short="warn"` logs once how many records are short, `"raise"` raises a `DataError`.
    """
    if on_short not in ("warn", "raise"):
        raise ValueError(f"on_short must be 'warn' or 'raise', got {on_short!r}")
    data = read_json(path)
    if not isinstance(data, list):
        raise DataError(path, None, None, "expected a JSON list of DPR retrieval records")
    ks = sorted(set(ks))
    by_id = bool(data) and all(isinstance(r, dict) and r.get("id") is not None for r in data)
    out = RetrievalHits(path, "id" if by_id else "question")
    answers_of: dict[str, Any] = {}
    fewest: int | None = None
    for i, rec in enumerate(data):
        if not isinstance(rec, dict) or not isinstance(rec.get("question"), str):
            raise DataError(path, None, "question", f"record {i}: missing or not a string")
        ctxs = rec.get("ctxs")
        if not isinstance(ctxs, list):
            raise DataError(path, None, "ctxs", f"record {i}: missing or not a list")
        flags = []
        for j, c in enumerate(ctxs):
            if not isinstance(c, dict) or "has_answer" not in c:
                raise DataError(path, None, "has_answer", f"record {i}, ctx {j}: missing")
            flags.append(bool(c["has_answer"]))
        if ks and len(flags) < ks[-1]:
            out.short += 1
            fewest = len(flags) if fewest is None else min(fewest, len(flags))
        first = next((j for j, f in enumerate(flags) if f), None)
        hit = {k: first is not None and first < k for k in ks}
        text = rec["question"].strip()
        key = str(rec["id"]) if by_id else text
        if key in out:
            if by_id:
                raise DataError(path, None, "id", f"record {i}: duplicate question id {key!r}")
            if out[key] != hit or answers_of[key] != rec.get("answers"):
                raise DataError(
                    path,
                    None,
                    "question",
                    f"record {i}: question {text!r} occurs more than once with different "
                    "answers or hits; without ids the records cannot be told apart (write "
                    "retrieval.json with question ids)",
                )
        out[key], out.texts[key], answers_of[key] = hit, text, rec.get("answers")
    if out.short:
        message = (
            f"{out.short} of {len(data)} records hold fewer than {ks[-1]} contexts (fewest "
            f"{fewest}): recall@k counts them as misses past their last context"
        )
        if on_short == "raise":
            raise DataError(path, None, "ctxs", message)
        log.warning("%s: %s", path, message)
    return out


def check_join(questions: Sequence[Record], hits: Mapping[str, RetrievalHits]) -> None:
    """Refuse joins that would silently pair a question with another question's retrieval:
    ids whose question text differs, ids unknown to the question set, and (text-keyed files)
    question texts shared by questions with different answers."""
    by_id = {str(q["id"]): q for q in questions if q.get("id") is not None}
    answers_by_text: dict[str, set[tuple[str, ...]]] = {}
    for q in questions:
        answers_by_text.setdefault(q["question"].strip(), set()).add(tuple(q["answers"]))
    for h in hits.values():
        if h.key == "id":
            unknown = [k for k in h if k not in by_id]
            if unknown:
                raise DataError(
                    h.path,
                    None,
                    "id",
                    f"{len(unknown)} of {len(h)} question ids are not EntityQuestions ids "
                    f"(e.g. {unknown[0]!r}, expected like {next(iter(by_id), '?')!r}): "
                    "is the id prefix the dataset name the retrieval was run with?",
                )
            for k in h:
                if h.texts[k] != by_id[k]["question"].strip():
                    raise DataError(
                        h.path,
                        None,
                        "question",
                        f"id {k!r} is {h.texts[k]!r} here but {by_id[k]['question']!r} in "
                        "EntityQuestions",
                    )
        else:
            for text in h:
                if len(answers_by_text.get(text, ())) > 1:
                    raise DataError(
                        h.path,
                        None,
                        "question",
                        f"question {text!r} occurs in EntityQuestions with different answers "
                        "and this file has no ids to tell them apart",
                    )


def _lookup(hits: Mapping[str, Mapping[int, bool]], question: Record) -> Any:
    if isinstance(hits, RetrievalHits):
        return hits.lookup(question)
    return hits.get(question["question"].strip())


@dataclass
class PopularityResult:
    """Per-question popularity and the recall@k table by bucket and granularity."""

    questions: list[dict[str, Any]]  # relation, question, entity, popularity, bucket
    edges: list[float]
    table: list[dict[str, Any]]  # granularity, bucket, label, lo, hi, n, recall@k...


def popularity_recall(
    questions: Sequence[Record],
    popularity: Sequence[int],
    hits_by_granularity: Mapping[str, Mapping[str, Mapping[int, bool]]],
    ks: Sequence[int] = (20,),
    scheme: str = "log",
    n_buckets: int = 5,
    base: float = 10.0,
) -> PopularityResult:
    """Recall@k (percent) per popularity bucket for each granularity's retrieval hits.

    Questions are joined to hits by id (by stripped question text for plain mappings and
    text-keyed `RetrievalHits`); questions absent from a granularity's hits are left out of
    that granularity's counts.
    """
    edges = bucket_edges(popularity, scheme, n_buckets, base)
    rows = []
    for q, pop in zip(questions, popularity):
        b = bucket_index(pop, edges)
        rows.append({**q, "popularity": int(pop), "bucket": b})
    table = []
    for gran, hits in hits_by_granularity.items():
        for b in range(len(edges) - 1):
            members = [_lookup(hits, r) for r in rows if r["bucket"] == b]
            members = [m for m in members if m is not None]
            rec: dict[str, Any] = {
                "granularity": gran,
                "bucket": b,
                "label": bucket_label(edges[b], edges[b + 1]),
                "lo": edges[b],
                "hi": edges[b + 1],
                "n": len(members),
            }
            for k in ks:
                rec[f"recall@{k}"] = (
                    round(100.0 * sum(m[k] for m in members) / len(members), 2)
                    if members
                    else float("nan")
                )
            table.append(rec)
    return PopularityResult(rows, edges, table)
