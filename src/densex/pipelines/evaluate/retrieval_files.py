"""The retrieval-results files of an evaluate cell, in DPR's and pyserini's formats.

Contract: `write_retrieval_files` streams `retrieval.json{gz}` (DPR: a list of `{question,
answers, ctxs: [{id, score, has_answer}]}`) and `retrieval.pyserini.json{gz}` (`{qid:
{question, answers, contexts: [{docid, score, has_answer}]}}`) row by row, with the passage
text when asked (`title` + `text`; pyserini's `"title\\ntext"`), marking DPR's has_answer on
each retrieved passage (none for a question without answer strings); it returns the
has_answer matrix and the first rows for W&B.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from densex.metrics.answers import has_answer
from densex.utils.json_stream import JsonStream
from densex.utils.logging import get_logger
from densex.utils.progress import track

log = get_logger("densex.pipelines.evaluate.run")  # the stage's log lines keep its name


def write_retrieval_files(
    out_dir: Path, gz: str, questions: list[dict], results: list[Any], passages: Any, K: int,
    match: str, with_text: bool, n_samples: int = 0,
) -> tuple[np.ndarray, list[dict]]:  # fmt: skip
    """Stream `retrieval.json{gz}` (DPR) and `retrieval.pyserini.json{gz}` row by row, marking
    DPR's has_answer on each retrieved passage (text fetched only for those rows); return the
    [n_questions, K] has_answer matrix and the first `n_samples` DPR rows (W&B samples)."""

    hits = np.zeros((len(questions), K), dtype=bool)
    ids = question_keys(questions)
    samples: list[dict] = []
    with (
        JsonStream(out_dir / f"retrieval.json{gz}", "[") as dpr,
        JsonStream(out_dir / f"retrieval.pyserini.json{gz}", "{") as pyserini,
    ):
        pairs = track(list(zip(questions, results)), "answers in passages", unit="questions")
        for qi, (q, r) in enumerate(pairs):
            ctxs, contexts = _contexts(q, r, passages, match, with_text, hits[qi])
            dpr_row = {"id": q.get("id"), "question": q["question"], "answers": q["answers"],
                       "ctxs": ctxs}  # fmt: skip
            dpr.item(dpr_row)
            pyserini.item({"question": q["question"], "answers": q["answers"],
                           "contexts": contexts}, key=ids[qi])  # fmt: skip
            if len(samples) < n_samples:
                samples.append(dpr_row)
    return hits, samples


def _contexts(
    q: dict, r: Any, passages: Any, match: str, with_text: bool, hits: np.ndarray
) -> tuple[list[dict], list[dict]]:
    """One question's retrieved passages as DPR `ctxs` and pyserini `contexts`; marks each
    passage's has_answer in `hits` (the question's row of the matrix)."""
    rows = r.passage_rows
    texts = passages.take("text", rows)
    titles = passages.take("title", rows) if with_text else [None] * len(rows)
    pids = passages.take("id", rows)
    ctxs, contexts = [], []
    defined = bool(q["answers"])  # no answer strings (BEIR): has_answer is undefined, not false
    for rank, score in enumerate(short_floats(r.passage_scores)):
        hit = bool(has_answer(q["answers"], texts[rank], match)) if defined else None
        hits[rank] = bool(hit)
        ctx = {"id": pids[rank]}
        row = {"docid": pids[rank], "score": score}
        if with_text:
            ctx |= {"title": titles[rank] or "", "text": texts[rank]}
            row["text"] = pyserini_text(titles[rank], texts[rank])
        ctxs.append({**ctx, "score": score, **({"has_answer": hit} if defined else {})})
        contexts.append({**row, **({"has_answer": hit} if defined else {})})
    return ctxs, contexts


def question_keys(questions: list[dict]) -> list[str]:
    """The keys of retrieval.pyserini.json: question ids, or indexes when ids are missing or
    repeated (with a warning)."""
    ids = [str(q["id"]) if q.get("id") is not None else None for q in questions]
    if None in ids or len(set(ids)) != len(ids):
        log.warning("question ids missing or repeated: retrieval.pyserini.json keys by index")
        ids = [str(i) for i in range(len(questions))]
    return ids


def pyserini_text(title: str | None, text: str) -> str:
    """pyserini's `--combine-title-text` context: "title\\ntext" (its evaluator matches answers
    after the newline, so newlines inside title or text become spaces)."""
    return " ".join(str(title or "").split("\n")) + "\n" + " ".join(text.split("\n"))


def short_floats(values: np.ndarray) -> list[float]:
    """float32 scores as the shortest decimals that round-trip to the same float32 (what the
    index computed, without float64 noise digits: smaller, better-compressed files)."""
    return [float(x) for x in np.asarray(values, np.float32).astype(str)]
