"""Documents from column-mapped rows (JSONL, Hugging Face `datasets`) and the corpus's source.

Rows `{title_column, text_column, id_column?, section_column?}` become documents
`{"id", "title", "section", "text"}`: one per row, or with `paragraph_separator` one per
paragraph of the row's text (ids `<id>#<k>`); without an id column, ids are `<title>#<k>`, k
counting that title's paragraphs (the SQuAD reader's scheme). `read_documents(corpus)`
dispatches on `corpus.documents_format` (squad | jsonl | hf). A bad row is a located
`DataError` (JSONL: file and line; datasets: `[row index].field`) for `Skips`.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from densex.corpus.readers import Skips, nonempty_text, read_squad_documents, why_not_text
from densex.corpus.spec import CorpusSpec
from densex.utils.io import DataError, numbered_jsonl
from densex.utils.records import Record

__all__ = ["load_hf", "read_documents", "read_hf_documents", "read_jsonl_documents"]


def _rows_to_documents(
    rows: Iterable[tuple[int | None, Record]],
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
        text = nonempty_text(row.get(text_column))
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
    import datasets  # ~1 s to import: only the hf formats need it

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


def read_documents(corpus: CorpusSpec, skips: Skips | None = None) -> Iterator[dict]:
    """Documents of a corpus: `documents` + `documents_format` (squad | jsonl | hf)."""
    fmt = corpus.documents_format
    src = corpus.documents
    if not src:
        raise ValueError(f"corpus {corpus.name!r}: neither 'passages' nor 'documents' is set")
    cols = {
        "title_column": corpus.title_column,
        "text_column": corpus.text_column,
        "id_column": corpus.id_column,
        "paragraph_separator": corpus.paragraph_separator,
        "skips": skips,
    }
    if fmt == "squad":
        return read_squad_documents(src, skips)
    if fmt == "jsonl":
        return read_jsonl_documents(src, section_column=corpus.section_column, **cols)
    if fmt == "hf":
        return read_hf_documents(
            src,
            name=corpus.hf_name,
            split=corpus.split,
            section_column=corpus.section_column,
            limit=corpus.limit,
            revision=corpus.revision,
            **cols,
        )
    raise ValueError(f"unknown documents_format {fmt!r} (squad | jsonl | hf)")
