"""Read documents (paragraphs) and passages from the formats corpora ship in.

Documents are paragraphs `{"id", "title", "section", "text"}`, the input of segmentation;
passages have the same shape and ids `<document id>-<chunk>`. Sources:
- SQuAD v1.1 JSON: one document per paragraph, id `<Article>#<paragraph>` (the article title as
  written, underscores kept), title with underscores shown as spaces;
- JSONL, one paragraph (or with `paragraph_separator`, one article) per line;
- a Hugging Face `datasets` dataset (hub id, `save_to_disk` directory, or a `Dataset` object),
  with configurable title/text/id/section columns.

This module holds the policy and the fixed-layout files (SQuAD, passages JSONL); the
column-mapped JSONL and `datasets` rows, and `read_documents` (the corpus config's documents
source), are in `corpus.documents`.

Bad input raises a `DataError` naming file, line (or JSON path) and field, unless the policy is
`on_error="skip"`, in which case a `Skips` counter records every skipped item.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Iterator
from typing import Any

from densex.utils.io import DataError, numbered_jsonl, read_json
from densex.utils.logging import get_logger

log = get_logger(__name__)

__all__ = [
    "Skips",
    "iter_passages",
    "iter_proposition_rows",
    "nonempty_text",
    "read_passages",
    "read_squad_documents",
    "why_not_text",
]


class Skips:
    """The `on_error` policy: `"raise"` re-raises each `DataError`; `"skip"` counts it.

    Counts (by field) go into manifests, so a skip is never silent.
    """

    def __init__(self, on_error: str = "raise") -> None:
        if on_error not in ("raise", "skip"):
            raise ValueError(f"on_error must be 'raise' or 'skip', got {on_error!r}")
        self.on_error = on_error
        self.by_field: Counter[str] = Counter()
        self.examples: list[str] = []

    def __call__(self, error: DataError) -> None:
        if self.on_error == "raise":
            raise error
        self.by_field[re.sub(r"\[\d+\]", "[]", error.field or "record")] += 1
        if len(self.examples) < 5:
            self.examples.append(str(error))
            log.warning("skipped: %s", error)

    @property
    def total(self) -> int:
        """Number of items skipped."""
        return sum(self.by_field.values())

    def summary(self) -> dict[str, Any]:
        """`{total, by_field, examples}` for manifests."""
        return {"total": self.total, "by_field": dict(self.by_field), "examples": self.examples}


def nonempty_text(value: Any) -> str | None:
    """`value` when it is a string with a non-space character, else None."""
    return value if isinstance(value, str) and value.strip() else None


def why_not_text(value: Any, missing: bool = False) -> str:
    """Why `value` is not a non-empty string, naming the type found (for `DataError`s)."""
    if missing:
        return "missing"
    if value is None:
        return "null (expected a non-empty string)"
    if not isinstance(value, str):
        return f"expected a string, got {type(value).__name__}"
    return "empty"


def read_squad_documents(
    path: str | os.PathLike, skips: Skips | None = None
) -> Iterator[dict[str, Any]]:
    """One document per SQuAD v1.1 paragraph, id `<Article>#<paragraph index>`."""
    skips = skips or Skips()
    data = read_json(path)
    if not isinstance(data, dict) or not isinstance(data.get("data"), list):
        raise DataError(path, None, "data", "not a SQuAD v1.1 file (no 'data' list)")
    for i, article in enumerate(data["data"]):
        title = article.get("title") if isinstance(article, dict) else None
        if not nonempty_text(title):
            skips(DataError(path, None, f"data[{i}].title", "missing or empty"))
            continue
        paragraphs = article.get("paragraphs")
        if not isinstance(paragraphs, list):
            skips(DataError(path, None, f"data[{i}].paragraphs", "missing or not a list"))
            continue
        for j, paragraph in enumerate(paragraphs):
            context = paragraph.get("context") if isinstance(paragraph, dict) else None
            if not nonempty_text(context):
                skips(
                    DataError(path, None, f"data[{i}].paragraphs[{j}].context", "missing or empty")
                )
                continue
            yield {
                "id": f"{title}#{j}",
                "title": title.replace("_", " "),
                "section": "",
                "text": context,
            }


def read_passages(path: str | os.PathLike, skips: Skips | None = None) -> list[dict[str, Any]]:
    """Passages JSONL `{"id", "title", "section", "text"}`; ids must be unique, text non-empty."""
    return list(iter_passages(path, skips))


def iter_passages(path: str | os.PathLike, skips: Skips | None = None) -> Iterator[dict[str, Any]]:
    """`read_passages`, streamed: one passage at a time (only the ids seen are kept, to refuse
    duplicates: ~100 bytes a passage)."""
    skips = skips or Skips()
    seen: set[str] = set()
    for lineno, row in numbered_jsonl(path, on_error=skips):
        pid = row.get("id")
        if not isinstance(pid, str) or not pid:
            skips(DataError(path, lineno, "id", why_not_text(pid, "id" not in row)))
            continue
        if nonempty_text(row.get("text")) is None:
            why = why_not_text(row.get("text"), "text" not in row)
            skips(DataError(path, lineno, "text", why))
            continue
        if pid in seen:
            skips(DataError(path, lineno, "id", f"duplicate passage id {pid!r}"))
            continue
        seen.add(pid)
        yield {
            "id": pid,
            "title": str(row.get("title") or ""),
            "section": str(row.get("section") or ""),
            "text": row["text"],
        }


def iter_proposition_rows(
    path: str | os.PathLike, skips: Skips | None = None
) -> Iterator[tuple[int, str, list[str]]]:
    """`(line, passage id, propositions)` of each row of a propositions JSONL
    `{"id": passage_id, "propositions": [str, ...]}`, streamed; a row without an id or with
    no usable proposition, and each empty or non-string proposition, is a `DataError` for
    `skips`. Whether the id names a passage is the units builder's check."""
    skips = skips or Skips()
    for lineno, row in numbered_jsonl(path, on_error=skips):
        pid = row.get("id")
        if not isinstance(pid, str) or not pid:
            skips(DataError(path, lineno, "id", why_not_text(pid, "id" not in row)))
            continue
        props = row.get("propositions")
        if not isinstance(props, list):
            why = (
                "missing"
                if "propositions" not in row
                else f"expected a list, got {type(props).__name__}"
            )
            skips(DataError(path, lineno, "propositions", why))
            continue
        kept = []
        for i, p in enumerate(props):
            if isinstance(p, str) and p.strip():
                kept.append(p.strip())
            else:
                skips(DataError(path, lineno, f"propositions[{i}]", "empty or not a string"))
        if not kept:
            skips(DataError(path, lineno, "propositions", "no propositions"))
            continue
        yield lineno, pid, kept
