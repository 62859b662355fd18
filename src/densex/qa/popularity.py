"""Entity popularity on EntityQuestions (the paper's Figure 3 and Appendix E).

Each EntityQuestions question is a relation template filled with an entity's surface form,
so the form is recovered exactly by matching the template. Popularity is how often that form
occurs (case-insensitive, whole words) in the BM25 top-1000 passages retrieved with the form
as the query. Questions are bucketed by popularity and recall@k is compared per bucket and
granularity: the paper finds propositions help most on rare (long-tail) entities.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from densex.data.questions import load_questions
from densex.utils.io import DataError, read_json, read_jsonl
from densex.utils.logging import get_logger

log = get_logger(__name__)

# The 24 EntityQuestions relation templates (Sciavolino et al. 2021), [X] = subject entity.
TEMPLATES: dict[str, str] = {
    "P17": "Which country is [X] located in?",
    "P19": "Where was [X] born?",
    "P20": "Where did [X] die?",
    "P26": "Who is [X] married to?",
    "P36": "What is the capital of [X]?",
    "P40": "Who is [X]'s child?",
    "P50": "Who is the author of [X]?",
    "P69": "Where was [X] educated?",
    "P106": "What kind of work does [X] do?",
    "P112": "Who founded [X]?",
    "P127": "Who owns [X]?",
    "P131": "Where is [X] located?",
    "P136": "What type of music does [X] play?",
    "P159": "Where is the headquarter of [X]?",
    "P170": "Who was [X] created by?",
    "P175": "Who performed [X]?",
    "P176": "Which company is [X] produced by?",
    "P264": "What music label is [X] represented by?",
    "P276": "Where is [X] located?",
    "P407": "Which language was [X] written in?",
    "P413": "What position does [X] play?",
    "P495": "Which country was [X] created in?",
    "P740": "Where was [X] founded?",
    "P800": "What is [X] famous for?",
}


def _compile(template: str) -> re.Pattern[str]:
    head, tail = template.split("[X]")
    return re.compile("^" + re.escape(head) + r"(?P<x>.+?)" + re.escape(tail) + "$", re.DOTALL)


_PATTERNS = {rel: _compile(t) for rel, t in TEMPLATES.items()}
# without a relation, try the templates with the most fixed text first (most specific)
_BY_SPECIFICITY = sorted(TEMPLATES, key=lambda r: -len(TEMPLATES[r].replace("[X]", "")))


def extract_entity(question: str, relation: str | None = None) -> str | None:
    """The entity surface form in a templated question, or None if no template matches."""
    q = question.strip()
    if relation is not None:
        if relation not in _PATTERNS:
            raise KeyError(f"unknown EntityQuestions relation {relation!r}")
        m = _PATTERNS[relation].match(q)
        return m.group("x").strip() if m else None
    for rel in _BY_SPECIFICITY:
        m = _PATTERNS[rel].match(q)
        if m:
            return m.group("x").strip()
    return None


def relation_of(path: str | os.PathLike) -> str:
    """`P19` from `.../P19.test.json`."""
    return Path(path).name.split(".")[0]


def load_eq_questions(eq_dir: str | os.PathLike, split: str = "test") -> list[dict[str, Any]]:
    """All `P*.{split}.json` questions (the project's EQ loader) plus the extracted `entity`."""
    rows = load_questions(eq_dir, "eq", split=split)
    for row in rows:
        rel = row["relation"]
        row["entity"] = extract_entity(row["question"], rel) if rel in TEMPLATES else None
    return rows


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
) -> list[int]:
    """Occurrences of each surface form in its BM25 top-k passages (bm25s, English stopwords).

    A passage BM25 scores 0 shares no query term with the form, so it cannot contain the
    form; only positive-score passages of the top k are scanned, which is exact and fast.
    """
    import bm25s

    if not passages:
        return [0] * len(entities)
    uniq = sorted({e for e in entities})
    retriever = bm25s.BM25()
    retriever.index(
        bm25s.tokenize(list(passages), stopwords="en", show_progress=show_progress),
        show_progress=show_progress,
    )
    query_tokens = bm25s.tokenize(
        uniq, stopwords="en", return_ids=False, show_progress=show_progress
    )
    k = min(k, len(passages))
    counts: dict[str, int] = {}
    lowered = [p.lower() for p in passages]
    nonempty = [i for i, toks in enumerate(query_tokens) if toks]
    for e in uniq:
        counts[e] = 0  # a form with only stopwords retrieves nothing: popularity 0
    if nonempty:
        docs, scores = retriever.retrieve(
            [query_tokens[i] for i in nonempty], k=k, show_progress=show_progress, n_threads=1
        )
        for row, i in enumerate(nonempty):
            pattern = _mention_pattern(uniq[i].lower())
            hits = docs[row][scores[row] > 0]
            counts[uniq[i]] = sum(len(pattern.findall(lowered[d])) for d in hits)
    return [counts[e] for e in entities]


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


def retrieval_hits(path: str | os.PathLike, ks: Iterable[int]) -> dict[str, dict[int, bool]]:
    """Question text -> {k: any has_answer in the top k} from a DPR-format retrieval.json."""
    data = read_json(path)
    if not isinstance(data, list):
        raise DataError(path, None, None, "expected a JSON list of DPR retrieval records")
    ks = sorted(set(ks))
    out: dict[str, dict[int, bool]] = {}
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
        first = next((j for j, f in enumerate(flags) if f), None)
        out[rec["question"].strip()] = {k: first is not None and first < k for k in ks}
    return out


@dataclass
class PopularityResult:
    """Per-question popularity and the recall@k table by bucket and granularity."""

    questions: list[dict[str, Any]]  # relation, question, entity, popularity, bucket
    edges: list[float]
    table: list[dict[str, Any]]  # granularity, bucket, label, lo, hi, n, recall@k...


def popularity_recall(
    questions: Sequence[Mapping[str, Any]],
    popularity: Sequence[int],
    hits_by_granularity: Mapping[str, Mapping[str, Mapping[int, bool]]],
    ks: Sequence[int] = (20,),
    scheme: str = "log",
    n_buckets: int = 5,
    base: float = 10.0,
) -> PopularityResult:
    """Recall@k (percent) per popularity bucket for each granularity's retrieval hits.

    Questions absent from a granularity's hits are left out of that granularity's counts.
    """
    edges = bucket_edges(popularity, scheme, n_buckets, base)
    rows = []
    for q, pop in zip(questions, popularity):
        b = bucket_index(pop, edges)
        rows.append({**q, "popularity": int(pop), "bucket": b})
    table = []
    for gran, hits in hits_by_granularity.items():
        for b in range(len(edges) - 1):
            members = [hits.get(r["question"].strip()) for r in rows if r["bucket"] == b]
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


def load_passage_texts(path: str | os.PathLike) -> list[str]:
    """Passage texts (title prepended, as BM25 baselines index Wikipedia) from passages JSONL."""
    return [
        (f"{r['title']} {r['text']}" if r.get("title") else r["text"])
        for r in read_jsonl(path, required=("id",), nonempty=("text",))
    ]


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
) -> PopularityResult:
    """Figure 3 end to end: popularity per question, recall@k per bucket, CSVs, PNG, manifest.

    `retrievals` maps a granularity label to its DPR-format retrieval.json; only questions
    that occur in at least one of them are scored (all EQ questions when it is empty).
    """
    import csv

    from densex.report.plots import plot_popularity
    from densex.utils.cache import hash_file
    from densex.utils.io import atomic_open, write_manifest

    out = Path(out_dir)
    questions = load_eq_questions(eq_dir)
    total, extracted = len(questions), sum(q["entity"] is not None for q in questions)
    hits = {g: retrieval_hits(p, ks) for g, p in retrievals.items()}
    if hits:
        wanted = set().union(*(h.keys() for h in hits.values()))
        questions = [q for q in questions if q["question"].strip() in wanted]
        if not questions:
            raise DataError(
                next(iter(retrievals.values())),
                None,
                "question",
                "no EntityQuestions question found",
            )
    questions = [q for q in questions if q["entity"] is not None]
    popularity = bm25_popularity(
        [q["entity"] for q in questions], load_passage_texts(passages_path), bm25_k
    )
    result = popularity_recall(questions, popularity, hits, ks, scheme, n_buckets, base)

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
    write_manifest(
        out / "popularity_manifest.json",
        passages=str(passages_path),
        passages_sha256=hash_file(passages_path),
        eq_dir=str(eq_dir),
        extraction_rate=round(100.0 * extracted / total, 3),
        questions_scored=len(result.questions),
        retrievals={g: str(p) for g, p in retrievals.items()},
        ks=list(ks),
        bm25_k=bm25_k,
        scheme=scheme,
        edges=result.edges,
    )
    return result
