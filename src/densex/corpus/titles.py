"""Article title filters: which articles a corpus (and the questions asked of it) keeps.

`TitleFilter.from_spec(spec)` reads a `TitleFilterSpec` (`corpus.titles`, `dataset.titles`):
`include` (null: every article) and `exclude`, each null, a list of titles or a file of them
(a JSON list, or text with one title a line). Titles are compared as passages spell them (SQuAD's
decoded titles: `Brasília`, spaces; `data.squad_articles.passage_title` turns a SQuAD JSON title
into that spelling). `key()` is the filter's content for cache keys (a hash of the sorted titles
of each side; None without a filter), so the same titles key the same units wherever their file
lives. `filter_rows` streams the rows a filter keeps and, once they are exhausted, raises a
`DataError` naming the included titles no row had: a misspelt title must not shrink a corpus
silently. Memory: the filter's titles and those seen, nothing per row.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from densex.corpus.spec import TitleFilterSpec
from densex.utils.io import DataError, numbered_lines, read_json
from densex.utils.logging import get_logger
from densex.utils.records import Record

log = get_logger(__name__)

__all__ = ["TitleFilter", "filter_rows", "read_titles"]


def _titles_file(path: Path) -> list[Any]:
    """A titles file's entries: a JSON list (`.json`), else one title a line (blank lines
    skipped)."""
    if path.suffix == ".json":
        data = read_json(path)
        if not isinstance(data, list):
            raise DataError(path, None, None, "expected a JSON list of titles")
        return data
    return [line.strip() for _, line in numbered_lines(path) if line.strip()]


def read_titles(value: Any, key: str) -> frozenset[str] | None:
    """The titles `value` names (`key`: its config key, for messages): None for null, the
    titles of a list, or of a file (`_titles_file`); a missing file or an entry that is not a
    non-empty string is a located `DataError`."""
    if value is None:
        return None
    if isinstance(value, (list, tuple)):
        entries, where = list(value), key
    else:
        path = Path(os.path.expanduser(str(value)))
        if not path.is_file():
            raise DataError(path, None, None, f"file not found ({key})")
        entries, where = _titles_file(path), str(path)
    for i, title in enumerate(entries):
        if not isinstance(title, str) or not title.strip():
            raise DataError(where, None, f"[{i}]", f"expected a title, got {title!r} ({key})")
    return frozenset(t.strip() for t in entries)


def _digest(titles: frozenset[str] | None) -> str | None:
    if titles is None:
        return None
    blob = json.dumps(sorted(titles), ensure_ascii=False).encode("utf-8")
    return hashlib.sha256(blob).hexdigest()


@dataclass(frozen=True)
class TitleFilter:
    """The titles a `TitleFilterSpec` names: `include` (None: every title) minus `exclude`."""

    include: frozenset[str] | None = None
    exclude: frozenset[str] = frozenset()
    label: str = "titles"  # the config node, for messages (`corpus.titles`)

    @classmethod
    def from_spec(cls, spec: TitleFilterSpec | None, label: str = "titles") -> TitleFilter:
        """The filter `spec` describes (None: none), its files read (`read_titles`)."""
        if spec is None:
            return cls(label=label)
        include = read_titles(spec.include, f"{label}.include")
        exclude = read_titles(spec.exclude, f"{label}.exclude") or frozenset()
        return cls(include, exclude, label)

    @property
    def active(self) -> bool:
        """Whether the filter drops anything at all."""
        return self.include is not None or bool(self.exclude)

    def keep(self, title: str) -> bool:
        """Whether an article of this title is kept."""
        return (self.include is None or title in self.include) and title not in self.exclude

    def key(self) -> dict[str, str | None] | None:
        """The filter's content for cache keys (SHA-256 of each side's sorted titles); None
        when it is not active, so the keys of unfiltered corpora stay as they were."""
        if not self.active:
            return None
        return {"include": _digest(self.include), "exclude": _digest(self.exclude or None)}

    def check_seen(self, seen: Iterable[str], source: str) -> None:
        """After every row of `source` was read: a `DataError` naming the included titles no
        row had; excluded titles no row had are logged (a training split may name articles
        of another corpus)."""
        seen = set(seen)
        if self.include is not None and (unknown := sorted(self.include - seen)):
            raise DataError(
                source, None, f"{self.label}.include",
                f"{len(unknown)} of {len(self.include)} titles match no article: {unknown[:5]}"
                " (titles are spelt as the passages spell them: percent-decoded, spaces)",
            )  # fmt: skip
        if absent := len(self.exclude - seen):
            log.info("%s.exclude: %d titles match no article of %s", self.label, absent, source)


def filter_rows(rows: Iterable[Record], flt: TitleFilter, source: str) -> Iterator[Record]:
    """The rows (passages or documents with a `title`) that `flt` keeps, streamed; once the
    rows are exhausted, `flt.check_seen` (a `DataError` for an included title no row had)."""
    if not flt.active:
        yield from rows
        return
    seen: set[str] = set()
    for row in rows:
        title = str(row.get("title") or "")
        if title in flt.exclude or (flt.include is not None and title in flt.include):
            seen.add(title)
        if flt.keep(title):
            yield row
    flt.check_seen(seen, source)
