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

`match: regex` answers (CuratedTREC) are compiled up front with the scorer's own
`compile_answer_pattern`: a pattern broken as written is a `DataError`; one that compiles as
written but not once NFD-normalised (as DPR and the scorer compile it, e.g. `P\\étain`) never
matches — kept, as in DPR, but counted and logged with its file and line (`UnmatchablePattern`).
"""

from __future__ import annotations

import ast
import csv
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import regex

from densex.corpus.documents import load_hf
from densex.corpus.readers import Skips, why_not_text
from densex.data.beir import load_beir_queries
from densex.data.qrels import read_qrels
from densex.metrics.answers import compile_answer_pattern
from densex.utils.io import DataError, decode_line, numbered_jsonl, read_json
from densex.utils.logging import get_logger

log = get_logger(__name__)

__all__ = [
    "FORMATS",
    "HF_SCHEMAS",
    "UnmatchablePattern",
    "load_dataset_questions",
    "load_questions",
    "questions_from_hf",
]

FORMATS = ("jsonl", "dpr-jsonl", "nq-open", "dpr-tsv", "webq-brmson", "eq", "squad", "hf")
HF_SCHEMAS = ("nq_open", "trivia_qa", "web_questions", "squad", "generic")

# (line, id or None, question, answers, extra fields, field prefix) as read, before validation;
# the prefix locates records of JSON files, which have no useful line numbers ("[12].").
_Raw = tuple[int | None, Any, Any, Any, dict[str, Any], str]


class _Collector:
    """Validates raw records into question rows; errors go through the `on_error` policy."""

    def __init__(self, skips: Skips, id_prefix: str, limit: int | None) -> None:
        self.skips, self.id_prefix, self.limit = skips, id_prefix, limit
        self.rows: list[dict[str, Any]] = []
        self.ids: set[str] = set()
        self.where: dict[str, tuple[Any, int | None, str]] = {}  # id -> (source, line, prefix)

    @property
    def full(self) -> bool:
        return self.limit is not None and len(self.rows) >= self.limit

    def add(self, source: Any, raw: _Raw, index: int, answers_field: str = "answers") -> None:
        line, qid, question, answers, extra, where = raw
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


def _jsonl(path: Path, skips: Skips, id_key: str | None, answers_key: str) -> Iterator[_Raw]:
    for line, row in numbered_jsonl(path, on_error=skips):
        if id_key and id_key not in row:
            skips(DataError(path, line, id_key, "missing"))
            continue
        qid = row.get(id_key) if id_key else None
        yield line, qid, row.get("question"), row.get(answers_key), {}, ""


def _dpr_tsv(path: Path, skips: Skips) -> Iterator[_Raw]:
    if not path.exists():
        raise DataError(path, None, None, "file not found")
    with path.open("rb") as f:  # bytes: a bad byte is a located, skippable error
        offset = 0
        for line, raw in enumerate(f, start=1):
            start, offset = offset, offset + len(raw)
            try:
                text = decode_line(raw, path, line, start)
            except DataError as e:
                skips(e)
                continue
            record = next(csv.reader([text.rstrip("\r\n")], delimiter="\t"), [])
            if not record or (len(record) == 1 and not record[0].strip()):
                continue
            if line == 1 and [c.strip().lower() for c in record] == ["question", "answers"]:
                continue
            if len(record) != 2:
                skips(
                    DataError(
                        path, line, None, f"expected 2 tab-separated columns, got {len(record)}"
                    )
                )
                continue
            try:
                answers = ast.literal_eval(record[1])
            except (ValueError, SyntaxError) as e:
                skips(DataError(path, line, "answers", f"not a Python list literal ({e})"))
                continue
            yield line, None, record[0], answers, {}, ""


def _json_list(path: Path) -> list[Any]:
    data = read_json(path)
    if not isinstance(data, list):
        raise DataError(path, None, None, f"expected a JSON list, got {type(data).__name__}")
    return data


def _item(path: Path, i: int, item: Any, skips: Skips) -> dict[str, Any] | None:
    if not isinstance(item, dict):
        skips(DataError(path, None, f"[{i}]", f"expected an object, got {type(item).__name__}"))
        return None
    return item


def _webq_brmson(path: Path, skips: Skips) -> Iterator[_Raw]:
    for i, item in enumerate(_json_list(path)):
        if (row := _item(path, i, item, skips)) is not None:
            yield None, row.get("qId"), row.get("qText"), row.get("answers"), {}, f"[{i}]."


def _eq_files(path: Path, split: str | None = None) -> list[Path]:
    if path.is_dir():
        pattern = f"P*.{split or 'test'}.json"
        files = sorted(path.glob(pattern)) or ([] if split else sorted(path.glob("*.json")))
        if not files:
            raise DataError(path, None, None, f"no EntityQuestions files ({pattern}) here")
        return files
    if not path.exists():
        raise DataError(path, None, None, "file not found")
    return [path]


def _squad(path: Path, skips: Skips) -> Iterator[_Raw]:
    data = read_json(path)
    if not isinstance(data, dict) or not isinstance(data.get("data"), list):
        raise DataError(path, None, "data", "not a SQuAD v1.1 file (no 'data' list)")
    for i, article in enumerate(data["data"]):
        for j, paragraph in enumerate(article.get("paragraphs") or []):
            for k, qa in enumerate(paragraph.get("qas") or []):
                where = f"data[{i}].paragraphs[{j}].qas[{k}]"
                if not isinstance(qa.get("answers"), list):
                    skips(DataError(path, None, f"{where}.answers", "missing or not a list"))
                    continue
                texts = [a.get("text") if isinstance(a, dict) else None for a in qa["answers"]]
                yield None, qa.get("id"), qa.get("question"), texts, {}, f"{where}."


def _hf_schema(dataset: Any, schema: str | None) -> str:
    if schema:
        if schema not in HF_SCHEMAS:
            raise ValueError(f"unknown hf_schema {schema!r} (one of {HF_SCHEMAS})")
        return schema
    base = str(dataset).rstrip("/").rsplit("/", 1)[-1].lower().replace("-", "_")
    return base if base in HF_SCHEMAS else "generic"


def _hf_answers(schema: str, row: Mapping[str, Any]) -> tuple[Any, Any, str]:
    """(id, answers, answers field) of one HF row in the given column layout."""
    if schema == "nq_open":
        return None, row.get("answer"), "answer"
    if schema == "trivia_qa":
        ans = row.get("answer")
        if not isinstance(ans, Mapping):
            return row.get("question_id"), None, "answer"
        return row.get("question_id"), [ans.get("value"), *(ans.get("aliases") or [])], "answer"
    if schema == "web_questions":
        return None, row.get("answers"), "answers"
    if schema == "squad":
        ans = row.get("answers")
        texts = ans.get("text") if isinstance(ans, Mapping) else None
        return row.get("id"), texts, "answers.text"
    field = "answers" if "answers" in row else "answer"
    return row.get("id"), row.get(field), field


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
    schema = _hf_schema(None, schema)
    collector = _Collector(skips, id_prefix, limit)
    for i, row in enumerate(ds):
        if collector.full:
            break
        qid, answers, field = _hf_answers(schema, row)
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
) -> list[dict[str, Any]]:
    """Load a question set as `{"id", "question", "answers"}` rows (see the module doc).

    Bad records raise a `DataError` naming file, line (or JSON path) and field; with
    `on_error="skip"` they are counted in `skips` (pass one in to read the counts).
    """
    skips = skips or Skips(on_error)
    return _load(
        path, format, split=split, hf_name=hf_name, limit=limit, id_prefix=id_prefix,
        hf_schema=hf_schema, skips=skips,
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
) -> _Collector:
    if format == "hf":
        ds = load_hf(path, hf_name, split)
        schema = _hf_schema(path, hf_schema)
        prefix = id_prefix or _hf_schema(path, None)
        collector = _from_hf(ds, schema, prefix, f"{path}[{split}]", limit, skips)
        return _done(path, collector, skips)
    path = Path(os.path.expanduser(str(path)))
    prefix = id_prefix or path.name.split(".")[0]
    collector = _Collector(skips, prefix, limit)
    if format == "eq":
        for file in _eq_files(path, split):
            relation = file.name.split(".")[0]
            collector.id_prefix = f"{prefix}-{relation}" if path.is_dir() else prefix
            for i, item in enumerate(_json_list(file)):
                if collector.full:
                    break
                if (row := _item(file, i, item, skips)) is not None:
                    extra = {"relation": relation}
                    raw = (None, None, row.get("question"), row.get("answers"), extra, f"[{i}].")
                    collector.add(file, raw, i)
        return _done(path, collector, skips)
    if format == "jsonl":
        records = _jsonl(path, skips, "id", "answers")
    elif format in ("dpr-jsonl", "nq-open"):
        records = _jsonl(path, skips, None, "answer")
    elif format == "dpr-tsv":
        records = _dpr_tsv(path, skips)
    elif format == "webq-brmson":
        records = _webq_brmson(path, skips)
    elif format == "squad":
        records = _squad(path, skips)
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


@dataclass(frozen=True)
class UnmatchablePattern:
    """A regex answer that compiles as written but not as DPR (and `has_answer`) compile it,
    NFD-normalised, so it never matches: `P\\étain` -> `P\\e` + U+0301 ("bad escape \\e")."""

    source: str
    line: int | None  # None for records of JSON files / HF datasets (see `field`)
    field: str
    question_id: str
    pattern: str
    error: str

    def __str__(self) -> str:
        where = f"{self.source}:{self.line}" if self.line is not None else self.source
        return (
            f"{where} {self.field}: question {self.question_id!r}: {self.pattern!r} never "
            f"matches once NFD-normalised ({self.error})"
        )


def _check_regex_answers(collector: _Collector) -> list[UnmatchablePattern]:
    """Compile every answer as the scorer does; raise for a pattern broken as written, and
    return those broken only by the NFD normalisation (DPR scores them as never matching)."""
    unmatchable = []
    for row in collector.rows:
        source, line, where = collector.where[row["id"]]
        for i, pattern in enumerate(row["answers"]):
            field = f"{where}answers[{i}]"
            try:
                compile_answer_pattern(pattern)
                continue
            except regex.error as e:
                error = str(e)
            try:
                regex.compile(pattern)
            except regex.error as e:
                raise DataError(
                    source, line, field, f"question {row['id']!r}: invalid regex {pattern!r} ({e})"
                ) from e
            unmatchable.append(
                UnmatchablePattern(str(source), line, field, row["id"], pattern, error)
            )
    return unmatchable


def load_dataset_questions(
    dataset_cfg: Mapping[str, Any],
    limit: int | None = None,
    *,
    unmatchable: list[UnmatchablePattern] | None = None,
    skips: Skips | None = None,
) -> list[dict]:
    """The questions of a `conf/dataset/*.yaml` entry. With `match: regex`, the answer
    patterns are compiled up front as the scorer compiles them: a pattern broken as written
    raises a `DataError`; one that only fails once NFD-normalised is kept (it never matches, as
    in DPR) and logged with its file and line, and appended to `unmatchable` when given.
    `format: beir` reads BEIR `queries.jsonl` (no answers), kept to the ids of the config's
    `qrels` file when it is a BEIR/TREC one.
    `skips` (a `Skips` with the dataset's `on_error` policy) receives the skipped records, so
    the caller can count them in its results."""
    if dataset_cfg["format"] == "beir":
        qrels = dataset_cfg.get("qrels") or {}
        keep = read_qrels(qrels["path"]) if qrels.get("format", "beir") != "squad" else None
        limit = limit if limit is not None else dataset_cfg.get("limit")
        return load_beir_queries(dataset_cfg["path"], keep=keep, limit=limit)
    collector = _load(
        dataset_cfg["path"],
        dataset_cfg["format"],
        split=dataset_cfg.get("split"),
        hf_name=dataset_cfg.get("hf_name"),
        limit=limit if limit is not None else dataset_cfg.get("limit"),
        id_prefix=dataset_cfg.get("name"),
        hf_schema=dataset_cfg.get("hf_schema"),
        skips=skips if skips is not None else Skips(dataset_cfg.get("on_error") or "raise"),
    )
    if (dataset_cfg.get("match") or "string") == "regex":
        found = _check_regex_answers(collector)
        if found:
            log.warning(
                "%s: %d regex answers of %d questions never match (they fail to compile once "
                "NFD-normalised; DPR scores them as misses too):\n  %s",
                dataset_cfg["path"],
                len(found),
                len({u.question_id for u in found}),
                "\n  ".join(map(str, found)),
            )
        if unmatchable is not None:
            unmatchable.extend(found)
    return collector.rows
