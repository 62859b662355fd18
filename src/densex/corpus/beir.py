"""BEIR-format corpora: `corpus.jsonl` rows `{"_id", "title", "text"}` -> passages.

Each BEIR document is kept as one passage (id = `_id`), so BEIR qrels address passages
directly; sentence and proposition units are built from them as for any corpus
(`corpus.passages_format: beir`).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

from densex.corpus.readers import Skips
from densex.utils.io import DataError, numbered_jsonl


def iter_beir_corpus(
    path: str | os.PathLike, skips: Skips | None = None
) -> Iterator[dict[str, Any]]:
    """Passages `{"id", "title", "section": "", "text"}` of a BEIR `corpus.jsonl`, streamed
    (only the ids seen are kept, to refuse duplicates); bad rows (missing `_id`/`text`,
    duplicate ids) go through `skips` (raise by default)."""
    skips = skips or Skips()
    seen: set[str] = set()
    for line, row in numbered_jsonl(path, on_error=skips):
        pid, text = row.get("_id"), row.get("text")
        if pid is None or str(pid) == "":
            skips(DataError(path, line, "_id", "missing or empty"))
            continue
        if not isinstance(text, str) or not text.strip():
            skips(DataError(path, line, "text", "missing or empty"))
            continue
        pid = str(pid)
        if pid in seen:
            skips(DataError(path, line, "_id", f"duplicate document id {pid!r}"))
            continue
        seen.add(pid)
        yield {"id": pid, "title": str(row.get("title") or ""), "section": "", "text": text}


def read_beir_corpus(path: str | os.PathLike, skips: Skips | None = None) -> list[dict[str, Any]]:
    """`iter_beir_corpus` as a list (small corpora, tests)."""
    return list(iter_beir_corpus(path, skips))
