"""The QA metrics of one benchmark cell: answer recall by words and, with a reader, EM@l."""

from __future__ import annotations

import csv
import os
import time
import unicodedata
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import regex

from densex.metrics.answers import compile_answer_pattern, exact_match, has_answer
from densex.qa.answer_recall import first_answer_words, recall_curve
from densex.qa.budget import first_words
from densex.qa.reader import Reader
from densex.qa.short_answers import short_answer_mask, short_key
from densex.utils.io import DataError, atomic_open, csv_rows, write_jsonl, write_manifest
from densex.utils.logging import get_logger
from densex.utils.records import Record

log = get_logger(__name__)

CURVE_FILE = "answer_recall_by_words.csv"
PREDICTIONS_FILE = "reader_predictions.jsonl"
MANIFEST_FILE = "qa_manifest.json"


def write_curve(path: str | os.PathLike, recall: Sequence[float], step: int = 1) -> Path:
    """`words,recall` rows (recall in percent) for l = 0, step, 2*step, ..., always ending at max."""
    path = Path(path)
    max_words = len(recall) - 1
    ls = list(range(0, max_words + 1, step))
    if ls[-1] != max_words:
        ls.append(max_words)
    with atomic_open(path) as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["words", "recall"])
        for n in ls:
            w.writerow([n, f"{recall[n]:.4f}"])
    return path


def read_curve(path: str | os.PathLike) -> tuple[list[int], list[float]]:
    """Read back an `answer_recall_by_words.csv` (words, recall in percent)."""
    words: list[int] = []
    recall: list[float] = []
    for lineno, row in csv_rows(path, required=("words", "recall")):
        try:
            words.append(int(row["words"]))
        except (TypeError, ValueError) as e:
            raise DataError(path, lineno, "words", f"not an integer: {row['words']!r}") from e
        try:
            recall.append(float(row["recall"]))
        except (TypeError, ValueError) as e:
            raise DataError(path, lineno, "recall", f"not a number: {row['recall']!r}") from e
    return words, recall


def regex_exact_match(prediction: str, patterns: Sequence[str]) -> bool:
    """EM for regex answers (CuratedTREC), as DrQA/DPR-style evaluation scores them
    (`regex_match_score`): some pattern matches at the start of the prediction. Patterns are
    compiled as `has_answer` compiles them (`compile_answer_pattern`: NFD, IGNORECASE |
    UNICODE | MULTILINE), and the prediction is NFD-normalised to match; a pattern that does
    not compile never matches."""
    text = unicodedata.normalize("NFD", prediction.strip())
    for pattern in patterns:
        try:
            compiled = compile_answer_pattern(pattern)
        except regex.error:
            continue
        if compiled.match(text) is not None:
            return True
    return False


def answer_em(prediction: str, answers: Sequence[str], match_type: str = "string") -> bool:
    """EM of one prediction: SQuAD-normalised string equality, or a regex match at the start
    of the prediction for `match_type="regex"` datasets."""
    if match_type == "string":
        return exact_match(prediction, answers)
    if match_type == "regex":
        return regex_exact_match(prediction, answers)
    raise ValueError(f"match_type must be 'string' or 'regex', got {match_type!r}")


def _recall_at(curve: Sequence[float], budget: int, max_words: int) -> dict[str, float]:
    """`answer_recall@l` (percent, 4 decimals) for l = 100, 500 and `budget` within max_words."""
    metrics: dict[str, float] = {}
    for l_words in sorted({100, 500, int(budget)}):
        if l_words <= max_words:
            metrics[f"answer_recall@{l_words}"] = round(float(curve[l_words]), 4)
    return metrics


def qa_metrics(
    questions: Sequence[Record],
    ranked_unit_texts: Sequence[Sequence[str]],
    reader: Reader | None,
    budget: int,
    max_words: int,
    out_dir: str | os.PathLike,
    match_type: str = "string",
    curve_step: int = 1,
    per_question: dict[str, list] | None = None,
    short_answer_words: int | None = None,
) -> dict[str, float]:
    """Answer recall@l words for the whole curve and, with a `reader` (built by the entry
    pipeline: `pipelines.edge.build_reader`), EM@budget.

    `questions` are `{"id", "question", "answers"}` records aligned with `ranked_unit_texts`
    (each question's retrieved unit texts, best first). Writes `answer_recall_by_words.csv`,
    `reader_predictions.jsonl` (with a reader) and `qa_manifest.json` into `out_dir`; returns
    `answer_recall@100`, `answer_recall@500` (those within max_words), `answer_recall@{budget}`
    and `em@{budget}` (percent), and with `short_answer_words` N the same on the questions
    whose shortest answer has at most N words (`qa.short_answers`: `answer_recall@100_short5`,
    ..., `n_short_answer_questions`). A `per_question` dict, when given, receives the
    per-question values: `words_to_answer` (None = not within max_words) and, with a reader,
    `em@{budget}` (bool)."""
    if len(questions) != len(ranked_unit_texts):
        raise ValueError(f"{len(questions)} questions but {len(ranked_unit_texts)} retrievals")
    out = Path(out_dir)
    answers = [list(q["answers"]) for q in questions]
    t0 = time.perf_counter()
    needed = first_answer_words(ranked_unit_texts, answers, max_words, match_type)
    curve = recall_curve(needed, max_words)
    if per_question is not None:
        per_question["words_to_answer"] = list(needed)
    write_curve(out / CURVE_FILE, curve, step=curve_step)
    metrics = _recall_at(curve, budget, max_words)
    short = short_answer_mask(answers, short_answer_words) if short_answer_words else None
    if short is not None:
        metrics.update(_short_recall(needed, short, short_answer_words, budget, max_words))
    manifest: dict[str, Any] = {"questions": len(questions), "budget": int(budget),
                                "max_words": int(max_words), "match_type": match_type,
                                "curve_file": CURVE_FILE,
                                "curve_seconds": round(time.perf_counter() - t0, 3)}  # fmt: skip
    if reader is not None:
        t0 = time.perf_counter()
        correct = _reader_em(reader, questions, answers, ranked_unit_texts, budget, match_type, out)
        metrics.update(_em_metrics(correct, int(budget), short, short_answer_words))
        if per_question is not None:
            per_question[f"em@{int(budget)}"] = [bool(c) for c in correct]
        manifest.update(
            reader=reader.name,
            reader_model=reader.model_path,
            input_format=reader.input_format,
            predictions_file=PREDICTIONS_FILE,
            reader_seconds=round(time.perf_counter() - t0, 3),
        )
    write_manifest(out / MANIFEST_FILE, metrics=metrics, **manifest)
    log.info("qa metrics: %s", metrics)
    return metrics


def _short_recall(
    needed: Sequence[int | None], short: np.ndarray, words: int, budget: int, max_words: int
) -> dict[str, float]:
    """`_recall_at` on the questions of the `short` mask, under `short_key`s, and what they
    were computed on (`short_answer_words`, `n_short_answer_questions`)."""
    subset = [n for n, keep in zip(needed, short) if keep]
    at = _recall_at(recall_curve(subset, max_words), budget, max_words)
    out: dict[str, Any] = {short_key(k, words): v for k, v in at.items()}
    return {**out, "short_answer_words": int(words), "n_short_answer_questions": len(subset)}


def _em_metrics(
    correct: Sequence[bool], budget: int, short: np.ndarray | None, words: int | None
) -> dict[str, float]:
    """`em@{budget}` (percent) and, with a `short` mask, the same on those questions."""
    metrics = {f"em@{budget}": _percent(correct)}
    if short is not None and words:
        kept = [c for c, keep in zip(correct, short) if keep]
        metrics[short_key(f"em@{budget}", words)] = _percent(kept)
    return metrics


def _percent(flags: Sequence[bool]) -> float:
    """The percent of true `flags` (4 decimals; 0 for none)."""
    return round(100.0 * sum(flags) / max(len(flags), 1), 4)


def _reader_em(
    reader: Reader,
    questions: Sequence[Record],
    answers: Sequence[list[str]],
    ranked_unit_texts: Sequence[Sequence[str]],
    budget: int,
    match_type: str,
    out: Path,
) -> list[bool]:
    """EM of the reader's answer to each question from its first `budget` retrieved words;
    writes `reader_predictions.jsonl` into `out`."""
    contexts = [first_words(units, int(budget)) for units in ranked_unit_texts]
    predictions = reader.answer([q["question"] for q in questions], contexts)
    correct = [answer_em(p, a, match_type) for p, a in zip(predictions, answers)]
    write_jsonl(
        out / PREDICTIONS_FILE,
        (
            {
                "id": q.get("id", i),
                "question": q["question"],
                "answers": a,
                "prediction": p,
                "em": bool(c),
                "answer_in_context": has_answer(a, ctx, match_type=match_type),
            }
            for i, (q, a, p, c, ctx) in enumerate(
                zip(questions, answers, predictions, correct, contexts)
            )
        ),
    )
    return correct
