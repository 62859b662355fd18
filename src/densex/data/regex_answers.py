"""Regex answers (CuratedTREC) checked as the scorer compiles them.

`check_regex_answers` compiles every answer with `metrics.answers.compile_answer_pattern`: a
pattern broken as written is a `DataError`; one that compiles as written but not once
NFD-normalised (as DPR and the scorer compile it, e.g. `P\\étain`) never matches: kept, as in
DPR, and returned as an `UnmatchablePattern` naming its file and line.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import regex

from densex.metrics.answers import compile_answer_pattern
from densex.utils.io import DataError
from densex.utils.records import Record


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


def check_regex_answers(
    rows: Sequence[Record], where: Mapping[str, tuple[Any, int | None, str]]
) -> list[UnmatchablePattern]:
    """Compile every answer of `rows` as the scorer does; raise a `DataError` for a pattern
    broken as written, and return those broken only by the NFD normalisation (DPR scores them
    as never matching). `where` maps a question id to its (source, line, field prefix)."""
    unmatchable = []
    for row in rows:
        source, line, where_ = where[row["id"]]
        for i, pattern in enumerate(row["answers"]):
            field = f"{where_}answers[{i}]"
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
