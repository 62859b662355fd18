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
units `{"id","passage_id","text"}`, streamed (`corpus.collection_rows` reads the raw rows;
nothing holds a whole file or dataset in memory). A bad row is a `DataError(file, line,
field)` handed to the `Skips` policy (raise, or count and skip); dataset rows are located as
`[row index].field`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from densex.corpus.collection_rows import source_rows, source_setting
from densex.corpus.readers import Skips, why_not_text
from densex.utils.io import DataError
from densex.utils.records import Record
from densex.utils.shards import batched

__all__ = [
    "iter_passage_batches",
    "iter_unit_batches",
    "passage_id_rule",
]


def _where(line: int | None, index: int, field: str) -> str:
    # JSONL rows are located by line; dataset rows (line None) by index, as a field prefix
    return field if line is not None else f"[{index}].{field}"


def _row_id(row: Record, source: str, line: int | None, index: int,
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
    row: Record,
    source: str,
    line: int | None,
    index: int,
    cfg: dict[str, Any],
    skips: Skips,
) -> tuple[str, str] | None:
    """(title, text) of a row: pyserini `contents` (title + separator + text) or
    title/text columns; None (after a skip) when there is no text."""
    contents_column = str(source_setting(cfg, "contents_column", "contents"))
    title_column = str(source_setting(cfg, "title_column", "title"))
    text_column = str(source_setting(cfg, "text_column", "text"))
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
    source_cfg: dict[str, Any], skips: Skips | None, batch_size: int
) -> Iterator[list[dict[str, Any]]]:
    """Passages `{"id", "title", "section", "text"}` of one collection, `batch_size` at a time.

    Rows are pyserini `{"id", "contents"}` (contents = title + `title_separator` + text) or
    `{"id", "title", "text"}` (column names configurable; `section_column` optional). A row
    without a usable id or text is a `DataError` for `skips` (default: raise). Ids are not
    checked for uniqueness here (that needs memory proportional to the corpus: the units
    builder does it on its id column).
    """
    skips = skips or Skips()
    id_column = str(source_setting(source_cfg, "id_column", "id"))
    section_column = source_setting(source_cfg, "section_column")

    def passages() -> Iterator[dict[str, Any]]:
        for (source, line, row), index in source_rows(source_cfg, skips):
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


def passage_id_rule(source_cfg: dict[str, Any]) -> tuple[str | None, re.Pattern[str] | None]:
    """The unit -> passage mapping of a source: (`passage_id_column`, None) or
    (None, compiled `passage_id_pattern`); a ValueError when neither is set."""
    column = source_setting(source_cfg, "passage_id_column")
    if column:
        return str(column), None
    pattern = source_setting(source_cfg, "passage_id_pattern")
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
    source_cfg: dict[str, Any], skips: Skips | None, batch_size: int
) -> Iterator[list[dict[str, Any]]]:
    """Units `{"id", "passage_id", "text"}` of one collection, `batch_size` at a time.

    The passage id comes from `passage_id_column` when set, else from `passage_id_pattern`
    matched against the whole unit id (group `passage_id`, else group 1). Text is the row's
    text (pyserini `contents` without its title line, or the `text_column`). A unit whose id,
    text or passage id cannot be read is a `DataError` for `skips`. Whether the passage id
    exists among the passages is the units builder's check (it holds the passage id index).
    """
    skips = skips or Skips()
    id_column = str(source_setting(source_cfg, "id_column", "id"))
    column, pattern = passage_id_rule(source_cfg)

    def units() -> Iterator[dict[str, Any]]:
        for (source, line, row), index in source_rows(source_cfg, skips):
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
