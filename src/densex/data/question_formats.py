"""Readers of the question file formats: each yields raw records, validated by the caller.

A raw record (`RawQuestion`) is `(line, id or None, question, answers, extra fields, field
prefix)` as read, before validation; the prefix locates records of JSON files, which have no
useful line numbers (`"[12]."`). Bad lines go to the `skips` policy (`corpus.readers.Skips`);
a file that cannot be read at all is a `DataError`. The formats and their layouts are listed in
`data.questions`.
"""

from __future__ import annotations

import ast
import csv
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from densex.corpus.readers import Skips
from densex.utils.io import DataError, numbered_jsonl, numbered_lines, read_json
from densex.utils.records import Record

HF_SCHEMAS = ("nq_open", "trivia_qa", "web_questions", "squad", "generic")

RawQuestion = tuple[int | None, Any, Any, Any, dict[str, Any], str]


def jsonl_records(
    path: Path, skips: Skips, id_key: str | None, answers_key: str
) -> Iterator[RawQuestion]:
    """Records of a JSONL file: `id_key` (None: no ids; a row without it goes to `skips`) and
    `answers_key` name the id and answers fields."""
    for line, row in numbered_jsonl(path, on_error=skips):
        if id_key and id_key not in row:
            skips(DataError(path, line, id_key, "missing"))
            continue
        qid = row.get(id_key) if id_key else None
        yield line, qid, row.get("question"), row.get(answers_key), {}, ""


def dpr_tsv_records(path: Path, skips: Skips) -> Iterator[RawQuestion]:
    """Records of a DPR TSV file (`question<TAB>['ans', ...]`, CSV quoting allowed; a header line
    `question`, `answers` is skipped)."""
    for line, text in numbered_lines(path, on_error=skips):  # a bad byte: located, skippable
        try:
            record = next(csv.reader([text.rstrip("\r\n")], delimiter="\t"), [])
        except csv.Error as e:
            skips(DataError(path, line, None, f"not a tab-separated line ({e})"))
            continue
        if not record or (len(record) == 1 and not record[0].strip()):
            continue
        if line == 1 and [c.strip().lower() for c in record] == ["question", "answers"]:
            continue
        if len(record) != 2:
            skips(
                DataError(path, line, None, f"expected 2 tab-separated columns, got {len(record)}")
            )
            continue
        try:
            answers = ast.literal_eval(record[1])
        except (ValueError, SyntaxError) as e:
            skips(DataError(path, line, "answers", f"not a Python list literal ({e})"))
            continue
        yield line, None, record[0], answers, {}, ""


def json_list(path: Path) -> list[Any]:
    """The JSON list in `path` (anything else is a `DataError`)."""
    data = read_json(path)
    if not isinstance(data, list):
        raise DataError(path, None, None, f"expected a JSON list, got {type(data).__name__}")
    return data


def json_object(path: Path, i: int, item: Any, skips: Skips) -> dict[str, Any] | None:
    """`item` (element `i` of a JSON list) when it is an object, else None (skipped)."""
    if not isinstance(item, dict):
        skips(DataError(path, None, f"[{i}]", f"expected an object, got {type(item).__name__}"))
        return None
    return item


def webq_brmson_records(path: Path, skips: Skips) -> Iterator[RawQuestion]:
    """Records of a WebQuestions (brmson) JSON list of `{"qId", "qText", "answers"}`."""
    for i, item in enumerate(json_list(path)):
        if (row := json_object(path, i, item, skips)) is not None:
            yield None, row.get("qId"), row.get("qText"), row.get("answers"), {}, f"[{i}]."


def eq_files(path: Path, split: str | None = None) -> list[Path]:
    """The EntityQuestions files: `P*.{split}.json` of a directory (`split` None: `test`, else
    any `*.json` there), or the one file given."""
    if path.is_dir():
        pattern = f"P*.{split or 'test'}.json"
        files = sorted(path.glob(pattern)) or ([] if split else sorted(path.glob("*.json")))
        if not files:
            raise DataError(path, None, None, f"no EntityQuestions files ({pattern}) here")
        return files
    if not path.exists():
        raise DataError(path, None, None, "file not found")
    return [path]


def squad_records(path: Path, skips: Skips) -> Iterator[RawQuestion]:
    """Records of a SQuAD v1.1 file: every qa, answers = its answer texts."""
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


def resolve_hf_schema(dataset: Any, schema: str | None) -> str:
    """The column layout: `schema` when given (one of `HF_SCHEMAS`), else the dataset's name
    when it is one, else `generic`."""
    if schema:
        if schema not in HF_SCHEMAS:
            raise ValueError(f"unknown hf_schema {schema!r} (one of {HF_SCHEMAS})")
        return schema
    base = str(dataset).rstrip("/").rsplit("/", 1)[-1].lower().replace("-", "_")
    return base if base in HF_SCHEMAS else "generic"


def hf_answers(schema: str, row: Record) -> tuple[Any, Any, str]:
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
