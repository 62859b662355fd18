"""Per-question results of a cell, and win/loss analysis between cells.

Every evaluate cell writes `per_question.jsonl` into its run dir, one row per question:
`id`, `question`, `answers`, `first_hit_rank` (1-based rank of the first passage with an answer
string, DPR's has_answer; null = none in the top k), `hit@k` for each cut-off, `words_to_answer`
(the fewest retrieved words that contain an answer; null = not within the curve's max words),
`em@l` with a reader, and with gold passages `gold_rank`, `rr@10`, `ndcg@10`; EntityQuestions rows
keep `relation`.

`win_loss(a, b, metric)` joins two cells' rows by question id and counts, per bucket, the
questions where only `a` succeeds (win), only `b` (loss), both, or neither; buckets are the
question length in words, the answer type (`answer_type`: number / date / entity / other, by
simple rules on the gold answers) and, where rows carry `popularity` (EntityQuestions, joined
from a popularity file), the entity popularity; a few example questions per bucket.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from densex.qa.short_answers import short_answer_mask, split_short_key
from densex.utils.io import DataError, csv_rows, read_jsonl, write_jsonl
from densex.utils.records import Record

PER_QUESTION_FILE = "per_question.jsonl"

MONTHS = (
    "january", "february", "march", "april", "may", "june", "july", "august", "september",
    "october", "november", "december", "jan", "feb", "mar", "apr", "jun", "jul", "aug", "sep",
    "sept", "oct", "nov", "dec",
)  # fmt: skip
_MONTH = re.compile(r"\b(" + "|".join(MONTHS) + r")\b\.?", re.IGNORECASE)
_YEAR = re.compile(r"^(?:(?:in|by|around|about|c\.|circa)\s+)?[12]\d{3}s?$", re.IGNORECASE)
_CENTURY = re.compile(r"\b\d{1,2}(st|nd|rd|th)\s+century\b|\b(BC|BCE|AD|CE)\b", re.IGNORECASE)
_NUMBER_WORDS = {
    "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
    "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen",
    "nineteen", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety",
    "hundred", "thousand", "million", "billion", "trillion", "half", "dozen", "percent",
}  # fmt: skip
_NUMERIC = re.compile(r"\d")
_WORD = re.compile(r"[A-Za-z][A-Za-z'\-]*")
_STOP = {
    "the", "a", "an", "of", "and", "or", "in", "on", "at", "to", "for", "by", "with", "from",
    "de", "la", "le", "von", "van", "der", "du",
}  # fmt: skip

LENGTH_BINS = ((0, 6), (7, 9), (10, 12), (13, 10**9))


def answer_type(answers: Sequence[str]) -> str:
    """`date` | `number` | `entity` | `other` for a question's gold answers (the first one
    decides; rules: a month name, a bare year or a century/era is a date; any digit or a
    number word is a number; capitalised content words (a proper name) an entity)."""
    if not answers:
        return "other"
    a = str(answers[0]).strip()
    if _MONTH.search(a) or _YEAR.match(a) or _CENTURY.search(a):
        return "date"
    words = _WORD.findall(a)
    if _NUMERIC.search(a) or (words and all(w.lower() in _NUMBER_WORDS for w in words)):
        return "number"
    content = [w for w in words if w.lower() not in _STOP]
    if content and all(w[0].isupper() for w in content):
        return "entity"
    return "other"


def length_bucket(question: str, bins: Sequence[tuple[int, int]] = LENGTH_BINS) -> str:
    """The question's length bin in whitespace words, e.g. `7-9 words`, `13+ words`."""
    n = len(question.split())
    for lo, hi in bins:
        if lo <= n <= hi:
            return f"{lo}+ words" if hi >= 10**9 else f"{lo}-{hi} words"
    return "other"


def popularity_bucket(value: float | None) -> str | None:
    """Entity popularity on a log10 scale: `pop 10^2-10^3` (0 -> `pop 0`); None if unknown."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    if value <= 0:
        return "pop 0"
    e = int(math.floor(math.log10(value)))
    return f"pop 10^{e}-10^{e + 1}"


def per_question_rows(
    questions: Sequence[Record],
    hits: np.ndarray | None,
    topk: Sequence[int],
    extra: Mapping[str, Sequence[Any]] | None = None,
) -> list[dict[str, Any]]:
    """Rows for `per_question.jsonl` from the cell's `[n_questions, K]` has_answer matrix (rank
    order) and per-question `extra` columns (e.g. `words_to_answer`, `em@100`, `gold_rank`).
    `hits` None (questions without answer strings): no `first_hit_rank` / `hit@k` columns."""
    defined = hits is not None
    hits = np.asarray(hits if defined else np.zeros((len(questions), 1)), dtype=bool)
    if hits.shape[0] != len(questions):
        raise ValueError(f"{hits.shape[0]} hit rows for {len(questions)} questions")
    any_hit = hits.any(axis=1)
    first = np.where(any_hit, hits.argmax(axis=1) + 1, 0) if hits.shape[1] else any_hit
    cum = np.logical_or.accumulate(hits, axis=1) if hits.size else hits
    extra = dict(extra or {})
    for name, values in extra.items():
        if len(values) != len(questions):
            raise ValueError(f"{name}: {len(values)} values for {len(questions)} questions")
    rows = []
    for i, q in enumerate(questions):
        row: dict[str, Any] = {
            "id": q.get("id"),
            "question": q["question"],
            "answers": list(q.get("answers") or []),
        }
        if "relation" in q:
            row["relation"] = q["relation"]
        if defined:
            row["first_hit_rank"] = int(first[i]) if first[i] else None
            for k in topk:
                row[f"hit@{k}"] = (
                    bool(cum[i, min(k, hits.shape[1]) - 1]) if hits.shape[1] else False
                )
        for name, values in extra.items():
            v = values[i]
            row[name] = v.item() if isinstance(v, np.generic) else v
        rows.append(row)
    return rows


def write_per_question(out_dir: str | os.PathLike, rows: Iterable[Record]) -> Path:
    """Write `per_question.jsonl` into `out_dir` (atomically)."""
    return write_jsonl(Path(out_dir) / PER_QUESTION_FILE, rows)


def read_per_question(job_dir: str | os.PathLike) -> dict[str, dict[str, Any]]:
    """A cell's `per_question.jsonl` as `{question id: row}` (ids must be unique)."""
    path = Path(job_dir) / PER_QUESTION_FILE
    out: dict[str, dict[str, Any]] = {}
    for lineno, row in enumerate(read_jsonl(path, nonempty=("id",)), start=1):
        qid = str(row["id"])
        if qid in out:
            raise DataError(path, lineno, "id", f"duplicate question id {qid!r}")
        out[qid] = row
    return out


def question_score(row: Record, metric: str) -> float | None:
    """A question's score on a per-question `metric`: the row's value (`hit@k`, `em@l`,
    `rr@10`, `ndcg@10`), or `ar@l` (answer recall within the first l retrieved words: 1 when
    `words_to_answer` <= l, 0 when larger or null); None when the row does not have it. A
    `qa.short_answers` key (`ar@100_short5`) scores the questions whose shortest answer has at
    most N words as its metric does, and is None for the others (left out of the pair)."""
    base, words = split_short_key(metric)
    if words is not None:
        short = short_answer_mask([list(row.get("answers") or [])], words)[0]
        return question_score(row, base) if short else None
    if metric.startswith("ar@"):
        if "words_to_answer" not in row:
            return None
        words = row["words_to_answer"]
        return float(words is not None and int(words) <= int(metric[3:]))
    value = row.get(metric)
    return None if value is None else float(value)


def paired_scores(
    a: Mapping[str, Record], b: Mapping[str, Record], metric: str
) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Question ids both cells scored with `metric` (`question_score`), and the aligned float
    scores (a, b)."""
    ids, sa, sb = [], [], []
    for q, row in a.items():
        if q not in b:
            continue
        x, y = question_score(row, metric), question_score(b[q], metric)
        if x is not None and y is not None:
            ids.append(q)
            sa.append(x)
            sb.append(y)
    return ids, np.array(sa, dtype=np.float64), np.array(sb, dtype=np.float64)


def load_popularity(path: str | os.PathLike) -> dict[str, float]:
    """`{question id: popularity}` from a JSONL (`id`, `popularity`) or CSV with those columns."""
    path = Path(path)
    out: dict[str, float] = {}
    if path.suffix == ".jsonl":
        for row in read_jsonl(path, nonempty=("id",), required=("popularity",)):
            out[str(row["id"])] = float(row["popularity"])
        return out
    for lineno, row in csv_rows(path, required=("id", "popularity")):
        try:
            out[str(row["id"])] = float(row["popularity"])
        except ValueError as e:
            raise DataError(path, lineno, "popularity", "not a number") from e
    return out


BUCKETINGS: dict[str, Callable[[Record], str | None]] = {
    "question length": lambda r: length_bucket(str(r.get("question", ""))),
    "answer type": lambda r: answer_type(r.get("answers") or []),
    "entity popularity": lambda r: popularity_bucket(r.get("popularity")),
}


def win_loss(
    a: Mapping[str, Record],
    b: Mapping[str, Record],
    metric: str,
    n_examples: int = 3,
    popularity: Mapping[str, float] | None = None,
) -> list[dict[str, Any]]:
    """Win/loss rows of cell `a` against cell `b` on a 0/1 per-question `metric`: one row per
    (bucketing, bucket), plus `all`; `wins` = a right and b wrong, `losses` the reverse, `both`,
    `neither`, `n`, and `win_examples` / `loss_examples` (question texts, first `n_examples`)."""
    ids, sa, sb = paired_scores(a, b, metric)
    groups: dict[tuple[str, str], list[int]] = {("all", "all"): list(range(len(ids)))}
    for name, fn in BUCKETINGS.items():
        for i, q in enumerate(ids):
            row = dict(a[q])
            if popularity is not None and q in popularity:
                row["popularity"] = popularity[q]
            bucket = fn(row)
            if bucket is not None:
                groups.setdefault((name, bucket), []).append(i)
    out = []
    for (name, bucket), idx in groups.items():
        x, y = sa[idx] > 0, sb[idx] > 0
        wins = [ids[i] for i, w in zip(idx, x & ~y) if w]
        losses = [ids[i] for i, w in zip(idx, ~x & y) if w]
        out.append(
            {
                "bucketing": name,
                "bucket": bucket,
                "n": len(idx),
                "wins": len(wins),
                "losses": len(losses),
                "both": int(np.sum(x & y)),
                "neither": int(np.sum(~x & ~y)),
                "win_examples": [a[q]["question"] for q in wins[:n_examples]],
                "loss_examples": [a[q]["question"] for q in losses[:n_examples]],
            }
        )
    order = {n: i for i, n in enumerate(["all", *BUCKETINGS])}
    out.sort(key=lambda r: (order[r["bucketing"]], _bucket_sort(r["bucket"])))
    return out


def _bucket_sort(bucket: str) -> tuple:
    m = re.match(r"(?:pop 10\^)?(-?\d+)", bucket)
    return (0, int(m[1]), bucket) if m else (1, 0, bucket)


def examples_json(rows: Sequence[Record]) -> str:
    """Compact JSON of the example lists (for CSV cells)."""
    return json.dumps(list(rows), ensure_ascii=False)
