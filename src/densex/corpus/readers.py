"""Read documents (paragraphs) and passages from the formats corpora ship in.

Documents are paragraphs `{"id", "title", "section", "text"}`, the input of segmentation;
passages have the same shape and ids `<document id>-<chunk>`. Sources:
- SQuAD v1.1 JSON: one document per paragraph, id `<Article>#<paragraph>` (the article title as
  written, underscores kept), title with underscores shown as spaces;
- JSONL, one paragraph (or with `paragraph_separator`, one article) per line;
- a Hugging Face `datasets` dataset (hub id, `save_to_disk` directory, or a `Dataset` object),
  with configurable title/text/id/section columns.

Bad input raises a `DataError` naming file, line (or JSON path) and field, unless the policy is
`on_error="skip"`, in which case a `Skips` counter records every skipped item.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from densex.utils.io import DataError, numbered_jsonl, read_json
from densex.utils.logging import get_logger

log = get_logger(__name__)

__all__ = [
    "Skips",
    "load_hf",
    "read_documents",
    "read_hf_documents",
    "read_jsonl_documents",
    "iter_passages",
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
        return sum(self.by_field.values())

    def summary(self) -> dict[str, Any]:
        return {"total": self.total, "by_field": dict(self.by_field), "examples": self.examples}


def _text(value: Any) -> str | None:
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
        if not _text(title):
            skips(DataError(path, None, f"data[{i}].title", "missing or empty"))
            continue
        paragraphs = article.get("paragraphs")
        if not isinstance(paragraphs, list):
            skips(DataError(path, None, f"data[{i}].paragraphs", "missing or not a list"))
            continue
        for j, paragraph in enumerate(paragraphs):
            context = paragraph.get("context") if isinstance(paragraph, dict) else None
            if not _text(context):
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


def _rows_to_documents(
    rows: Iterable[tuple[int | None, Mapping[str, Any]]],
    source: str | os.PathLike,
    title_column: str,
    text_column: str,
    id_column: str | None,
    section_column: str | None,
    paragraph_separator: str | None,
    skips: Skips,
) -> Iterator[dict[str, Any]]:
    """Map (line, row) pairs to documents; without an id column, ids are `<title>#<k>` with k
    counting that title's paragraphs, the scheme of the SQuAD reader."""
    per_title: Counter[str] = Counter()
    row_index = 0
    for line, row in rows:
        # JSONL rows are located by line; dataset rows (line None) by index, as a field prefix
        where = f"[{row_index}]." if line is None else ""
        row_index += 1
        if title_column not in row or not isinstance(row[title_column], str):
            why = why_not_text(row.get(title_column), title_column not in row)
            skips(DataError(source, line, where + title_column, why))
            continue
        text = _text(row.get(text_column))
        if text is None:
            why = why_not_text(row.get(text_column), text_column not in row)
            skips(DataError(source, line, where + text_column, why))
            continue
        title = row[title_column].strip()
        section = str(row.get(section_column) or "") if section_column else ""
        paragraphs = (
            [p.strip() for p in text.split(paragraph_separator) if p.strip()]
            if paragraph_separator
            else [text]
        )
        base = None
        if id_column:
            if row.get(id_column) in (None, ""):
                skips(DataError(source, line, where + id_column, "missing or empty"))
                continue
            base = str(row[id_column])
        for k, paragraph in enumerate(paragraphs):
            if base is not None:
                doc_id = f"{base}#{k}" if paragraph_separator else base
            else:
                key = title.replace(" ", "_")
                doc_id = f"{key}#{per_title[key]}"
                per_title[key] += 1
            yield {"id": doc_id, "title": title, "section": section, "text": paragraph}


def read_jsonl_documents(
    path: str | os.PathLike,
    title_column: str = "title",
    text_column: str = "text",
    id_column: str | None = None,
    section_column: str | None = "section",
    paragraph_separator: str | None = None,
    skips: Skips | None = None,
) -> Iterator[dict[str, Any]]:
    """Documents from JSONL, one paragraph (or article, with `paragraph_separator`) per line."""
    skips = skips or Skips()
    yield from _rows_to_documents(
        numbered_jsonl(path, on_error=skips),
        path,
        title_column,
        text_column,
        id_column,
        section_column,
        paragraph_separator,
        skips,
    )


def load_hf(dataset: Any, name: str | None = None, split: str | None = None, **kwargs: Any) -> Any:
    """A `datasets.Dataset` from an object, a `save_to_disk` directory, or a hub id."""
    import datasets

    local = Path(os.path.expanduser(str(dataset))) if isinstance(dataset, (str, Path)) else None
    if isinstance(dataset, (datasets.Dataset, datasets.DatasetDict)):
        ds = dataset
    elif (
        local is not None
        and local.is_dir()
        and any(
            (local / f).exists() for f in ("dataset_info.json", "dataset_dict.json", "state.json")
        )
    ):
        ds = datasets.load_from_disk(str(local))
    else:
        ds = datasets.load_dataset(str(dataset), name, split=split, **kwargs)
    if isinstance(ds, datasets.DatasetDict):
        if split is None:
            raise ValueError(f"{dataset}: has splits {list(ds)}; choose one with split=")
        ds = ds[split]
    return ds


def read_hf_documents(
    dataset: Any,
    name: str | None = None,
    split: str | None = "train",
    title_column: str = "title",
    text_column: str = "text",
    id_column: str | None = None,
    section_column: str | None = None,
    paragraph_separator: str | None = None,
    limit: int | None = None,
    revision: str | None = None,
    skips: Skips | None = None,
) -> Iterator[dict[str, Any]]:
    """Documents from a Hugging Face dataset; errors name the dataset and row index."""
    ds = load_hf(dataset, name, split, **({"revision": revision} if revision else {}))
    missing = [c for c in (title_column, text_column) if c not in ds.column_names]
    source = f"{dataset if isinstance(dataset, str) else 'dataset'}[{split}]"
    if missing:
        raise DataError(source, None, missing[0], f"no such column (columns: {ds.column_names})")
    if limit is not None:
        ds = ds.select(range(min(limit, len(ds))))
    rows = ((None, row) for row in ds)
    yield from _rows_to_documents(
        rows,
        source,
        title_column,
        text_column,
        id_column,
        section_column,
        paragraph_separator,
        skips or Skips(),
    )


def read_documents(corpus_cfg: Mapping[str, Any], skips: Skips | None = None) -> Iterator[dict]:
    """Documents of a corpus config: `documents` + `documents_format` (squad | jsonl | hf)."""
    fmt = corpus_cfg.get("documents_format", "squad")
    src = corpus_cfg.get("documents")
    if not src:
        raise ValueError(
            f"corpus {corpus_cfg.get('name')!r}: neither 'passages' nor 'documents' is set"
        )
    cols = {
        "title_column": corpus_cfg.get("title_column", "title"),
        "text_column": corpus_cfg.get("text_column", "text"),
        "id_column": corpus_cfg.get("id_column"),
        "paragraph_separator": corpus_cfg.get("paragraph_separator"),
        "skips": skips,
    }
    if fmt == "squad":
        return read_squad_documents(src, skips)
    if fmt == "jsonl":
        return read_jsonl_documents(
            src, section_column=corpus_cfg.get("section_column", "section"), **cols
        )
    if fmt == "hf":
        return read_hf_documents(
            src,
            name=corpus_cfg.get("hf_name"),
            split=corpus_cfg.get("split", "train"),
            section_column=corpus_cfg.get("section_column"),
            limit=corpus_cfg.get("limit"),
            revision=corpus_cfg.get("revision"),
            **cols,
        )
    raise ValueError(f"unknown documents_format {fmt!r} (squad | jsonl | hf)")


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
        if _text(row.get("text")) is None:
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
