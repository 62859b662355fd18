"""BEIR-format queries: `queries.jsonl` rows `{"_id", "text"}` -> question records.

BEIR (Thakur et al. 2021) ships `corpus.jsonl` (`{"_id", "title", "text"}`, read by
`densex.corpus.beir`), `queries.jsonl` and `qrels/<split>.tsv`. Queries have no answer
strings, so records get `answers: []`: DPR's answer recall is 0 for them and the gold
metrics (`densex.metrics.rank`, qrels) are what measures retrieval.
"""

from __future__ import annotations

import os
from collections.abc import Container
from typing import Any

from densex.utils.io import DataError, numbered_jsonl


def load_beir_queries(
    path: str | os.PathLike,
    *,
    keep: Container[str] | None = None,
    limit: int | None = None,
) -> list[dict[str, Any]]:
    """`{"id", "question", "answers": []}` per query (file order); only ids in `keep` when
    given (a split's qrels). Missing `_id`/`text` or duplicate ids raise a located DataError."""
    rows: list[dict[str, Any]] = []
    seen: set[str] = set()
    for line, row in numbered_jsonl(path):
        qid, text = row.get("_id"), row.get("text")
        if qid is None or str(qid) == "":
            raise DataError(path, line, "_id", "missing or empty")
        if not isinstance(text, str) or not text.strip():
            raise DataError(path, line, "text", "missing or empty")
        qid = str(qid)
        if qid in seen:
            raise DataError(path, line, "_id", f"duplicate query id {qid!r}")
        seen.add(qid)
        if keep is not None and qid not in keep:
            continue
        rows.append({"id": qid, "question": text.strip(), "answers": []})
        if limit is not None and len(rows) >= limit:
            break
    if not rows:
        raise DataError(path, None, None, "no queries")
    return rows
