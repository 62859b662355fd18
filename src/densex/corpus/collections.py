"""Stream ready-made retrieval collections (passages, or units of one granularity) in batches.

A *source* is one collection, described by a mapping (a node of `conf/corpus/*.yaml`, e.g.
`corpus.sources.proposition` of `conf/corpus/factoid-wiki.yaml`):

    path:     a JSONL file (`.jsonl`, `.json`, `.gz`), a directory of such files (read in
              sorted order, recursively: a pyserini collection or a hub snapshot), a
              `datasets.save_to_disk` directory, or a Hugging Face hub id (streamed)
    format:   auto (default: from `path` as above) | jsonl | hf
    split / hf_name / revision:          hub and save_to_disk datasets (split default train)
    id_column:                           default "id"
    contents_column:                     default "contents" (pyserini JsonCollection)
    title_column / text_column:          default "title" / "text", used when a row has no
                                         `contents_column` (pyserini `{"id","title","text"}`)
    title_separator:                     default "\\n": `contents` = title + separator + text
                                         (pyserini's Wikipedia layout; a title in double
                                         quotes loses them); null = contents is all text
    passage_id_column:                   units: a column holding the passage id, or null
    passage_id_pattern:                  units without that column: a regex on the unit id
                                         whose group `passage_id` (else group 1) is the
                                         passage id, e.g. '^(?P<passage_id>.+)::p\\d+$'
    limit:                               keep only the first N rows (quick runs); null = all

Rows are yielded in batches of plain dicts: passages `{"id","title","section","text"}`,
units `{"id","passage_id","text"}`. Nothing holds a whole file or dataset in memory: JSONL is
read line by line, saved datasets are memory-mapped Arrow read a batch at a time, hub datasets
are opened with `streaming=True`. A bad row is a `DataError(file, line, field)` handed to the
`Skips` policy (raise, or count and skip); dataset rows are located as `[row index].field`.
"""

from __future__ import annotations

import itertools
import json
import os
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from densex.corpus.readers import Skips, why_not_text
from densex.utils.io import DataError, decode_line
from densex.utils.shards import batched

__all__ = [
    "iter_passage_batches",
    "iter_unit_batches",
    "passage_id_rule",
    "source_files",
    "source_format",
]

_HF_MARKERS = ("dataset_info.json", "dataset_dict.json", "state.json")
_JSONL_SUFFIXES = (".jsonl", ".jsonl.gz", ".json", ".json.gz", ".jsonl.bz2")

Row = tuple[str, int | None, Mapping[str, Any]]  # (source, line or None, row)


def _get(cfg: Mapping[str, Any], key: str, default: Any = None) -> Any:
    value = cfg.get(key, default) if cfg is not None else default
    return default if value is None and default is not None else value


def _expand(path: Any) -> Path:
    return Path(os.path.expanduser(os.path.expandvars(str(path))))


def source_format(source_cfg: Mapping[str, Any]) -> str:
    """`jsonl` (a file or a directory of JSONL files), `hf_disk` (a `save_to_disk` dir) or
    `hf_hub` (anything else: a hub id), from `format` and `path`."""
    path = _get(source_cfg, "path")
    if path in (None, "", "???"):
        raise ValueError("collection source: set `path` (file, directory or hub id)")
    fmt = str(_get(source_cfg, "format", "auto"))
    local = _expand(path)
    is_hf_dir = local.is_dir() and any((local / m).exists() for m in _HF_MARKERS)
    if fmt == "auto":
        if is_hf_dir:
            return "hf_disk"
        return "jsonl" if local.exists() else "hf_hub"
    if fmt == "jsonl":
        if not local.exists():
            raise DataError(local, None, None, "file or directory not found")
        return "jsonl"
    if fmt == "hf":
        return "hf_disk" if is_hf_dir else "hf_hub"
    raise ValueError(f"collection format must be auto | jsonl | hf, got {fmt!r}")


def source_files(path: str | os.PathLike) -> list[Path]:
    """The JSONL files of a source path: the file itself, or a directory's `*.jsonl`,
    `*.jsonl.gz`, `*.json`(`.gz`) files, recursively, in sorted order (pyserini collections,
    hub snapshots)."""
    root = _expand(path)
    if root.is_file():
        return [root]
    if not root.is_dir():
        raise DataError(root, None, None, "file or directory not found")
    files = sorted(
        p
        for p in root.rglob("*")
        if p.is_file() and p.name.endswith(_JSONL_SUFFIXES) and p.name not in _HF_MARKERS
    )
    if not files:
        raise DataError(root, None, None, f"no {' / '.join(_JSONL_SUFFIXES)} files")
    return files


def _open_bytes(path: Path) -> Any:
    if path.name.endswith(".gz"):
        import gzip

        return gzip.open(path, "rb")
    if path.name.endswith(".bz2"):
        import bz2

        return bz2.open(path, "rb")
    return path.open("rb")


def _jsonl_rows(path: Path, skips: Skips) -> Iterator[Row]:
    """(file, line, object) per JSON line, streamed (compressed files too)."""
    with _open_bytes(path) as f:
        for lineno, raw in enumerate(f, start=1):
            try:
                line = decode_line(raw, path, lineno)
                if not line.strip():
                    continue
                row = json.loads(line)
            except json.JSONDecodeError as e:
                skips(DataError(path, lineno, None, f"invalid JSON ({e.msg} at column {e.colno})"))
                continue
            except DataError as e:
                skips(e)
                continue
            if not isinstance(row, dict):
                skips(DataError(path, lineno, None, f"expected a JSON object, got {type(row).__name__}"))  # fmt: skip
                continue
            yield str(path), lineno, row


def _hf_rows(source_cfg: Mapping[str, Any], fmt: str) -> Iterator[Row]:
    """Rows of a saved (memory-mapped, read a batch at a time) or streamed hub dataset,
    located as `<source>[split]` + row index."""
    import datasets

    path = str(_get(source_cfg, "path"))
    split = _get(source_cfg, "split", "train")
    if fmt == "hf_disk":
        ds = datasets.load_from_disk(str(_expand(path)))
    else:
        kwargs: dict[str, Any] = {"streaming": True}
        if _get(source_cfg, "revision"):
            kwargs["revision"] = str(source_cfg["revision"])
        ds = datasets.load_dataset(path, _get(source_cfg, "hf_name"), split=split, **kwargs)
    if isinstance(ds, (datasets.DatasetDict, datasets.IterableDatasetDict)):
        if split not in ds:
            raise DataError(path, None, "split", f"no split {split!r} (splits: {list(ds)})")
        ds = ds[split]
    source = f"{path}[{split}]"
    for batch in ds.iter(batch_size=1024):
        columns = list(batch)
        n = len(batch[columns[0]]) if columns else 0
        for i in range(n):
            yield source, None, {c: batch[c][i] for c in columns}


def _rows(source_cfg: Mapping[str, Any], skips: Skips) -> Iterator[tuple[Row, int]]:
    """(row, row index) over every row of the source, `limit` applied."""
    fmt = source_format(source_cfg)
    if fmt == "jsonl":
        rows: Iterator[Row] = itertools.chain.from_iterable(
            _jsonl_rows(p, skips) for p in source_files(source_cfg["path"])
        )
    else:
        rows = _hf_rows(source_cfg, fmt)
    limit = _get(source_cfg, "limit")
    numbered = zip(rows, itertools.count())
    return itertools.islice(numbered, int(limit)) if limit is not None else numbered


def _where(line: int | None, index: int, field: str) -> str:
    # JSONL rows are located by line; dataset rows (line None) by index, as a field prefix
    return field if line is not None else f"[{index}].{field}"


def _row_id(row: Mapping[str, Any], source: str, line: int | None, index: int,
            id_column: str, skips: Skips) -> str | None:  # fmt: skip
    value = row.get(id_column)
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str) or not value.strip():
        skips(DataError(source, line, _where(line, index, id_column),
                        why_not_text(value, id_column not in row)))  # fmt: skip
        return None
    return value


def _title_text(
    row: Mapping[str, Any],
    source: str,
    line: int | None,
    index: int,
    cfg: Mapping[str, Any],
    skips: Skips,
) -> tuple[str, str] | None:
    """(title, text) of a row: pyserini `contents` (title + separator + text) or
    title/text columns; None (after a skip) when there is no text."""
    contents_column = str(_get(cfg, "contents_column", "contents"))
    title_column = str(_get(cfg, "title_column", "title"))
    text_column = str(_get(cfg, "text_column", "text"))
    if contents_column in row:
        contents = row[contents_column]
        if not isinstance(contents, str) or not contents.strip():
            skips(DataError(source, line, _where(line, index, contents_column),
                            why_not_text(contents)))  # fmt: skip
            return None
        sep = cfg.get("title_separator", "\n") if cfg is not None else "\n"
        title, text = "", contents
        if sep and sep in contents:
            head, tail = contents.split(sep, 1)
            if tail.strip():
                title, text = head.strip(), tail
        if len(title) > 1 and title[0] == title[-1] == '"':
            title = title[1:-1]  # pyserini's Wikipedia collections quote the title
        return title, text.strip()
    text = row.get(text_column)
    if not isinstance(text, str) or not text.strip():
        missing = text_column not in row
        field = text_column if not missing else f"{contents_column}|{text_column}"
        skips(DataError(source, line, _where(line, index, field), why_not_text(text, missing)))
        return None
    title = row.get(title_column)
    return (title.strip() if isinstance(title, str) else ""), text.strip()


def iter_passage_batches(
    source_cfg: Mapping[str, Any], skips: Skips | None, batch_size: int
) -> Iterator[list[dict[str, Any]]]:
    """Passages `{"id", "title", "section", "text"}` of one collection, `batch_size` at a time.

    Rows are pyserini `{"id", "contents"}` (contents = title + `title_separator` + text) or
    `{"id", "title", "text"}` (column names configurable; `section_column` optional). A row
    without a usable id or text is a `DataError` for `skips` (default: raise). Ids are not
    checked for uniqueness here (that needs memory proportional to the corpus: the units
    builder does it on its id column).
    """
    skips = skips or Skips()
    id_column = str(_get(source_cfg, "id_column", "id"))
    section_column = _get(source_cfg, "section_column")

    def passages() -> Iterator[dict[str, Any]]:
        for (source, line, row), index in _rows(source_cfg, skips):
            pid = _row_id(row, source, line, index, id_column, skips)
            if pid is None:
                continue
            title_text = _title_text(row, source, line, index, source_cfg, skips)
            if title_text is None:
                continue
            section = row.get(section_column) if section_column else None
            yield {
                "id": pid,
                "title": title_text[0],
                "section": section if isinstance(section, str) else "",
                "text": title_text[1],
            }

    return batched(passages(), batch_size)


def passage_id_rule(source_cfg: Mapping[str, Any]) -> tuple[str | None, re.Pattern[str] | None]:
    """The unit -> passage mapping of a source: (`passage_id_column`, None) or
    (None, compiled `passage_id_pattern`); a ValueError when neither is set."""
    column = _get(source_cfg, "passage_id_column")
    if column:
        return str(column), None
    pattern = _get(source_cfg, "passage_id_pattern")
    if not pattern:
        raise ValueError(
            "units need a passage mapping: set passage_id_column (a column with the passage"
            " id) or passage_id_pattern (a regex on the unit id, group 'passage_id' or 1)"
        )
    compiled = re.compile(str(pattern))
    if compiled.groups < 1:
        raise ValueError(f"passage_id_pattern {pattern!r} has no group for the passage id")
    return None, compiled


def _passage_of(unit_id: str, pattern: re.Pattern[str]) -> str | None:
    m = pattern.fullmatch(unit_id)
    if m is None:
        return None
    pid = m.group("passage_id") if "passage_id" in pattern.groupindex else m.group(1)
    return pid or None


def iter_unit_batches(
    source_cfg: Mapping[str, Any], skips: Skips | None, batch_size: int
) -> Iterator[list[dict[str, Any]]]:
    """Units `{"id", "passage_id", "text"}` of one collection, `batch_size` at a time.

    The passage id comes from `passage_id_column` when set, else from `passage_id_pattern`
    matched against the whole unit id (group `passage_id`, else group 1). Text is the row's
    text (pyserini `contents` without its title line, or the `text_column`). A unit whose id,
    text or passage id cannot be read is a `DataError` for `skips`. Whether the passage id
    exists among the passages is the units builder's check (it holds the passage id index).
    """
    skips = skips or Skips()
    id_column = str(_get(source_cfg, "id_column", "id"))
    column, pattern = passage_id_rule(source_cfg)

    def units() -> Iterator[dict[str, Any]]:
        for (source, line, row), index in _rows(source_cfg, skips):
            uid = _row_id(row, source, line, index, id_column, skips)
            if uid is None:
                continue
            if column is not None:
                pid = _row_id(row, source, line, index, column, skips)
            else:
                assert pattern is not None
                pid = _passage_of(uid, pattern)
                if pid is None:
                    skips(DataError(source, line, _where(line, index, id_column),
                                    f"unit id {uid!r} does not match passage_id_pattern"
                                    f" {pattern.pattern!r}"))  # fmt: skip
            if pid is None:
                continue
            title_text = _title_text(row, source, line, index, source_cfg, skips)
            if title_text is None:
                continue
            yield {"id": uid, "passage_id": pid, "text": title_text[1]}

    return batched(units(), batch_size)
