"""Question sets in the formats they ship in, as `{"id", "question", "answers": [...]}` rows.

Formats (`dataset.format`):
- `jsonl`: the project's own rows `{"id", "question", "answers"}` (e.g. squad-open);
- `dpr-jsonl` (alias `nq-open`): `{"question", "answer": [...]}` — NQ-open, DPR's WebQ/SQuAD/TREC;
- `dpr-tsv`: `question<TAB>['ans', ...]` (a Python list literal), read as tab-separated CSV
  because some rows use CSV quoting (TriviaQA);
- `webq-brmson`: a JSON list of `{"qId", "qText", "answers"}`;
- `eq`: EntityQuestions, a JSON list of `{"question", "answers"}` per Wikidata relation — a
  directory of `P*.test.json` or one file; each row keeps `"relation"`;
- `squad`: SQuAD v1.1 JSON (answers = the distinct gold answer texts);
- `hf`: a Hugging Face dataset (hub id, `save_to_disk` directory or `Dataset`), with the column
  layouts of nq_open, trivia_qa (answer value + aliases), web_questions and squad.

Formats without ids get `f"{id_prefix}-{index}"`: index = line number - 1 for line-based files,
else the record's position (from 0) — stable across runs and unaffected by skipped records.
Answers keep their order with exact duplicates removed (no metric depends on duplicates).
`dataset.titles` keeps the questions of some SQuAD articles only (`article_question_ids`, by
the SQuAD JSON `dataset.articles`), before `limit` counts.

`match: regex` answers (CuratedTREC) are compiled up front with the scorer's own
`compile_answer_pattern`: a pattern broken as written is a `DataError`; one that compiles as
written but not once NFD-normalised (as DPR and the scorer compile it, e.g. `P\\étain`) never
matches — kept, as in DPR, but counted and logged with its file and line (`UnmatchablePattern`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from densex.corpus.documents import load_hf
from densex.corpus.readers import Skips, why_not_text
from densex.data.article_filter import article_question_ids
from densex.data.beir import load_beir_queries
from densex.data.qrels import read_qrels
from densex.data.question_formats import (
    RawQuestion,
    dpr_tsv_records,
    eq_files,
    hf_answers,
    json_list,
    json_object,
    jsonl_records,
    resolve_hf_schema,
    squad_records,
    webq_brmson_records,
)
from densex.data.regex_answers import UnmatchablePattern, check_regex_answers
from densex.data.spec import DatasetSpec
from densex.utils.io import DataError
from densex.utils.logging import get_logger
from densex.utils.records import Record

log = get_logger(__name__)

__all__ = [
    "FORMATS",
    "has_answer_strings",
    "load_dataset_questions",
    "load_questions",
    "questions_from_hf",
]

FORMATS = ("jsonl", "dpr-jsonl", "nq-open", "dpr-tsv", "webq-brmson", "eq", "squad", "hf")


class _Collector:
    """Validates raw records into question rows; errors go through the `on_error` policy."""

    def __init__(
        self, skips: Skips, id_prefix: str, limit: int | None, keep: set[str] | None = None
    ) -> None:
        self.skips, self.id_prefix, self.limit, self.keep = skips, id_prefix, limit, keep
        self.rows: list[dict[str, Any]] = []
        self.ids: set[str] = set()
        self.where: dict[str, tuple[Any, int | None, str]] = {}  # id -> (source, line, prefix)

    @property
    def full(self) -> bool:
        return self.limit is not None and len(self.rows) >= self.limit

    def add(
        self, source: Any, raw: RawQuestion, index: int, answers_field: str = "answers"
    ) -> None:
        line, qid, question, answers, extra, where = raw
        if self.keep is not None and str(qid) not in self.keep:
            return None  # a question of an article the dataset's title filter leaves out
        answers_field = where + answers_field
        if not isinstance(question, str) or not question.strip():
            why = why_not_text(question, missing=question is None)
            return self.skips(DataError(source, line, f"{where}question", why))
        if not isinstance(answers, (list, tuple)):
            what = (
                "missing" if answers is None else f"expected a list, got {type(answers).__name__}"
            )
            return self.skips(DataError(source, line, answers_field, what))
        kept: list[str] = []
        for i, a in enumerate(answers):
            if not isinstance(a, str) or not a.strip():
                self.skips(
                    DataError(source, line, f"{answers_field}[{i}]", "empty or not a string")
                )
            elif a not in kept:
                kept.append(a)
        if not kept:
            return self.skips(DataError(source, line, answers_field, "no answers"))
        qid = str(qid) if qid not in (None, "") else f"{self.id_prefix}-{index}"
        if qid in self.ids:
            return self.skips(
                DataError(source, line, f"{where}id", f"duplicate question id {qid!r}")
            )
        self.ids.add(qid)
        self.where[qid] = (source, line, where)
        self.rows.append({"id": qid, "question": question.strip(), "answers": kept, **extra})


def questions_from_hf(
    ds: Any,
    schema: str = "generic",
    *,
    id_prefix: str = "hf",
    source: str = "dataset",
    limit: int | None = None,
    on_error: str = "raise",
    skips: Skips | None = None,
) -> list[dict[str, Any]]:
    """Question rows from a loaded `datasets.Dataset` with a known column layout."""
    return _from_hf(ds, schema, id_prefix, source, limit, skips or Skips(on_error)).rows


def _from_hf(
    ds: Any, schema: str, id_prefix: str, source: str, limit: int | None, skips: Skips
) -> _Collector:
    schema = resolve_hf_schema(None, schema)
    collector = _Collector(skips, id_prefix, limit)
    for i, row in enumerate(ds):
        if collector.full:
            break
        qid, answers, field = hf_answers(schema, row)
        collector.add(source, (None, qid, row.get("question"), answers, {}, f"[{i}]."), i, field)
    return collector


def load_questions(
    path: str | os.PathLike,
    format: str,
    *,
    split: str | None = None,
    hf_name: str | None = None,
    limit: int | None = None,
    on_error: str = "raise",
    id_prefix: str | None = None,
    hf_schema: str | None = None,
    skips: Skips | None = None,
    keep: set[str] | None = None,
) -> list[dict[str, Any]]:
    """Load a question set as `{"id", "question", "answers"}` rows (see the module doc);
    `keep` (question ids) drops the others before `limit` counts.

    Bad records raise a `DataError` naming file, line (or JSON path) and field; with
    `on_error="skip"` they are counted in `skips` (pass one in to read the counts).
    """
    skips = skips or Skips(on_error)
    return _load(
        path, format, split=split, hf_name=hf_name, limit=limit, id_prefix=id_prefix,
        hf_schema=hf_schema, skips=skips, keep=keep,
    ).rows  # fmt: skip


def _load(
    path: str | os.PathLike,
    format: str,
    *,
    split: str | None,
    hf_name: str | None,
    limit: int | None,
    id_prefix: str | None,
    hf_schema: str | None,
    skips: Skips,
    keep: set[str] | None = None,
) -> _Collector:
    if format == "hf":
        ds = load_hf(path, hf_name, split)
        schema = resolve_hf_schema(path, hf_schema)
        prefix = id_prefix or resolve_hf_schema(path, None)
        collector = _from_hf(ds, schema, prefix, f"{path}[{split}]", limit, skips)
        return _done(path, collector, skips)
    path = Path(os.path.expanduser(str(path)))
    prefix = id_prefix or path.name.split(".")[0]
    collector = _Collector(skips, prefix, limit, keep)
    if format == "eq":
        for file in eq_files(path, split):
            relation = file.name.split(".")[0]
            collector.id_prefix = f"{prefix}-{relation}" if path.is_dir() else prefix
            for i, item in enumerate(json_list(file)):
                if collector.full:
                    break
                if (row := json_object(file, i, item, skips)) is not None:
                    extra = {"relation": relation}
                    raw = (None, None, row.get("question"), row.get("answers"), extra, f"[{i}].")
                    collector.add(file, raw, i)
        return _done(path, collector, skips)
    if format == "jsonl":
        records = jsonl_records(path, skips, "id", "answers")
    elif format in ("dpr-jsonl", "nq-open"):
        records = jsonl_records(path, skips, None, "answer")
    elif format == "dpr-tsv":
        records = dpr_tsv_records(path, skips)
    elif format == "webq-brmson":
        records = webq_brmson_records(path, skips)
    elif format == "squad":
        records = squad_records(path, skips)
    else:
        raise ValueError(f"unknown question format {format!r} (one of {FORMATS})")
    field = "answer" if format in ("dpr-jsonl", "nq-open") else "answers"
    for i, raw in enumerate(records):
        if collector.full:
            break
        # line-numbered formats index by line, so a skipped line never shifts later ids
        collector.add(path, raw, raw[0] - 1 if raw[0] is not None else i, field)
    return _done(path, collector, skips)


def _done(path: Any, collector: _Collector, skips: Skips) -> _Collector:
    if skips.total:
        log.warning("%s: skipped %d bad records %s", path, skips.total, dict(skips.by_field))
    if not collector.rows:
        raise DataError(path, None, None, "no questions")
    return collector


def has_answer_strings(questions: Sequence[Record], dataset: DatasetSpec) -> bool:
    """Whether the questions carry answer strings (BEIR queries do not: then only the gold
    metrics of the dataset's `qrels` are defined); neither answers nor qrels is a `DataError`
    naming the dataset, as no metric would be defined."""
    if any(q.get("answers") for q in questions):
        return True
    if not dataset.qrels.path:
        raise DataError(
            str(dataset.path), None, None,
            "the questions have no answer strings and the dataset no qrels: no metric is"
            " defined (set dataset.qrels.path=FILE)",
        )  # fmt: skip
    return False


def load_dataset_questions(
    dataset: DatasetSpec,
    limit: int | None = None,
    *,
    unmatchable: list[UnmatchablePattern] | None = None,
    skips: Skips | None = None,
) -> list[dict]:
    """The questions of a dataset (`conf/dataset/*.yaml`'s `DatasetSpec`). With `match: regex`, the answer
    patterns are compiled up front as the scorer compiles them: a pattern broken as written
    raises a `DataError`; one that only fails once NFD-normalised is kept (it never matches, as
    in DPR) and logged with its file and line, and appended to `unmatchable` when given.
    `format: beir` reads BEIR `queries.jsonl` (no answers), kept to the ids of the config's
    `qrels` file when it is a BEIR/TREC one.
    `skips` (a `Skips` with the dataset's `on_error` policy) receives the skipped records, so
    the caller can count them in its results."""
    if dataset.format == "beir":
        qrels = dataset.qrels
        beir_qrels = qrels.path and (qrels.format or "beir") != "squad"
        keep = read_qrels(qrels.path) if beir_qrels else None
        limit = limit if limit is not None else dataset.limit
        return load_beir_queries(dataset.path, keep=keep, limit=limit)
    collector = _load(
        dataset.path,
        dataset.format,
        split=dataset.split,
        hf_name=dataset.hf_name,
        limit=limit if limit is not None else dataset.limit,
        id_prefix=dataset.name,
        hf_schema=dataset.hf_schema,
        skips=skips if skips is not None else Skips(dataset.on_error or "raise"),
        keep=article_question_ids(dataset),
    )
    if (dataset.match or "string") == "regex":
        found = check_regex_answers(collector.rows, collector.where)
        if found:
            log.warning(
                "%s: %d regex answers of %d questions never match (they fail to compile once "
                "NFD-normalised; DPR scores them as misses too):\n  %s",
                dataset.path,
                len(found),
                len({u.question_id for u in found}),
                "\n  ".join(map(str, found)),
            )
        if unmatchable is not None:
            unmatchable.extend(found)
    return collector.rows
